"""Requests/s and latency of the REST API under gunicorn (2 sync workers, the
production entry point) for four calls: GET one endpoint, list a page of 100 among
100 000 endpoints (at random cursors), POST run-now, and the preview of 100 runs of an
endpoint whose run policy leaves one free minute a week (the worst windows a policy may
have; issue 32: 7-16 s of server CPU when planning searched the windows).

Each scenario runs ``--clients`` keep-alive client threads for ``--seconds`` (after a
2 s warm-up) against a fresh database ``cc_bench_api``; the clients share the machine
with the server, so the figures are a floor. The rate limit is lifted for the run.

    .venv/bin/python bench/api_requests.py [--endpoints 100000] [--clients 8] [--seconds 15]
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    bench_env,
    fresh_database,
    load,
    percentile,
    pg_url,
    print_table,
    setup_django,
    wait_until,
    write_results,
)
from bench._scenario import Processes, free_port

DATABASE = pg_url("cc_bench_api")
# Blacked out all week but Wednesday 23:59-00:00.
WORST_WINDOWS = {
    "blackout": [
        {"start": "00:00", "end": "23:59"},
        {"start": "23:59", "end": "00:00", "days": ["mon", "tue", "thu", "fri", "sat", "sun"]},
    ]
}


def populate(n: int) -> tuple[str, list[int], int]:
    """A tenant with one job of ``n`` endpoints; returns a write key, the ids, the job."""
    from django.db import connection

    from api.models import ApiKey
    from endpoints.models import Endpoint, Job, Tenant

    tenant = Tenant.objects.create(name="bench", max_endpoints=n + 10)
    job = Job.objects.create(tenant=tenant, name="bench")
    batch = 5_000
    for start in range(0, n, batch):
        Endpoint.objects.bulk_create(
            Endpoint(
                job=job,
                name=f"e{i:06d}",
                url=f"https://example.com/{i}",
                baseline_interval_ms=3_600_000,
            )
            for i in range(start, min(n, start + batch))
        )
    key = ApiKey(tenant=tenant, name="bench")
    raw = key.issue()
    key.save()
    ids = list(Endpoint.objects.filter(job=job).values_list("pk", flat=True))
    Endpoint.objects.filter(pk=ids[0]).update(run_policy=WORST_WINDOWS)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # as autovacuum would have, long before a real request
    return raw, ids, job.pk


def hammer(
    base: str, key: str, request: Callable[[httpx.Client], httpx.Response], args: Any
) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[int] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + 2 + args.seconds
    measure_from = time.monotonic() + 2

    def client() -> None:
        own: list[float] = []
        failed: list[int] = []
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
            while (now := time.monotonic()) < stop_at:
                response = request(http)
                took = time.monotonic() - now
                if now >= measure_from:
                    own.append(took)
                    if response.status_code >= 300:
                        failed.append(response.status_code)
        with lock:
            latencies.extend(own)
            errors.extend(failed)

    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ms = [s * 1000 for s in latencies]
    return {
        "requests": len(ms),
        "per_second": round(len(ms) / args.seconds, 1),
        "p50_ms": round(percentile(ms, 0.50), 2),
        "p99_ms": round(percentile(ms, 0.99), 2),
        "errors": len(errors),
        "error_statuses": sorted(set(errors)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()

    fresh_database(DATABASE)
    setup_django(DATABASE)
    key, ids, _ = populate(args.endpoints)
    from api.pagination import _encode

    port = free_port()
    env = bench_env(
        DATABASE,
        DEBUG="false",
        DJANGO_SECRET_KEY="bench-only-" + "x" * 40,
        CRONICORN_API_RATE="100000000/m",
        CRONICORN_API_CPU_PER_KEY="0",
    )
    base = f"http://127.0.0.1:{port}/api/v1"
    scenarios: dict[str, Callable[[httpx.Client], httpx.Response]] = {
        "GET endpoint": lambda http: http.get(f"/endpoints/{random.choice(ids)}"),
        "list 100 of 100k": lambda http: http.get(
            "/endpoints", params={"limit": 100, "cursor": _encode(random.choice(ids[:-200]), 0)}
        ),
        "POST run-now": lambda http: http.post(f"/endpoints/{random.choice(ids)}/run"),
        "preview 100, worst windows": lambda http: http.get(
            f"/endpoints/{ids[0]}/preview", params={"count": 100}
        ),
    }
    results: dict[str, Any] = {
        "endpoints": args.endpoints,
        "clients": args.clients,
        "seconds": args.seconds,
        "load_before": load(),
    }
    with Processes(env) as procs:
        procs.start(
            "gunicorn-api",
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                "cronicorn_site/gunicorn.conf.py",
                "-w",
                "2",
                "-b",
                f"127.0.0.1:{port}",
                "cronicorn_site.wsgi",
            ],
        )
        ready = wait_until(lambda: _up(f"http://127.0.0.1:{port}/healthz"), timeout=60)
        if not ready:
            raise SystemExit(procs.log("gunicorn-api"))
        for name, request in scenarios.items():
            results[name] = hammer(base, key, request, args)
        results["load_after"] = load()
    rows = [
        [name, r["requests"], r["per_second"], r["p50_ms"], r["p99_ms"], r["errors"]]
        for name, r in results.items()
        if isinstance(r, dict)
    ]
    print_table(["call", "requests", "req/s", "p50 ms", "p99 ms", "errors"], rows)
    print(f"load before/after: {results['load_before']} / {results['load_after']}")
    print(write_results("api_requests", results))


def _up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


if __name__ == "__main__":
    main()
