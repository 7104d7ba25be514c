"""The fixed vocabularies of the models: job and run statuses, HTTP methods, the
governor's sources, run triggers and hint kinds (each stored as text, checked by a
named constraint in ``endpoints.models``)."""

from __future__ import annotations

from django.db import models

from endpoints import governor


class JobStatus(models.TextChoices):
    ACTIVE = "active"
    PAUSED = "paused"
    ARCHIVED = "archived"


class HttpMethod(models.TextChoices):
    GET = "GET"
    POST = "POST"
    PUT = "PUT"
    PATCH = "PATCH"
    DELETE = "DELETE"


class Source(models.TextChoices):
    """The governor's sources (``endpoints.governor``), plus a manual run request."""

    BASELINE_CRON = governor.BASELINE_CRON
    BASELINE_INTERVAL = governor.BASELINE_INTERVAL
    AI_INTERVAL = governor.AI_INTERVAL
    AI_ONESHOT = governor.AI_ONESHOT
    CLAMPED_MIN = governor.CLAMPED_MIN
    CLAMPED_MAX = governor.CLAMPED_MAX
    PAUSED = governor.PAUSED
    RETRY = governor.RETRY
    WINDOW = governor.WINDOW
    CALENDAR = governor.CALENDAR
    FOLLOW_UP = governor.FOLLOW_UP
    ONCE = governor.ONCE
    ENDED = governor.ENDED
    MANUAL = governor.MANUAL


class RunTrigger(models.TextChoices):
    SCHEDULED = "scheduled"
    MANUAL = "manual"
    TEST = "test"
    RETRY = "retry"
    # Run after a run of another endpoint (run policy ``follow_ups``), ``caused_by`` it.
    FOLLOW_UP = "follow-up"
    # A past slot run again on request (``endpoints.backfill``), once per slot.
    BACKFILL = "backfill"


class BackfillStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"


class BackfillSlotState(models.TextChoices):
    PENDING = "pending"  # not claimed yet
    STARTED = "started"  # its run is recorded and called
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"  # not run: the slot had a successful run, or the scheduler has it


class RunStatus(models.TextChoices):
    RUNNING = "running"
    SUCCESS = "success"
    FAILURE = "failure"
    TIMEOUT = "timeout"
    LOST = "lost"
    # Found later than its job's catch-up window: not called, the next slot planned; or a
    # follow-up that could not be made (its endpoint in flight, paused...), said in words.
    SKIPPED = "skipped"


FAILED_STATUSES = (RunStatus.FAILURE, RunStatus.TIMEOUT, RunStatus.LOST)


class HintKind(models.TextChoices):
    INTERVAL = "interval"
    ONESHOT = "oneshot"
    PAUSE = "pause"
    RESUME = "resume"
    CLEAR = "clear"


class PauseSource(models.TextChoices):
    """Who paused an endpoint (blank: not paused, or paused before sources were kept)."""

    PERSON = "person", "a person (admin, API, MCP or a command)"
    PLANNER = "planner", "the planner"
    BREAKER = "breaker", "the breaker, until its probe run"
    HELD = "breaker-held", "the breaker, until a person resumes it"


BREAKER_SOURCES = (PauseSource.BREAKER, PauseSource.HELD)


# How long an operator's hint lasts when no TTL is given (the hint command, API, MCP).
DEFAULT_HINT_TTL_MS = {HintKind.INTERVAL: 60 * 60 * 1_000, HintKind.ONESHOT: 30 * 60 * 1_000}
