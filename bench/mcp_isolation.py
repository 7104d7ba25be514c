"""Tenant B's MCP calls while tenant A's tool calls take 5 s each (issue 32): B's
``list_jobs``, one call after another, p50/p99/max, first with A idle and then with A
running ``--slow-calls`` ``test_endpoint`` calls at once (each to a target that answers
after ``--delay`` s, called again as soon as it returns), in one run.

Served by ``manage.py mcp --http`` (uvicorn, the production MCP entry point) on a fresh
database ``cc_bench_mcp``; both tenants call through the official MCP SDK client from
this process. The rate limit is lifted for the run.

    .venv/bin/python bench/mcp_isolation.py [--seconds 20] [--delay 5] [--slow-calls 4]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
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
from tests.http_targets import TargetServer

DATABASE = pg_url("cc_bench_mcp")


def populate(slow_url: str) -> tuple[str, str, int]:
    """Tenants A and B, each a job and a write key; A's endpoint at ``slow_url``.
    Returns A's key, B's key and A's endpoint id."""
    from api.models import ApiKey
    from endpoints.models import Endpoint, Job, Tenant

    keys = []
    for name in ("A", "B"):
        tenant = Tenant.objects.create(name=f"tenant-{name}")
        job = Job.objects.create(tenant=tenant, name=f"job-{name}")
        key = ApiKey(tenant=tenant, name="bench")
        keys.append(key.issue())
        key.save()
        if name == "A":
            endpoint = Endpoint.objects.create(
                job=job, name="slow", url=slow_url, baseline_interval_ms=3_600_000
            )
    return keys[0], keys[1], endpoint.pk


def client(url: str, key: str) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120)
    return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=120)


async def quiet_calls(b: Any, seconds: float) -> dict[str, Any]:
    """B's list_jobs, one after another, until ``seconds`` have passed."""
    took: list[float] = []
    errors = 0
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        started = time.monotonic()
        result = await b.call_tool("list_jobs", {})
        took.append(time.monotonic() - started)
        errors += bool(result.is_error)
    ms = [s * 1000 for s in took]
    return {
        "calls": len(ms),
        "p50_ms": round(percentile(ms, 0.50), 2),
        "p99_ms": round(percentile(ms, 0.99), 2),
        "max_ms": round(max(ms), 2),
        "errors": errors,
    }


async def scenario(url: str, a_key: str, b_key: str, endpoint_id: int, args: Any) -> Any:
    async with client(url, b_key) as b:
        for _ in range(20):  # warm-up: connections, imports, caches
            await b.call_tool("list_jobs", {})
        idle = await quiet_calls(b, args.seconds)
        busy = await with_a_busy(b, url, a_key, endpoint_id, args)
    return idle, busy


async def with_a_busy(b: Any, url: str, a_key: str, endpoint_id: int, args: Any) -> Any:
    stop = asyncio.Event()
    slow: list[float] = []
    refused: list[str] = []

    async def slow_loop() -> None:
        async with client(url, a_key) as a:
            while not stop.is_set():
                started = time.monotonic()
                result = await a.call_tool("test_endpoint", {"endpoint_id": endpoint_id})
                if result.is_error:
                    refused.append(result.content[0].text)  # type: ignore[union-attr]
                else:
                    slow.append(time.monotonic() - started)

    loops = [asyncio.create_task(slow_loop()) for _ in range(args.slow_calls)]
    await asyncio.sleep(1.0)  # A's calls are at the target
    busy = await quiet_calls(b, args.seconds)
    stop.set()
    await asyncio.gather(*loops)
    busy["a_calls_done"] = len(slow)
    busy["a_call_median_s"] = round(sorted(slow)[len(slow) // 2], 2) if slow else None
    busy["a_refused"] = len(refused)
    busy["a_refusal"] = refused[0] if refused else None
    return busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--delay", type=float, default=5.0)
    parser.add_argument("--slow-calls", type=int, default=4)
    args = parser.parse_args()

    fresh_database(DATABASE)
    setup_django(DATABASE)
    port = free_port()
    env = bench_env(
        DATABASE,
        DEBUG="false",
        DJANGO_SECRET_KEY="bench-only-" + "x" * 40,
        CRONICORN_API_RATE="100000000/m",
        CRONICORN_API_CPU_PER_KEY="0",
    )
    results: dict[str, Any] = {
        "seconds": args.seconds,
        "delay_s": args.delay,
        "slow_calls": args.slow_calls,
        "load_before": load(),
    }
    with TargetServer() as target, Processes(env) as procs:
        target.reply("/slow", delay=args.delay)
        a_key, b_key, endpoint_id = populate(target.url("/slow"))
        procs.start("mcp-http", [sys.executable, "manage.py", "mcp", "--http", "--port", str(port)])
        if not wait_until(lambda: _up(f"http://127.0.0.1:{port}/healthz"), timeout=60):
            raise SystemExit(procs.log("mcp-http"))
        url = f"http://127.0.0.1:{port}/mcp"
        idle, busy = asyncio.run(scenario(url, a_key, b_key, endpoint_id, args))
        results["load_after"] = load()
    results["b_with_a_idle"] = idle
    results["b_with_a_busy"] = busy
    print_table(
        ["B's list_jobs", "calls", "p50 ms", "p99 ms", "max ms", "errors"],
        [
            [name, r["calls"], r["p50_ms"], r["p99_ms"], r["max_ms"], r["errors"]]
            for name, r in (("A idle", idle), (f"A: {args.slow_calls} x {args.delay:g} s", busy))
        ],
    )
    print(
        f"A's test_endpoint calls done meanwhile: {busy['a_calls_done']} "
        f"(median {busy['a_call_median_s']} s), refused: {busy['a_refused']}"
    )
    print(f"load before/after: {results['load_before']} / {results['load_after']}")
    write_results("mcp_isolation", results)


def _up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


if __name__ == "__main__":
    main()
