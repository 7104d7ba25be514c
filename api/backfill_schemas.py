"""The API's shapes of backfills (the rest are in ``api.schemas``, whose helpers these use)."""

from __future__ import annotations

from datetime import datetime

from ninja import Field, Schema
from pydantic import ConfigDict

from api.schemas import Bool, Id, Input, IsoTime
from endpoints.backfill import DEFAULT_RATE, MAX_RATE, MAX_SLOTS


class BackfillIn(Input):
    """Exactly one of endpoint_id or job_id; the range [range_from, range_to) in the past."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "endpoint_id": 1,
                    "range_from": "2026-03-01T02:00:00Z",
                    "range_to": "2026-03-01T06:00:00Z",
                    "rate": 5,
                }
            ]
        },
    )
    endpoint_id: Id | None = Field(None, description="The endpoint to backfill.")
    job_id: Id | None = Field(None, description="Or every endpoint of this job.")
    range_from: IsoTime = Field(description="The range's first instant (ISO 8601).")
    range_to: IsoTime = Field(description="The range's end, excluded (ISO 8601), at or before now.")
    rate: float = Field(
        DEFAULT_RATE, description=f"Runs started a second, more than 0, at most {MAX_RATE:g}."
    )
    dry_run: Bool = Field(
        False, description="List the slots and what each would do; write nothing."
    )


class BackfillSlotOut(Schema):
    endpoint_id: int
    scheduled_for: datetime
    runs: bool = Field(description="Whether the backfill runs this slot.")
    note: str = Field(description="Why not, when it does not (e.g. 'ran: run 12 succeeded').")


class BackfillOut(Schema):
    """A backfill and its progress (its slots by state); a dry run's has no id and lists
    its slots instead."""

    id: int | None
    endpoint: str | None = Field(description="job/endpoint, for an endpoint's backfill.")
    job: str | None = Field(description="The job, for a job's backfill.")
    range_from: datetime
    range_to: datetime
    rate: float
    status: str = Field(description="queued, running, done or cancelled; 'dry run' for one.")
    requested_by: str
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    total: int = Field(description=f"Slots it runs (at most {MAX_SLOTS}).")
    pending: int
    started: int = Field(description="Runs in flight.")
    succeeded: int
    failed: int
    skipped: int = Field(description="Slots found run (or running) when their turn came.")
    slots: list[BackfillSlotOut] = Field(default_factory=list, description="A dry run's slots.")
