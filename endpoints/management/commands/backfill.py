"""``manage.py backfill ENDPOINT|--job JOB --from ISO --to ISO``: run a past range's slots
once each (``endpoints.backfill``); ``--status ID`` and ``--cancel ID`` for one under way."""

from __future__ import annotations

import getpass
import time
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from endpoints.backfill import (
    DEFAULT_RATE,
    MAX_SLOTS,
    BackfillPlan,
    backfill_progress,
    cancel_backfill,
    plan_backfill,
    progress_words,
    start_backfill,
)
from endpoints.backfill_models import Backfill
from endpoints.choices import BackfillStatus
from endpoints.management.commands._shared import (
    REF_HELP,
    find_endpoint,
    find_job,
    iso,
    parse_when,
    to_json,
)
from endpoints.operations import OperationRefused

# The slots a dry run lists in words; --json lists them all.
SHOWN = 20


class Command(BaseCommand):
    help = (
        "Run the past slots of a range once each: every slot of [--from, --to) by the "
        "endpoint's schedule and run policy that has no successful run gets one run "
        "(trigger 'backfill'), paced at --rate, by the running scheduler (runscheduler or "
        f"the Celery fleet). At most {MAX_SLOTS} slots. --dry-run lists them and writes "
        "nothing; --status ID shows one's progress, --cancel ID stops it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("endpoint", nargs="?", help=REF_HELP)
        parser.add_argument("--job", metavar="JOB", help="Backfill every endpoint of this job.")
        parser.add_argument("--from", dest="start", metavar="ISO", help="The range's start.")
        parser.add_argument(
            "--to", dest="end", metavar="ISO", help="The range's end (excluded), not after now."
        )
        parser.add_argument(
            "--rate", default=f"{DEFAULT_RATE:g}/s", help="Runs a second (default 5/s)."
        )
        parser.add_argument("--dry-run", action="store_true", help="List the slots; run none.")
        parser.add_argument("--wait", action="store_true", help="Show progress until it ends.")
        parser.add_argument("--status", type=int, metavar="ID", help="A backfill's progress.")
        parser.add_argument("--cancel", type=int, metavar="ID", help="Stop a backfill.")
        parser.add_argument("--json", action="store_true", help="JSON output.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["status"] is not None or options["cancel"] is not None:
                self._status_or_cancel(options)
            else:
                self._backfill(options)
        except OperationRefused as exc:
            raise CommandError(str(exc)) from None

    def _backfill(self, options: dict[str, Any]) -> None:
        if bool(options["endpoint"]) == bool(options["job"]):
            raise CommandError("Name the ENDPOINT to backfill (job/endpoint or id), or --job JOB.")
        if not options["start"] or not options["end"]:
            raise CommandError("Give the range: --from ISO --to ISO (e.g. 2026-03-01T02:00Z).")
        target: dict[str, Any] = (
            {"job": find_job(options["job"])}
            if options["job"]
            else {"endpoint": find_endpoint(options["endpoint"])}
        )
        start = parse_when(options["start"], option="--from")
        end = parse_when(options["end"], option="--to")
        now = timezone.now()
        if options["dry_run"]:
            plan = plan_backfill(**target, start=start, end=end, rate=options["rate"], now=now)
            self.stdout.write(to_json(plan_json(plan)) if options["json"] else plan_text(plan))
            return
        backfill = start_backfill(
            **target,
            start=start,
            end=end,
            rate=options["rate"],
            requested_by=f"{getpass.getuser()} (manage.py backfill)",
            now=now,
        )
        if options["wait"]:
            backfill = self._follow(backfill, quiet=options["json"])
        self._show(backfill, as_json=options["json"])

    def _status_or_cancel(self, options: dict[str, Any]) -> None:
        pk = options["cancel"] if options["cancel"] is not None else options["status"]
        backfill = Backfill.objects.filter(pk=pk).first()
        if backfill is None:
            raise CommandError(f"No backfill {pk}; start one with manage.py backfill.")
        if options["cancel"] is not None:
            backfill = cancel_backfill(backfill)
        elif options["wait"]:
            backfill = self._follow(backfill, quiet=options["json"])
        self._show(backfill, as_json=options["json"])

    def _follow(self, backfill: Backfill, *, quiet: bool) -> Backfill:
        """Until it is done or cancelled, a line of progress every few seconds."""
        last = ""
        while backfill.status in (BackfillStatus.QUEUED, BackfillStatus.RUNNING):
            line = progress_words(backfill_progress(backfill))
            if line != last and not quiet:
                self.stdout.write(line)
                last = line
            time.sleep(2)
            backfill.refresh_from_db()
        return backfill

    def _show(self, backfill: Backfill, *, as_json: bool) -> None:
        progress = backfill_progress(backfill)
        if as_json:
            self.stdout.write(to_json(_jsonable(dict(progress))))
            return
        self.stdout.write(progress_words(progress))
        if progress["status"] in (BackfillStatus.QUEUED, BackfillStatus.RUNNING):
            self.stdout.write(
                f"Follow it with: manage.py backfill --status {backfill.pk} --wait; "
                f"stop it with: manage.py backfill --cancel {backfill.pk}"
            )


def plan_text(plan: BackfillPlan) -> str:
    skipped = len(plan.slots) - plan.to_run
    lines = [
        f"Dry run: {len(plan.slots)} slots from {iso(plan.start)} to {iso(plan.end)}: "
        f"{plan.to_run} would run (about {plan.seconds:.0f} s at {plan.rate:g}/s), "
        f"{skipped} not. Nothing was written."
    ]
    for slot in plan.slots[:SHOWN]:
        what = "run" if slot.runs else f"skip ({slot.note})"
        lines.append(f"  {iso(slot.scheduled_for)}  {slot.endpoint.ref}  {what}")
    if len(plan.slots) > SHOWN:
        lines.append(f"  … {len(plan.slots) - SHOWN} more (--json lists them all)")
    return "\n".join(lines)


def plan_json(plan: BackfillPlan) -> dict[str, Any]:
    return {
        "from": iso(plan.start),
        "to": iso(plan.end),
        "rate": plan.rate,
        "to_run": plan.to_run,
        "slots": [
            {
                "endpoint": slot.endpoint.ref,
                "scheduled_for": iso(slot.scheduled_for),
                "runs": slot.runs,
                "note": slot.note,
            }
            for slot in plan.slots
        ],
    }


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {k: iso(v) if isinstance(v, datetime) else v for k, v in values.items()}
