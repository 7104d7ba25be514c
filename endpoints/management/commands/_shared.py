"""Helpers shared by the operator commands: endpoint references, times, JSON output."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from endpoints.governor import SOURCE_WORDS
from endpoints.models import Endpoint, Job, Tenant
from endpoints.schedules import ScheduleError, parse_interval
from endpoints.validation import longest_problem
from endpoints.wording import delta_words

REF_HELP = "the endpoint, as job/endpoint or its numeric id"


def add_endpoint_argument(parser: CommandParser) -> None:
    parser.add_argument("endpoint", metavar="ENDPOINT", help=REF_HELP.capitalize() + ".")


def find_endpoint(ref: str) -> Endpoint:
    """The live or archived endpoint named by ``ref``; CommandError says what to do if none."""
    try:
        return Endpoint.objects.select_related("job__tenant", "slot").by_ref(ref)
    except Endpoint.DoesNotExist as exc:
        message = str(exc) if str(exc) else f"No endpoint {ref!r}."
        raise CommandError(f"{message} List them with: manage.py endpoints") from None


def find_job(ref: str) -> Job:
    """The job named ``ref`` (or with that id); CommandError if none or ambiguous."""
    jobs = list(
        Job.objects.filter(pk=int(ref)) if ref.isdecimal() else Job.objects.filter(name=ref)[:2]
    )
    if len(jobs) == 1:
        return jobs[0]
    problem = f"No job {ref!r}" if not jobs else f"Job name {ref!r} is used by several tenants"
    raise CommandError(f"{problem}; give the job's name or id (see manage.py endpoints).")


def find_tenant(ref: str) -> Tenant:
    """The tenant named ``ref`` (or with that id); CommandError if none."""
    tenant = (
        Tenant.objects.filter(pk=int(ref)).first()
        if ref.isdecimal()
        else Tenant.objects.filter(name=ref).first()
    )
    if tenant is None:
        raise CommandError(f"No tenant {ref!r}; give the tenant's name or id.")
    return tenant


def parse_when(text: str, *, option: str) -> datetime:
    """An ISO 8601 time, in UTC (as the API reads one); without an offset it is UTC."""
    parsed = parse_datetime(text.strip())
    if parsed is None:
        raise CommandError(
            f"{option} {text!r} is not an ISO 8601 time; write e.g. 2026-03-01T14:30:00Z."
        )
    try:
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is in the year 0 in UTC
        raise CommandError(
            f"{option} {text!r} is out of range in UTC; give a year between 1 and 9999."
        ) from None


def parse_duration(text: str, *, option: str) -> timedelta:
    """A duration with its unit. On a command line a bare number is a slip (``--ttl 15``
    meant minutes, not 15 ms), so it is refused; files and forms still read bare
    numbers as milliseconds, as their format says."""
    bare = text.strip()
    if bare.isdecimal():
        raise CommandError(
            f"{option} {bare}: missing unit: write {bare}m (or {bare}s, {bare}h, {bare}d)."
        )
    try:
        ms = parse_interval(text)
    except ScheduleError as exc:
        raise CommandError(f"{option}: {exc}") from None
    if ms <= 0:
        raise CommandError(f"{option} must be longer than zero, e.g. 15m.")
    if problem := longest_problem(ms):
        raise CommandError(f"{option} {bare}: {problem}")
    return timedelta(milliseconds=ms)


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def table(headers: list[str], rows: list[list[str]], *, widest: int = 40) -> str:
    """A plain text table; cells longer than ``widest`` are cut with an ellipsis."""
    cut = [
        [cell if len(cell) <= widest else cell[: widest - 1] + "…" for cell in row] for row in rows
    ]
    widths = [max([len(h), *(len(row[i]) for row in cut)]) for i, h in enumerate(headers)]
    lines = [headers, *cut]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def next_run_words(endpoint: Endpoint, now: datetime) -> str:
    """'in 25 seconds (baseline-interval)', or why there is none."""
    if endpoint.archived_at:
        return "never (archived)"
    if endpoint.next_run_at is None:
        return "not planned"
    when = delta_words(endpoint.next_run_at - now)
    return f"{when} ({endpoint.next_run_source or 'unknown'})"


def describe_endpoint_state(endpoint: Endpoint, now: datetime) -> str:
    """One line for the end of an action: the next run, in words and as a time."""
    if endpoint.next_run_at is None or endpoint.archived_at:
        return f"{endpoint.ref}: {next_run_words(endpoint, now)}."
    source = SOURCE_WORDS.get(endpoint.next_run_source, endpoint.next_run_source)
    return (
        f"{endpoint.ref}: next run {delta_words(endpoint.next_run_at - now)} "
        f"at {endpoint.next_run_at:%Y-%m-%d %H:%M:%S} UTC, set by {source}."
    )
