"""The cost of one run in one process, without any broker: where the CPU of a run goes.

Claims ``--n`` due endpoints at once (against the fast local server), then calls
``scheduling.execute_claim`` on them: first on one thread, then on ``--threads``
threads, and times ``perform_request`` alone for comparison. Reports wall and CPU time
per run for this process and for its PostgreSQL server processes, and the SQL statements
one run sends. This is the ceiling of one Python process (one core, the GIL), whatever
dispatches the claims (Celery or runscheduler).

On PostgreSQL it also runs a what-if, ``raw_run``: the same work (read the claimed
endpoint, insert the Run, call, finish the Run, reschedule through the governor on the
claim token with the optimistic check of the planning fields) in hand-written SQL, as
it is, with finish and reschedule in one transaction, and with each thread's finishes
written 25 at a time (one transaction per batch), to measure what batching the writes
would save. It is a measurement aid, not a second implementation: no retries, no
lost-slot handling.

    .venv/bin/python bench/execute_cost.py [--database postgres|sqlite] [--n 2000]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from datetime import timedelta
from functools import partial
from typing import Any

from _common import bench_env, fresh_database, load, pg_url, print_table, setup_django, sqlite_url
from _common import write_results as save
from _scenario import Params, Processes, cpu_seconds, free_port, make_endpoints, wait_until


def claim_all(n: int) -> list[Any]:
    from django.utils import timezone

    from endpoints.models import Endpoint
    from endpoints.scheduling import claim_due_endpoints

    now = timezone.now()
    Endpoint.objects.update(next_run_at=now - timedelta(seconds=1))
    claims = claim_due_endpoints(now=now, limit=n, horizon_ms=0)
    if len(claims) != n:
        raise RuntimeError(f"claimed {len(claims)} of {n} endpoints")
    return claims


def statements_of_one_run(claim: Any) -> list[str]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from endpoints.scheduling import execute_claim

    with CaptureQueriesContext(connection) as captured:
        execute_claim(claim)
    return [query["sql"].split(" ", 2)[0] + " " + _table(query["sql"]) for query in captured]


def _table(sql: str) -> str:
    for word in sql.replace('"', " ").split():
        if word.startswith("endpoints_"):
            return word
    return ""


def own_backend() -> int | None:
    """The PostgreSQL server process of this thread's connection (None on SQLite)."""
    from django.db import connection

    connection.ensure_connection()
    if connection.vendor != "postgresql":
        return None
    return int(connection.connection.info.backend_pid)


def measure(
    label: str,
    work: Sequence[Any],
    call: Callable[[Any], Any],
    threads: int,
    after: Callable[[], Any] = lambda: None,
) -> dict:
    """Wall and CPU per item of ``call`` over ``work`` on ``threads`` threads; each thread
    calls ``after`` once at the end of its share."""
    from django.db import connection

    backend_cpu: list[float] = []

    def run_slice(items: Sequence[Any]) -> None:
        backend = own_backend()
        before = cpu_seconds(backend) if backend else 0.0
        try:
            for item in items:
                call(item)
            after()
        finally:
            if backend:
                backend_cpu.append(cpu_seconds(backend) - before)
            connection.close()

    slices = [work[k::threads] for k in range(threads)]
    cpu_before, started = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(run_slice, slices))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_before
    count = len(work)
    return {
        "label": label,
        "threads": threads,
        "items": count,
        "per_s": round(count / wall, 1),
        "wall_ms": round(1000 * wall / count, 3),
        "cpu_ms_this_process": round(1000 * cpu / count, 3),
        "cpu_ms_postgres": round(1000 * sum(backend_cpu) / count, 3) if backend_cpu else None,
        "load": load(),
    }


# --- What-if: the hot path in raw SQL --------------------------------------------------

PLANNING = (
    "baseline_cron",
    "timezone",
    "baseline_interval_ms",
    "min_interval_ms",
    "max_interval_ms",
    "ai_hint_interval_ms",
    "ai_hint_next_run_at",
    "ai_hint_expires_at",
    "paused_until",
    "failure_count",
)
COLUMNS = ("id", "url", "method", "headers", "body", "timeout_ms", "max_response_size_kb")
READ = (
    "SELECT "
    + ", ".join(f"e.{c}" for c in (*COLUMNS, "locked_until", *PLANNING))
    + ", t.hmac_secret FROM endpoints_endpoint AS e"
    " JOIN endpoints_job AS j ON j.id = e.job_id JOIN endpoints_tenant AS t ON t.id = j.tenant_id"
    " WHERE e.id = %s AND e.claim_token = %s AND e.archived_at IS NULL AND j.status = 'active'"
)
INSERT_RUN = (
    "INSERT INTO endpoints_run (endpoint_id, trigger, source, scheduled_for, started_at, status,"
    " claim_token, lease_expires_at, request_method, request_url, response_truncated, error,"
    " attempt) VALUES (%s, %s, %s, %s, %s, 'running', %s, %s, %s, %s, false, '', 1) RETURNING id"
)
FINISH_RUN = (
    "UPDATE endpoints_run SET status = %s, finished_at = %s, duration_ms = %s, status_code = %s,"
    " response_body = %s, response_truncated = %s, response_size_bytes = %s, error = %s"
    " WHERE id = %s AND status = 'running'"
)
RESCHEDULE = (
    "UPDATE endpoints_endpoint SET last_run_at = %s, next_run_at = %s, next_run_source = %s,"
    " failure_count = %s, claim_token = NULL, locked_until = NULL"
    " WHERE id = %s AND claim_token = %s AND "
    + " AND ".join(f"{c} IS NOT DISTINCT FROM %s" for c in PLANNING)
)


WRITE_BATCH = 25
_pending = threading.local()


def raw_run(claim: Any, *, mode: str = "each") -> None:
    """The run in hand-written SQL. ``mode``: ``each`` (finish and reschedule as two
    autocommitted statements), ``one_tx`` (both in one transaction) or ``batched`` (this
    thread's finishes written ``WRITE_BATCH`` at a time, one transaction per batch)."""
    from django.db import connection, transaction

    with connection.cursor() as cursor:
        finish, reschedule = _raw_start_and_call(cursor, claim)
        if mode == "batched":
            batch = _pending.__dict__.setdefault("writes", [])
            batch.append((finish, reschedule))
            if len(batch) >= WRITE_BATCH:
                flush_raw_writes()
            return
        with transaction.atomic() if mode == "one_tx" else nullcontext():
            cursor.execute(FINISH_RUN, finish)
            cursor.execute(RESCHEDULE, reschedule)


def flush_raw_writes() -> None:
    from django.db import connection, transaction

    batch = _pending.__dict__.pop("writes", [])
    if batch:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(FINISH_RUN, [finish for finish, _ in batch])
            cursor.executemany(RESCHEDULE, [reschedule for _, reschedule in batch])


def _raw_start_and_call(cursor: Any, claim: Any) -> tuple[list[Any], list[Any]]:
    """Read, insert the Run, call; returns the finish and reschedule parameters."""
    import json
    from types import SimpleNamespace

    from django.utils import timezone
    from psycopg.types.json import Jsonb

    from endpoints.executor import HttpRequest, perform_request
    from endpoints.governor import EndpointSchedule, plan_next_run

    started = timezone.now()
    cursor.execute(READ, [claim.endpoint_id, claim.claim_token])
    names = (*COLUMNS, "locked_until", *PLANNING, "secret")
    e = SimpleNamespace(**dict(zip(names, cursor.fetchone(), strict=True)))
    read_planning = [getattr(e, c) for c in PLANNING]
    slot = [claim.trigger, claim.source, claim.scheduled_for, started, claim.claim_token]
    cursor.execute(INSERT_RUN, [e.id, *slot, e.locked_until, e.method, e.url])
    run_id = cursor.fetchone()[0]
    request = HttpRequest(
        url=e.url,
        method=e.method,
        headers=json.loads(e.headers),
        body=json.loads(e.body) if e.body else None,
        timeout_ms=e.timeout_ms,
        max_response_size_kb=e.max_response_size_kb,
        hmac_secret=e.secret,
    )
    result = perform_request(request)
    finished = timezone.now()
    e.failure_count = 0 if result.status == "success" else e.failure_count + 1
    plan = plan_next_run(started, EndpointSchedule.from_endpoint(e))
    finish = [result.status, finished, int(result.duration_ms), result.status_code]
    finish += [Jsonb(result.body), result.truncated, result.size_bytes, result.error or ""]
    reschedule = [started, plan.next_run_at, plan.source, e.failure_count]
    reschedule += [e.id, claim.claim_token, *read_planning]
    return [*finish, run_id], reschedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()
    if not 100 <= args.n <= 20_000:
        raise SystemExit("Keep --n within 100..20000.")

    url = pg_url("cc_bench_execute") if args.database == "postgres" else sqlite_url("execute")
    fresh_database(url)
    setup_django(url, CRONICORN_LEASE_GRACE_SECONDS="600")  # runs outlive a slow pass
    from endpoints.executor import HttpRequest, perform_request
    from endpoints.scheduling import execute_claim

    with Processes(bench_env(url)) as procs:
        port = free_port()
        procs.start("server", [sys.executable, "bench/fast_server.py", str(port)])
        if not wait_until(lambda: "ready" in procs.log("server"), timeout=20):
            raise RuntimeError("the fast server did not start")
        target = f"http://127.0.0.1:{port}/ping"
        make_endpoints(Params(mode="execute", database=args.database, n=args.n), target)
        request = HttpRequest(url=target, timeout_ms=5000)

        def http(_: object) -> object:
            return perform_request(request)

        rows = [measure("perform_request only", range(args.n), http, 1)]
        claims = claim_all(args.n)
        statements = statements_of_one_run(claims[0])
        rows.append(measure("execute_claim", claims[1:], execute_claim, 1))
        claims = claim_all(args.n)
        rows.append(measure("execute_claim", claims, execute_claim, args.threads))
        if args.database == "postgres":
            claims = claim_all(args.n)
            rows.append(measure("what-if: raw SQL", claims, raw_run, args.threads))
            claims = claim_all(args.n)
            one_tx = partial(raw_run, mode="one_tx")
            label = "what-if: raw SQL, finish+resched 1 tx"
            rows.append(measure(label, claims, one_tx, args.threads))
            claims = claim_all(args.n)
            batched = partial(raw_run, mode="batched")
            label = f"what-if: raw SQL, finishes {WRITE_BATCH} per tx"
            rows.append(measure(label, claims, batched, args.threads, flush_raw_writes))

    print(f"\none run sends {len(statements)} statements: {', '.join(statements)}\n")
    print_table(
        ["what", "threads", "per s", "wall ms", "cpu ms (python)", "cpu ms (postgres)", "load"],
        [
            [
                r["label"],
                r["threads"],
                r["per_s"],
                r["wall_ms"],
                r["cpu_ms_this_process"],
                r["cpu_ms_postgres"] if r["cpu_ms_postgres"] is not None else "-",
                r["load"],
            ]
            for r in rows
        ],
    )
    save("execute_cost", {"args": vars(args), "statements": statements, "rows": rows})


if __name__ == "__main__":
    main()
