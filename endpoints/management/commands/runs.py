"""``manage.py runs ENDPOINT``: an endpoint's recent runs."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from endpoints.management.commands._shared import (
    add_endpoint_argument,
    find_endpoint,
    iso,
    table,
    to_json,
)
from endpoints.models import Run, RunStatus
from endpoints.wording import count_words, duration_words


class Command(BaseCommand):
    help = (
        "Show an endpoint's latest runs, newest first: when it started, trigger, the "
        "governor source that scheduled it, status, HTTP code, duration, how late it "
        "started and the error; a retry names the run it retries. --status keeps one "
        "outcome; --body adds each run's (truncated) response body."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_endpoint_argument(parser)
        parser.add_argument(
            "--limit", type=int, default=20, help="How many runs (default 20, at most 1000)."
        )
        parser.add_argument(
            "--status",
            choices=RunStatus.values,
            help="Only runs with this outcome (e.g. failure, timeout).",
        )
        parser.add_argument(
            "--body",
            action="store_true",
            help="Also show each run's response body (as kept: truncated at the endpoint's cap).",
        )
        parser.add_argument("--json", action="store_true", help="A JSON list, for scripts.")

    def handle(self, *args: Any, **options: Any) -> None:
        if not 1 <= options["limit"] <= 1000:
            raise CommandError(f"--limit {options['limit']}: give a number from 1 to 1000.")
        endpoint = find_endpoint(options["endpoint"])
        selected = Run.objects.filter(endpoint=endpoint)
        if options["status"]:
            selected = selected.filter(status=options["status"])
        runs = list(selected.order_by("-started_at", "-pk")[: options["limit"]])
        if options["json"]:
            self.stdout.write(to_json([as_json(run, body=options["body"]) for run in runs]))
            return
        which = f" {options['status']}" if options["status"] else ""
        if not runs:
            self.stdout.write(f"{endpoint.ref} has no{which} runs yet.")
            return
        headers = [
            "ID",
            "STARTED (UTC)",
            "TRIGGER",
            "SOURCE",
            "STATUS",
            "CODE",
            "TOOK",
            "LATE",
            "RETRY OF",
        ]
        self.stdout.write(
            f"{endpoint.ref}: latest {count_words(len(runs), (which + ' run').lstrip())}"
        )
        self.stdout.write(table([*headers, "ERROR"], [as_row(run) for run in runs], widest=50))
        if options["body"]:
            for run in runs:
                self.stdout.write(f"\n--- run {run.pk} response body ---")
                self.stdout.write(body_text(run))


def as_row(run: Run) -> list[str]:
    return [
        str(run.pk),
        f"{run.started_at:%Y-%m-%d %H:%M:%S}",
        run.trigger,
        run.source or "-",
        run.status,
        str(run.status_code or "-"),
        duration_words(run.duration_ms) if run.duration_ms is not None else "-",
        duration_words(lateness_ms(run)),
        str(run.retry_of_id or "-"),
        " ".join(run.error.split()) or "-",
    ]


def body_text(run: Run) -> str:
    """The body as kept: JSON indented, text as it came."""
    if run.response_body is None:
        return "(no body kept)"
    text = run.response_body if isinstance(run.response_body, str) else to_json(run.response_body)
    return text + ("\n(truncated)" if run.response_truncated else "")


def lateness_ms(run: Run) -> int:
    return max(int((run.started_at - run.scheduled_for).total_seconds() * 1000), 0)


def as_json(run: Run, *, body: bool = False) -> dict[str, Any]:
    shown = {
        "id": run.pk,
        "trigger": run.trigger,
        "source": run.source or None,
        "scheduled_for": iso(run.scheduled_for),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "duration_ms": run.duration_ms,
        "lateness_ms": lateness_ms(run),
        "status": run.status,
        "status_code": run.status_code,
        "response_size_bytes": run.response_size_bytes,
        "response_truncated": run.response_truncated,
        "response_headers": run.response_headers,
        "error": run.error,
        "attempt": run.attempt,
        "retry_of": run.retry_of_id,
    }
    if body:
        shown["response_body"] = run.response_body
    return shown
