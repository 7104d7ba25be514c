"""The manual operations the admin offers on endpoints, as thin calls into ``endpoints.operations``.

Each operation calls the same ``endpoints.operations`` function as the management
commands and turns its result, or its ``OperationRefused`` reason, into one message a
person reads. The list actions and the change page buttons both go through ``perform``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.admin.forms import PauseUntilForm
from endpoints import operations
from endpoints.audit import Actor
from endpoints.models import Endpoint, RunStatus
from endpoints.operations import OperationRefused
from notifications.alerts import acknowledge


@dataclass(frozen=True)
class Outcome:
    level: int
    message: str | SafeString


@dataclass(frozen=True)
class Operation:
    label: str
    perform: Callable[[Endpoint, datetime, Actor, Mapping[str, Any]], Outcome]
    # The operations that make an HTTP call in the admin's request are capped on the list.
    slow: bool = False


def _ok(message: str | SafeString) -> Outcome:
    return Outcome(messages.SUCCESS, message)


def _run_now(endpoint: Endpoint, now: datetime, actor: Actor, data: Mapping[str, Any]) -> Outcome:
    operations.run_now(endpoint, now=now, actor=actor)
    return _ok(f"Run requested for {endpoint}; it starts within a second.")


def _test(endpoint: Endpoint, now: datetime, actor: Actor, data: Mapping[str, Any]) -> Outcome:
    run = operations.test_endpoint(endpoint, now=now)
    code = f"HTTP {run.status_code}" if run.status_code else "no response"
    took = f" in {run.duration_ms} ms" if run.duration_ms is not None else ""
    error = f": {run.error}" if run.error else ""
    message = format_html(
        'Test request to {}: {} ({}{}){}. <a href="{}">See the run</a>.',
        endpoint,
        run.status,
        code,
        took,
        error,
        reverse("admin:endpoints_run_change", args=[run.pk]),
    )
    level = messages.SUCCESS if run.status == RunStatus.SUCCESS else messages.WARNING
    return Outcome(level, message)


def _pause_for(hours: int) -> Callable[[Endpoint, datetime, Actor, Mapping[str, Any]], Outcome]:
    def pause(endpoint: Endpoint, now: datetime, actor: Actor, data: Mapping[str, Any]) -> Outcome:
        until = now + timedelta(hours=hours)
        operations.pause_endpoint(
            endpoint, now=now, until=until, reason=f"Paused for {hours} h in the admin", actor=actor
        )
        return _ok(f"Paused {endpoint} until {until:%Y-%m-%d %H:%M} UTC.")

    return pause


def _pause_until(
    endpoint: Endpoint, now: datetime, actor: Actor, data: Mapping[str, Any]
) -> Outcome:
    form = PauseUntilForm(data, now=now)
    if not form.is_valid():
        problems = "; ".join(str(e) for errors in form.errors.values() for e in errors)
        return Outcome(messages.ERROR, f"{endpoint} was not paused: {problems}")
    until = form.cleaned_data["until"]
    reason = form.cleaned_data["reason"] or "Paused in the admin"
    operations.pause_endpoint(endpoint, now=now, until=until, reason=reason, actor=actor)
    return _ok(f"Paused {endpoint} until {until:%Y-%m-%d %H:%M} UTC.")


def _resume(endpoint: Endpoint, now: datetime, actor: Actor, data: Mapping[str, Any]) -> Outcome:
    operations.resume_endpoint(endpoint, now=now, reason="Resumed in the admin", actor=actor)
    return _ok(f"Resumed {endpoint}.")


def _clear_hints(
    endpoint: Endpoint, now: datetime, actor: Actor, data: Mapping[str, Any]
) -> Outcome:
    operations.clear_hints(endpoint, now=now, reason="Cleared in the admin", actor=actor)
    return _ok(f"Cleared the hints of {endpoint}; it is back on its baseline schedule.")


def _reset_failures(
    endpoint: Endpoint, now: datetime, actor: Actor, data: Mapping[str, Any]
) -> Outcome:
    operations.reset_failures(endpoint, now=now, actor=actor)
    return _ok(f"Reset the failure count of {endpoint}; its backoff is gone.")


def _acknowledge(
    endpoint: Endpoint, now: datetime, actor: Actor, data: Mapping[str, Any]
) -> Outcome:
    who = actor.name if actor.user_id is not None else "the admin"
    if acknowledge(endpoint, now=now, by=who) is None:
        return Outcome(
            messages.WARNING,
            f"{endpoint} is not failing (or its failing alert is not raised yet): "
            "nothing to acknowledge.",
        )
    return _ok(
        f"Acknowledged {endpoint}'s failing alert: no reminder or escalation until it recovers."
    )


def _archive(endpoint: Endpoint, now: datetime, actor: Actor, data: Mapping[str, Any]) -> Outcome:
    operations.archive_endpoint(endpoint, now=now, actor=actor)
    return _ok(f"Archived {endpoint}; it will not run again.")


OPERATIONS: dict[str, Operation] = {
    "run_now": Operation("Run now", _run_now),
    "test": Operation("Test request", _test, slow=True),
    "pause_1h": Operation("Pause for 1 hour", _pause_for(1)),
    "pause_24h": Operation("Pause for 24 hours", _pause_for(24)),
    "pause_until": Operation("Pause until…", _pause_until),
    "resume": Operation("Resume", _resume),
    "clear_hints": Operation("Clear hints", _clear_hints),
    "reset_failures": Operation("Reset failures", _reset_failures),
    "acknowledge": Operation("Acknowledge the failing alert", _acknowledge),
    "archive": Operation("Archive", _archive),
}


def perform(
    name: str, endpoint: Endpoint, *, now: datetime, user: Any, data: Mapping[str, Any]
) -> Outcome:
    """Run one operation; a refusal becomes an error message (it names the endpoint)."""
    try:
        return OPERATIONS[name].perform(endpoint, now, Actor.person(user), data)
    except OperationRefused as exc:
        return Outcome(messages.ERROR, str(exc))
