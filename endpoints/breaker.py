"""The breaker: the run policy's pause of an endpoint that keeps failing.

It opens after ``breaker_failed_slots`` failed slots in a row (a slot counts once, by its
last attempt), or at once on a failure a person must fix when ``breaker_needs_person``
is set. Open, it pauses the endpoint: with ``breaker_cooldown_ms`` for that long, and
the pause's end is the probe run (a success closes it, the failure count resets; a
failure opens it again); without, until a person resumes it (the stored end,
``HOLD_MS`` ahead, only gives the plan a time).

The pause is stored with its source, ``PauseSource.BREAKER`` or ``BREAKER_HELD`` (until
resumed), on the endpoint and in its hint history: the alerts, the admin and every
pause's words read that, never the reason's text. Two places open it, both through
``open_breaker``: a run's end (``engine.outcomes``) and a plan outside a run that ends a
slot's retries (``operations``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q

from endpoints import audit
from endpoints.audit import Actor
from endpoints.choices import PauseSource
from endpoints.governor import PAUSED
from endpoints.models import Endpoint, HintHistory, HintKind, Slot
from endpoints.policies import MAX_COOLDOWN_MS, MAX_TEXT, NEEDS_PERSON, RunPolicy
from endpoints.wording import count_words, duration_words

HOLD_MS = MAX_COOLDOWN_MS


def reason_after_slot(policy: RunPolicy, *, failures: int, failure_kind: str, last: str) -> str:
    """Why the breaker opens once a slot failed (``failures`` in a row now, the last
    one's error ``last``, its kind ``failure_kind``), in words; "" when it stays closed
    (the default policy has none)."""
    if policy.breaker_needs_person and failure_kind == NEEDS_PERSON:
        return f"Breaker: a failure a person must fix ({last})"
    return failed_slots_reason(policy, failures, last)


def failed_slots_reason(policy: RunPolicy, failures: int, last: str) -> str:
    """Why the breaker opens once ``failures`` slots failed in a row, in words; "" below
    the policy's threshold or without one."""
    limit = policy.breaker_failed_slots
    if limit is not None and failures >= limit:
        return f"Breaker: {count_words(failures, 'failed slot')} in a row (last: {last})"
    return ""


def pause_of(reason: str, cooldown_ms: int | None) -> tuple[int, str, str]:
    """The breaker's pause: how long (ms), its reason (why it opened, then how it ends,
    within ``MAX_TEXT`` so the end is never cut off) and its source."""
    if cooldown_ms is None:
        hold, ending, source = HOLD_MS, "; resume it once the cause is fixed", PauseSource.HELD
    else:
        hold, ending = cooldown_ms, f"; a probe run after {duration_words(cooldown_ms)}"
        source = PauseSource.BREAKER
    return hold, reason[: MAX_TEXT - len(ending)] + ending, source


def open_breaker(pk: int, policy: RunPolicy, *, now: datetime, reason: str) -> str:
    """Pause endpoint ``pk`` (the breaker is open), with the reason in its pause and its
    hint history, so the pause alert says why, and in the audit trail (by the breaker).
    A pause a person set meanwhile is kept: "" then, else the pause's words."""
    hold, text, source = pause_of(reason, policy.breaker_cooldown_ms)
    until = now + timedelta(milliseconds=hold)
    with transaction.atomic():
        # The endpoint's row first, as every writer of both rows locks them.
        if not Endpoint.objects.filter(
            Q(paused_until__isnull=True) | Q(paused_until__lte=now), pk=pk
        ).update(paused_until=until, pause_reason=text, pause_source=source):
            return ""
        Slot.objects.filter(pk=pk, claim_token__isnull=True).update(
            next_run_at=until, next_run_source=PAUSED
        )
        HintHistory.objects.create(
            endpoint_id=pk,
            kind=HintKind.PAUSE,
            paused_until=until,
            reason=text,
            pause_source=source,
            created_at=now,
        )
        endpoint = Endpoint.objects.select_related("job").get(pk=pk)
        audit.record_fields(
            Actor.BREAKER,
            endpoint,
            "breaker-opened",
            now=now,
            reason=text,
            paused_until=(None, until),
        )
    return text
