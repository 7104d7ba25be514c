"""``manage.py test_endpoint ENDPOINT``: call an endpoint once and show the answer."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from endpoints.management.commands import runs
from endpoints.management.commands._shared import add_endpoint_argument, find_endpoint, to_json
from endpoints.models import Run, RunStatus
from endpoints.operations import OperationRefused, test_endpoint
from endpoints.wording import count_words


class Command(BaseCommand):
    help = (
        "Call an endpoint once now and print the status, HTTP code, duration and response "
        "body. The call is recorded as a 'test' run; the schedule is not touched, and it "
        "works while the endpoint is paused. Exits non-zero when the call failed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_endpoint_argument(parser)
        parser.add_argument(
            "--lines",
            type=int,
            default=40,
            help="Show at most this many lines of the body (default 40; 0 for all).",
        )
        parser.add_argument("--json", action="store_true", help="JSON, with the body.")

    def handle(self, *args: Any, **options: Any) -> None:
        endpoint = find_endpoint(options["endpoint"])
        try:
            run = test_endpoint(endpoint)
        except OperationRefused as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(to_json({**runs.as_json(run), "response_body": run.response_body}))
        else:
            self.stdout.write(as_text(endpoint.ref, run, max_lines=options["lines"]))
        if run.status != RunStatus.SUCCESS:
            raise CommandError(f"The test call failed ({run.status}): {run.error or 'see above'}")


def as_text(ref: str, run: Run, *, max_lines: int) -> str:
    code = f" HTTP {run.status_code}" if run.status_code else ""
    head = f"{ref}: {run.status}{code} in {run.duration_ms} ms (run {run.pk})"
    if run.error:
        head += f"\nerror: {run.error}"
    body = body_text(run.response_body)
    lines = body.splitlines()
    if max_lines and len(lines) > max_lines:
        lines = [
            *lines[:max_lines],
            f"… {count_words(len(lines) - max_lines, 'more line')}; use --lines 0",
        ]
    if run.response_truncated:
        lines.append(f"(cut at the endpoint's {run.response_size_bytes} byte cap)")
    return "\n".join([head, *lines])


def body_text(body: Any) -> str:
    if body is None or body == "":
        return "(empty body)"
    if isinstance(body, str):
        return body
    return json.dumps(body, indent=2, ensure_ascii=False)
