"""``manage.py explain ENDPOINT``: the governor's decision trail for an endpoint."""

from __future__ import annotations

from dataclasses import asdict, replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from endpoints import operations
from endpoints.governor import (
    SOURCE_WORDS,
    Decision,
    EndpointSchedule,
    Upcoming,
    decide,
    decide_after_edit,
    preview_runs,
)
from endpoints.management.commands._shared import (
    add_endpoint_argument,
    find_endpoint,
    iso,
    parse_when,
    to_json,
)
from endpoints.models import Endpoint
from endpoints.past import PastSlot, explain_past
from endpoints.schedules import describe_schedule, format_interval
from endpoints.wording import count_words, delta_words


class Command(BaseCommand):
    help = (
        "Explain when an endpoint runs next and why: the baseline and every fresh hint as "
        "candidates, which one won and the rule that picked it, clamps to the min/max "
        "interval, and a pause. The endpoint's current state is planned as of now (or "
        "--at), start to start from its last run, as the scheduler has it. With a past "
        "--at, it first says what happened to the slot due then, from what was recorded: "
        "ran (its run), skipped, paused (by whom, until when), a window, the breaker, the "
        "scheduler not running, archived, not created yet."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_endpoint_argument(parser)
        parser.add_argument(
            "--at",
            metavar="ISO",
            help="Plan as of this time instead of now (ISO 8601; UTC when no offset); a past "
            "time also says what happened to the slot due then, from what was recorded.",
        )
        parser.add_argument(
            "--next",
            type=int,
            metavar="N",
            default=0,
            help="Also list the next N run times (1..100) in the endpoint's zone and UTC, "
            "each run assumed on time and successful.",
        )
        parser.add_argument("--json", action="store_true", help="JSON, for scripts.")

    def handle(self, *args: Any, **options: Any) -> None:
        endpoint = find_endpoint(options["endpoint"])
        today = timezone.now()
        now = parse_when(options["at"], option="--at") if options["at"] else today
        count = options["next"]
        if not 0 <= count <= MAX_PREVIEW:
            raise CommandError(f"--next takes 1..{MAX_PREVIEW} runs; got {count}.")
        try:
            # A past time: what was recorded of its slot too, before the plan as of then.
            slot = explain_past(endpoint, now, now=today) if now < today else None
            schedule = operations.held_schedule(endpoint)
            decision = decide_after_edit(now, endpoint.last_run_at, schedule)
            upcoming = preview_runs(now, schedule, count, last_run_at=endpoint.last_run_at)
            planned = preview(endpoint, upcoming)
        except ValueError as exc:
            raise CommandError(f"{endpoint.ref} cannot be planned: {exc}") from None
        if options["json"]:
            document = as_json(endpoint, decision)
            if slot is not None:
                document["past"] = past_json(slot)
            if count:
                document["next"] = planned
                if len(planned) < count:
                    document["runs_end"] = runs_end(now, schedule, upcoming)
            self.stdout.write(to_json(document))
        else:
            if slot is not None:
                self.stdout.write(past_text(slot))
            self.stdout.write(as_text(endpoint, decision))
            if count:
                self.stdout.write(f"Next {count} runs ({endpoint.timezone} | UTC):")
                for item in planned:
                    self.stdout.write(f"  {item['local']}  |  {item['utc']}  ({item['source']})")
                if len(planned) < count:
                    self.stdout.write(f"  then no more runs: {runs_end(now, schedule, upcoming)}")


def past_json(slot: PastSlot) -> dict[str, Any]:
    return {**asdict(slot), "at": iso(slot.at), "slot": iso(slot.slot), "until": iso(slot.until)}


def past_text(slot: PastSlot) -> str:
    return (
        f"The slot due at {slot.slot:%Y-%m-%d %H:%M:%S} UTC ({slot.reason}): {slot.words}\n"
        "The plan as of then, with the endpoint as it is now:"
    )


MAX_PREVIEW = 100


def runs_end(now: datetime, schedule: EndpointSchedule, planned: list[Upcoming]) -> str:
    """Why a preview stopped early: the last step of the plan after its last run."""
    after = planned[-1].next_run_at if planned else now
    return decide(after, replace(schedule, failure_count=0, retry_at=None)).steps[-1]


def preview(endpoint: Endpoint, plans: list[Upcoming]) -> list[dict[str, str]]:
    """Each planned run in the endpoint's zone (with its UTC offset, so DST shows) and UTC."""
    zone = ZoneInfo(endpoint.timezone or "UTC")
    return [
        {
            "local": plan.next_run_at.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z%z"),
            "utc": iso(plan.next_run_at) or "",
            "source": plan.source,
        }
        for plan in plans
    ]


def as_json(endpoint: Endpoint, decision: Decision) -> dict[str, Any]:
    plan = decision.plan
    return {
        "endpoint": endpoint.ref,
        "id": endpoint.pk,
        "at": iso(decision.now),
        "next_run_at": iso(plan.next_run_at),
        "source": plan.source,
        "source_words": SOURCE_WORDS[plan.source],
        "chosen": decision.chosen.source if decision.chosen else None,
        "candidates": [
            {
                "source": candidate.source,
                "at": iso(candidate.at),
                "chosen": candidate == decision.chosen,
            }
            for candidate in decision.candidates
        ],
        "hints_fresh": decision.hints_fresh,
        "steps": list(decision.steps),
        "stored": {
            "next_run_at": iso(endpoint.next_run_at),
            "source": endpoint.next_run_source or None,
        },
        "archived": endpoint.archived_at is not None,
        "job_status": endpoint.job.status,
    }


def as_text(endpoint: Endpoint, decision: Decision) -> str:
    now, plan = decision.now, decision.plan
    lines = [
        f"{endpoint.ref} (id {endpoint.pk}) as of {now:%Y-%m-%d %H:%M:%S} UTC",
        f"  baseline:   {_baseline_words(endpoint)}",
        f"  bounds:     {_bounds_words(endpoint)}",
        "  candidates:",
    ]
    for candidate in decision.candidates:
        mark = "*" if candidate == decision.chosen else " "
        lines.append(
            f"   {mark} {candidate.source:<18} {candidate.at:%Y-%m-%d %H:%M:%S}  "
            f"({delta_words(candidate.at - now)})"
        )
    lines.append("  steps:")
    lines += [f"    - {step}" for step in decision.steps]
    if plan.next_run_at is None:
        lines.append(f"No next run ({plan.source}): {decision.steps[-1]}.")
    else:
        lines.append(
            f"Next run {delta_words(plan.next_run_at - now)} at "
            f"{plan.next_run_at:%Y-%m-%d %H:%M:%S} UTC, set by {SOURCE_WORDS[plan.source]} "
            f"({plan.source})."
        )
    lines += _caveats(endpoint, decision)
    return "\n".join(lines)


def _baseline_words(endpoint: Endpoint) -> str:
    words = describe_schedule(
        baseline_cron=endpoint.baseline_cron,
        timezone=endpoint.timezone,
        baseline_interval_ms=endpoint.baseline_interval_ms,
    )
    if endpoint.failure_count:
        words += f"; {count_words(endpoint.failure_count, 'failure')} in a row"
    return words


def _bounds_words(endpoint: Endpoint) -> str:
    low, high = endpoint.min_interval_ms, endpoint.max_interval_ms
    if not low and not high:
        return "none"
    return (
        f"min {format_interval(low) if low else '-'}, max {format_interval(high) if high else '-'}"
    )


def _caveats(endpoint: Endpoint, decision: Decision) -> list[str]:
    notes = []
    if endpoint.archived_at:
        notes.append("Note: the endpoint is archived, so it never runs.")
    if endpoint.job.status != "active":
        notes.append(f"Note: job {endpoint.job.name} is {endpoint.job.status}; nothing runs.")
    stored = endpoint.next_run_at
    if stored and stored != decision.plan.next_run_at:
        notes.append(
            f"Stored next run: {stored:%Y-%m-%d %H:%M:%S} UTC ({endpoint.next_run_source}), "
            "planned when the endpoint last ran or changed."
        )
    return notes
