"""A planner backend over the database, for the simulator: each analysis writes what the
simulated endpoint has become (its fields, its slot, its new runs) to a real endpoint
row, runs ``planner.analysis.analyze_endpoint`` with that backend (the LLM's real
client, its tools, its session record, its token budget) at the simulated time, and
hands the action calls the tools accepted back to the simulator, which applies them as
it applies the rules'. Use a database of its own (``bench/adaptation.py`` makes one)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from endpoints.choices import PauseSource
from endpoints.models import Endpoint, Job, Run, RunStatus, RunTrigger, Slot, Tenant
from planner.analysis import analyze_endpoint
from planner.simulation.simulator import Analysis, Call, SimEndpoint
from planner.tools import ACTION_TOOLS, MIN_NEXT_ANALYSIS_MS

if TYPE_CHECKING:
    from planner.simulation.simulator import Simulation

STATUS = {"success": RunStatus.SUCCESS, "failure": RunStatus.FAILURE, "timeout": RunStatus.TIMEOUT}
# Enough for every session of a day: the budget is not what is measured here.
TOKEN_BUDGET = 2_000_000_000


class DatabasePlanner:
    def __init__(self, backend: str, *, label: str = "") -> None:
        self.backend = backend
        self.name = label or backend
        self._endpoint: Endpoint | None = None
        self._written = 0

    def analyse(self, sim: Simulation, now: datetime) -> Analysis:
        endpoint = self._row(sim)
        self._sync(endpoint, sim.endpoint, sim.calls)
        session = analyze_endpoint(endpoint, now=now, backend=self.backend)
        calls = [
            (call["tool"], call["arguments"])
            for call in session.tool_calls
            if call["tool"] in ACTION_TOOLS and "error" not in call
        ]
        after = session.next_analysis_at
        next_ms = int((after - now).total_seconds() * 1000) if after else MIN_NEXT_ANALYSIS_MS
        return Analysis(
            calls, next_ms, tokens=session.total_tokens or 0, reasoning=session.reasoning
        )

    def _row(self, sim: Simulation) -> Endpoint:
        if self._endpoint is None:
            config = sim.scenario.endpoint
            tenant = Tenant.objects.create(
                name=f"sim-{Tenant.objects.count() + 1}", monthly_token_budget=TOKEN_BUDGET
            )
            job = Job.objects.create(tenant=tenant, name="sim", run_policy={})
            self._endpoint = Endpoint.objects.create(
                job=job,
                name=sim.scenario.name[:100],
                description=sim.scenario.description,
                url=sim.endpoint.url,
                baseline_cron=config.get("baseline_cron", ""),
                timezone=config.get("timezone", "UTC"),
                baseline_interval_ms=config.get("baseline_interval_ms"),
                min_interval_ms=config.get("min_interval_ms"),
                max_interval_ms=config.get("max_interval_ms"),
                timeout_ms=sim.endpoint.timeout_ms,
                run_policy=dict(config.get("run_policy") or {}),
            )
        return self._endpoint

    def _sync(self, row: Endpoint, endpoint: SimEndpoint, calls: list[Call]) -> None:
        """The row becomes what the simulated endpoint is now."""
        pause = PauseSource.PLANNER if endpoint.paused_by_planner else PauseSource.BREAKER
        Endpoint.objects.filter(pk=row.pk).update(
            failure_count=endpoint.failure_count,
            ai_hint_interval_ms=endpoint.ai_hint_interval_ms,
            ai_hint_next_run_at=endpoint.ai_hint_next_run_at,
            ai_hint_expires_at=endpoint.ai_hint_expires_at,
            ai_hint_reason=endpoint.ai_hint_reason,
            paused_until=endpoint.paused_until,
            pause_source=pause if endpoint.paused_until else "",
            retry_attempt=endpoint.retry_attempt,
            retry_of_run=None,
        )
        Slot.objects.filter(pk=row.pk).update(
            next_run_at=endpoint.next_run_at,
            next_run_source=endpoint.next_run_source,
            last_run_at=endpoint.last_run_at,
        )
        new = calls[self._written :]
        Run.objects.bulk_create(_run(row, call) for call in new)
        self._written = len(calls)


def _run(row: Endpoint, call: Call) -> Run:
    fields: dict[str, Any] = {
        "endpoint": row,
        "trigger": RunTrigger.SCHEDULED,
        "source": call.source,
        "scheduled_for": call.started,
        "started_at": call.started,
        "finished_at": call.finished,
        "duration_ms": int((call.finished - call.started).total_seconds() * 1000),
        "status": STATUS[call.status],
        "status_code": call.status_code,
        "request_method": "GET",
        "request_url": row.url,
        "response_body": call.body,
        "response_headers": call.headers or None,
        "attempt": call.attempt,
    }
    return Run(**fields)
