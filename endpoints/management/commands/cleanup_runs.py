"""``manage.py cleanup_runs``: delete old runs, keeping each endpoint's latest."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from endpoints.engine.maintenance import prune_runs
from endpoints.management.commands._progress import progress_bars
from endpoints.management.commands._shared import iso, parse_duration, to_json
from endpoints.wording import count_words


class Command(BaseCommand):
    help = (
        "Delete runs that started longer ago than --older-than (default: "
        "CRONICORN_RUN_RETENTION_DAYS), always keeping each endpoint's latest "
        "CRONICORN_RUN_RETENTION_KEEP runs and any run still in flight."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            metavar="DURATION",
            help=f"e.g. 30d, 12h (default {settings.CRONICORN_RUN_RETENTION_DAYS}d).",
        )
        parser.add_argument(
            "--json", action="store_true", help="How many were deleted and the cutoff, as JSON."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        retention = timedelta(days=settings.CRONICORN_RUN_RETENTION_DAYS)
        older_than = (
            parse_duration(options["older_than"], option="--older-than")
            if options["older_than"]
            else retention
        )
        # prune_runs deletes what started before ``now - retention``; shifting ``now``
        # moves that cutoff to ``now - older_than`` without a second copy of the rules.
        with progress_bars() as progress:
            deleted = prune_runs(now=now - older_than + retention, exact=True, progress=progress)
        cutoff = now - older_than
        if options["json"]:
            self.stdout.write(to_json({"deleted": deleted, "started_before": iso(cutoff)}))
            return
        self.stdout.write(
            f"Deleted {count_words(deleted, 'run')} that started before "
            f"{cutoff:%Y-%m-%d %H:%M} UTC."
        )
