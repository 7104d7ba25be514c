"""The simulator against real time: one (compressed) scenario end to end through
``manage.py runscheduler`` against a target on 127.0.0.1 that plays its trace, then the
simulator over the same scenario from the same start; their decisions side by side (each
run's source, each hint the planner wrote). Used by ``test_simulation_real_time.py``
and ``bench/adaptation.py --real-time``. Django in this process must be configured for
``database_url``, migrated; everything in it is deleted first."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from django.utils import timezone

from endpoints.models import Endpoint, Heartbeat, HintHistory, Job, Run, Tenant
from planner.models import AnalysisSession
from planner.simulation.scenarios import Scenario, load_scenarios, parse_offset
from planner.simulation.simulator import RulesPlanner, Simulation, Written
from tests.engine_processes import manage, process_env, running, stop, wait_until

PLANNER_SECONDS = 1
SCENARIOS = Path(__file__).resolve().parents[2] / "bench" / "scenarios"
# The scenarios played in real time: name, compression, start (into the scenario), and
# seconds of compressed time. Each has the planner decide something different: a pause
# until a Retry-After, a tightened interval, failures left to the backoff.
REAL_TIME = (
    ("rate-limit-retry-after", 30, "14:02:00", 100),
    ("incident", 60, "10:40:00", 90),
    ("flapping", 30, "7:59:00", 100),
)
LEAD = timedelta(seconds=1.5)  # from creating the endpoint to its first run
HINT_KINDS = {
    "propose_interval": "interval",
    "propose_next_time": "oneshot",
    "clear_hints": "clear",
}


@dataclass
class Check:
    scenario: str
    seconds: float
    real_sources: list[str]
    simulated_sources: list[str]
    real_hints: list[str]
    simulated_hints: list[str]
    real_status_codes: list[int | None]
    simulated_status_codes: list[int | None]
    largest_gap_ms: float  # between a real run's slot and the simulated one's start

    @property
    def same(self) -> bool:
        return (
            self.real_sources == self.simulated_sources
            and self.real_hints == self.simulated_hints
            and self.real_status_codes == self.simulated_status_codes
        )

    def words(self) -> str:
        verdict = "the same decisions" if self.same else "DIFFERENT decisions"
        return (
            f"{self.scenario}: {len(self.real_sources)} runs, hints {self.real_hints} in real "
            f"time; {len(self.simulated_sources)} runs, hints {self.simulated_hints} simulated: "
            f"{verdict}; slots at most {self.largest_gap_ms:.0f} ms apart"
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "same": self.same}


@contextmanager
def playing(scenario: Scenario) -> Iterator[tuple[str, dict[str, datetime]]]:
    """A target on 127.0.0.1 answering as the scenario does at (now - start), ``start``
    set in the yielded dict once known (before it, the first phase)."""
    clock: dict[str, datetime] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            now = timezone.now()
            start = clock.get("start", now)
            answer = scenario.answer_at(scenario.start + (now - start))
            time.sleep(answer.latency_ms / 1000)
            payload = json.dumps(answer.body).encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/trace", clock
    finally:
        server.shutdown()
        server.server_close()


def real_time_scenario(name: str) -> Scenario:
    """The scenario of REAL_TIME named ``name``, compressed as it says."""
    _, factor, start, seconds = next(entry for entry in REAL_TIME if entry[0] == name)
    [scenario] = load_scenarios(SCENARIOS, [name])
    return scenario.compressed(factor, start_s=parse_offset(start, name), seconds=seconds)


def compare_with_runscheduler(scenario: Scenario, *, database_url: str, log: Path) -> Check:
    Tenant.objects.all().delete()
    env = process_env(
        DATABASE_URL=database_url,
        CRONICORN_PLANNER_BACKEND="rules",
        CRONICORN_PLANNER_SECONDS=str(PLANNER_SECONDS),
        CRONICORN_LOG_LEVEL="INFO",
    )
    seconds = scenario.duration_s
    with (
        playing(scenario) as (url, clock),
        running(manage("runscheduler"), env=env, log=log) as proc,
    ):
        began = timezone.now()
        up = wait_until(
            lambda: Heartbeat.objects.filter(name="tick", at__gt=began).exists(), timeout=60
        )
        assert up, f"runscheduler did not start; see {log}"
        start = _endpoint(scenario, url)
        clock["start"] = start
        time.sleep(max((start - timezone.now()).total_seconds(), 0) + seconds + 1)
        stop(proc)
    end = start + timedelta(seconds=seconds)
    runs = list(Run.objects.filter(started_at__lt=end).order_by("started_at"))
    hints = list(HintHistory.objects.filter(created_at__lt=end).order_by("created_at", "pk"))
    first = AnalysisSession.objects.order_by("started_at").first()
    phase = ((first.started_at - start).total_seconds() % PLANNER_SECONDS) if first else 0.0
    sim = Simulation(
        replace(scenario, start=start),
        RulesPlanner(),
        planner_seconds=PLANNER_SECONDS,
        planner_phase_s=phase,
    ).run()
    pairs = zip(runs, sim.calls, strict=False)
    return Check(
        scenario=scenario.name,
        seconds=seconds,
        real_sources=[run.source for run in runs],
        simulated_sources=[call.source for call in sim.calls],
        real_hints=[hint.kind for hint in hints],
        simulated_hints=[_kind(written) for written in sim.written],
        real_status_codes=[run.status_code for run in runs],
        simulated_status_codes=[call.status_code for call in sim.calls],
        largest_gap_ms=max(
            (abs((run.scheduled_for - call.started).total_seconds()) * 1000 for run, call in pairs),
            default=0.0,
        ),
    )


def _endpoint(scenario: Scenario, url: str) -> datetime:
    """The scenario's endpoint, its first run LEAD from now; returns that time."""
    config = scenario.endpoint
    tenant = Tenant.objects.create(name="real-time")
    job = Job.objects.create(tenant=tenant, name="bench", run_policy=config.get("run_policy") or {})
    start = timezone.now() + LEAD
    endpoint = Endpoint(
        job=job,
        name=scenario.name[:100],
        url=url,
        baseline_cron=config.get("baseline_cron", ""),
        timezone=config.get("timezone", "UTC"),
        baseline_interval_ms=config.get("baseline_interval_ms"),
        min_interval_ms=config.get("min_interval_ms"),
        max_interval_ms=config.get("max_interval_ms"),
        timeout_ms=config.get("timeout_ms", 30_000),
        next_run_at=start,
        next_run_source="baseline-interval",
    )
    endpoint.full_clean()
    endpoint.save()
    return start


def _kind(written: Written) -> str:
    if written.tool == "pause_until":
        return "pause" if written.arguments["untilIso"] else "resume"
    return HINT_KINDS[written.tool]
