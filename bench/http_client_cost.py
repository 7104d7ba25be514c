"""What one HTTP request costs the process that makes it, by client shape: why the
executor runs its requests on an aiohttp event loop (bench/README.md).

Against the fast local server, ``--n`` GETs each way, ``--concurrency`` at a time:

- the executor (SSRF guard, deadline, size cap, JSON parsing; its requests run on the
  process's event loop): ``submit_request`` with ``--concurrency`` in flight, as the
  dispatcher calls it; ``perform_request`` blocking one thread, then ``--concurrency``
  threads;
- bare clients without our executor around them: ``httpcore.ConnectionPool`` on
  threads (the executor's client until session 3), ``httpcore.AsyncConnectionPool``
  and ``aiohttp`` on an asyncio event loop.

Reports requests/s and CPU ms per request of this process (the server's own CPU is not
counted). The bare clients do no SSRF check, deadline or size cap.

    .venv/bin/python bench/http_client_cost.py [--n 4000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpcore
from _common import bench_env, load, print_table, setup_django, sqlite_url
from _common import write_results as save
from _scenario import Processes, free_port, wait_until


def timed(label: str, n: int, concurrency: int, run: Callable[[], None]) -> dict[str, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "label": label,
        "concurrency": concurrency,
        "requests": n,
        "per_s": round(n / wall, 1),
        "cpu_ms_per_request": round(1000 * cpu / n, 3),
        "load": load(),
    }


def on_threads(n: int, threads: int, one: Callable[[], Any]) -> Callable[[], None]:
    def run() -> None:
        with ThreadPoolExecutor(threads) as pool:
            for _ in pool.map(lambda _: one(), range(n)):
                pass

    return run


def on_submit(n: int, concurrency: int, submit: Callable[[], Future[Any]]) -> Callable[[], None]:
    def run() -> None:
        for start in range(0, n, concurrency):
            futures = [submit() for _ in range(min(concurrency, n - start))]
            for future in futures:
                if future.result().status != "success":
                    raise RuntimeError(future.result().error)

    return run


def on_event_loop(n: int, concurrency: int, url: str) -> Callable[[], None]:
    async def main() -> None:
        async with httpcore.AsyncConnectionPool(max_connections=concurrency) as pool:
            remaining = iter(range(n))

            async def worker() -> None:
                for _ in remaining:
                    response = await pool.request("GET", url)
                    if response.status != 200:
                        raise RuntimeError(f"HTTP {response.status}")

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    return lambda: asyncio.run(main())


def on_aiohttp(n: int, concurrency: int, url: str) -> Callable[[], None]:
    import aiohttp

    async def main() -> None:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            remaining = iter(range(n))

            async def worker() -> None:
                for _ in remaining:
                    async with session.get(url) as response:
                        await response.read()
                        if response.status != 200:
                            raise RuntimeError(f"HTTP {response.status}")

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    return lambda: asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    if not 100 <= args.n <= 20_000 or not 1 <= args.concurrency <= 64:
        raise SystemExit("Keep --n within 100..20000 and --concurrency within 1..64.")

    url = sqlite_url("http_client_cost")  # Django only for the executor's settings
    setup_django(url)
    from endpoints.engine.executor import (
        HttpRequest,
        NetworkPolicy,
        perform_request,
        submit_request,
    )

    with Processes(bench_env(url)) as procs:
        port = free_port()
        procs.start("server", [sys.executable, "bench/fast_server.py", str(port)])
        if not wait_until(lambda: "ready" in procs.log("server"), timeout=20):
            raise RuntimeError("the fast server did not start")
        target = f"http://127.0.0.1:{port}/ping"
        request = HttpRequest(url=target, timeout_ms=5000)
        policy = NetworkPolicy(allow_private=True)
        sync_pool = httpcore.ConnectionPool(max_connections=args.concurrency)

        def executor() -> None:
            result = perform_request(request, policy=policy)
            if result.status != "success":
                raise RuntimeError(result.error)

        def bare() -> None:
            response = sync_pool.request("GET", target)
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}")

        n, c = args.n, args.concurrency
        submitted = on_submit(n, c, lambda: submit_request(request, policy=policy))
        rows = [
            timed("submit_request, in flight", n, c, submitted),
            timed("perform_request, 1 thread", n, 1, on_threads(n, 1, executor)),
            timed("perform_request, threads", n, c, on_threads(n, c, executor)),
            timed("bare httpcore, threads", n, c, on_threads(n, c, bare)),
            timed("bare httpcore, asyncio event loop", n, c, on_event_loop(n, c, target)),
            timed("aiohttp, asyncio event loop", n, c, on_aiohttp(n, c, target)),
        ]
        sync_pool.close()

    print_table(
        ["client", "concurrency", "requests/s", "cpu ms/request", "load"],
        [
            [row["label"], row["concurrency"], row["per_s"], row["cpu_ms_per_request"], row["load"]]
            for row in rows
        ],
    )
    save("http_client_cost", {"args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
