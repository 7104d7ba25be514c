"""The cost of one run in one process, without any broker: where the CPU of a run goes.

Claims ``--n`` due endpoints at once (against the fast local server), then runs them:

- ``perform_request`` alone on one thread (the HTTP client's share);
- ``running.execute_claim`` on one thread and on ``--threads`` threads: each run
  written on its own (finish and reschedule right after its request);
- the dispatcher (``endpoints.engine.dispatch.ClaimDispatcher``) with ``--threads`` runs in
  flight, as Celery workers and ``runscheduler`` run claims: runs due together are
  started together, their requests run on the executor's event loop, and runs
  finishing together are written together.

Reports wall and CPU time per run for this process and for its PostgreSQL server
processes. This is the ceiling of one Python process (one core, the GIL), whatever
dispatches the claims (Celery or runscheduler).

    .venv/bin/python bench/execute_cost.py [--database postgres|sqlite] [--n 2000]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from _common import bench_env, fresh_database, load, pg_url, print_table, setup_django, sqlite_url
from _common import write_results as save
from _cpu import cpu_seconds
from _scenario import Params, Processes, free_port, make_endpoints, wait_until


def claim_all(n: int) -> list[Any]:
    from django.utils import timezone

    from endpoints.engine.claiming import claim_due_endpoints
    from endpoints.models import Slot

    now = timezone.now()
    Slot.objects.update(next_run_at=now - timedelta(seconds=1))
    claims = claim_due_endpoints(now=now, limit=n, horizon_ms=0)
    if len(claims) != n:
        raise RuntimeError(f"claimed {len(claims)} of {n} endpoints")
    return claims


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


def through_dispatcher(claims: Sequence[Any], threads: int) -> dict:
    """The claims through a dispatcher, as a worker runs them; PostgreSQL CPU is that of
    the dispatcher's own connections (opened for this, so all of it is this work)."""
    from django.db import connection

    from endpoints.engine.dispatch import ClaimDispatcher

    cpu_before, started = time.process_time(), time.perf_counter()
    dispatcher = ClaimDispatcher(max_in_flight=threads)
    futures = [dispatcher.submit(claim) for claim in claims]
    for future in futures:
        future.result()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_before
    backend_cpu = None
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()"
            )
            backend_cpu = sum(cpu_seconds(pid) for (pid,) in cursor.fetchall())
    dispatcher.shutdown(timeout=10)
    count = len(claims)
    return {
        "label": "dispatcher (writes batched)",
        "threads": threads,
        "items": count,
        "per_s": round(count / wall, 1),
        "wall_ms": round(1000 * wall / count, 3),
        "cpu_ms_this_process": round(1000 * cpu / count, 3),
        "cpu_ms_postgres": round(1000 * backend_cpu / count, 3) if backend_cpu else None,
        "load": load(),
    }


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
    setup_django(url, CRONICORN_LEASE_SECONDS="600")  # runs outlive a slow pass
    from endpoints.engine.executor import HttpRequest, perform_request
    from endpoints.engine.running import execute_claim

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
        rows.append(measure("execute_claim (each run written alone)", claims, execute_claim, 1))
        claims = claim_all(args.n)
        label = "execute_claim (each run written alone)"
        rows.append(measure(label, claims, execute_claim, args.threads))
        rows.append(through_dispatcher(claim_all(args.n), args.threads))

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
    save("execute_cost", {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
