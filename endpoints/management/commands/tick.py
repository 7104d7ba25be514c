"""``manage.py tick``: one scheduler tick, its runs executed here and now."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from endpoints.engine.claiming import Claim, tick
from endpoints.engine.dispatch import ClaimDispatcher
from endpoints.management.commands._shared import to_json
from endpoints.management.commands.runs import as_json
from endpoints.models import Run
from endpoints.wording import count_words


class Command(BaseCommand):
    help = (
        "Run one scheduler tick: claim the endpoints that are due and execute them in this "
        "process, concurrently and each at its scheduled time, exactly as runscheduler "
        "does, then wait for them to finish. For cron-driven setups without a "
        "long-running scheduler, and for debugging."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="The runs as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        claims = tick(now=timezone.now())
        runs = execute_all(claims)
        if options["json"]:
            self.stdout.write(to_json([{"endpoint_id": r.endpoint_id, **as_json(r)} for r in runs]))
            return
        self.stdout.write(f"Claimed {count_words(len(claims), 'due endpoint')}; {len(runs)} ran.")
        for run in runs:
            code = f" HTTP {run.status_code}" if run.status_code else ""
            self.stdout.write(f"  {run.endpoint.ref}: {run.status}{code} in {run.duration_ms} ms")


def execute_all(claims: list[Claim]) -> list[Run]:
    """Run the claims as runscheduler does (each at its scheduled time, on a
    dispatcher) and wait for all of them; each run is bounded by its endpoint's timeout."""
    if not claims:
        return []
    dispatcher = ClaimDispatcher(max_in_flight=settings.CRONICORN_MAX_IN_FLIGHT)
    futures = [dispatcher.submit(claim) for claim in claims]
    started = [run.pk for run in (future.result() for future in futures) if run is not None]
    # Every run is written; its threads only have to close their connections and exit.
    dispatcher.shutdown(timeout=10)
    # execute_claim hands back the Run as it started; read how each one finished.
    finished = Run.objects.filter(pk__in=started).select_related("endpoint__job")
    return list(finished.order_by("endpoint__job__name", "endpoint__name", "pk"))
