"""Noisy neighbour: tenant B's lateness and latency beside a tenant A doing its worst.

B is ordinary: ``--b-endpoints`` endpoints at 1 s against the fast local server, and one
client of each interface, each on a schedule of one request every ``--b-every`` s:
``GET /api/v1/jobs`` (REST, gunicorn with ``--web-workers`` sync workers, the production
entry point) and the MCP tool ``list_jobs`` (``manage.py mcp --http``, uvicorn). In one
run, after a warm-up, B is measured with A idle, then with A hostile, A doing the worst
one valid write key and one staff login allow:

- ``--a-endpoints`` endpoints (capped by A's quota, ``max_endpoints``) at A's floor
  interval, created through the REST API, each with the largest run policy validation
  accepts (``_largest_policy``: every list and text at the bound read from
  ``endpoints.policies``, shrunk until ``validation.check_run_policy`` accepts it, so the
  bench follows a new bound), its windows leaving one free minute a week: the minute the
  hostile window starts in. They call a slow target (503 after ``--slow-seconds``), so
  every slot retries to the maximum;
- ``--previews`` clients of ``GET /api/v1/endpoints/{id}/preview?count=100`` and
  ``--admin-previews`` of the admin's live preview (``console/admin/preview.py``, the form
  posted with that policy);
- ``--tests`` MCP clients of ``test_endpoint`` (one call of the slow target);
- ``--analyses`` clients of ``POST /api/v1/endpoints/{id}/analyze`` (rules backend).

A's clients run in a process of their own, so they do not slow B's clients down. The
hostile window starts on a minute boundary (A's free minute), so the idle window before it
lasts ``--idle`` to ``--idle`` + 60 s. Reported for each window, from B's Run rows: B's
slots scheduled in it (fewer than one a second each when late starts push the next
ones later: at the tenant's floor an interval plans from the run's start) and their start
lateness (``started_at - scheduled_for``) p50/p99/max; B's request times p50/p99, each
counted from its planned start (a stall counts for every request it delays); and the
ratios hostile/idle. ``--scheduler-cpus 0 --web-cpus 1``: the scheduler alone on core 0,
the rest on core 1 (the web; as machines of their own, the targets, the clients, this
database's PostgreSQL backends and the broker's Redis). Engines: ``runscheduler``
(PostgreSQL), ``--only runscheduler,celery`` adds Celery (beat, tick, execute workers).
Every client loop is bounded by its window and by ``--max-requests``. ``--rounds N`` runs
the whole scenario N times (a fresh database each) and reports B's p99 ratio round by
round and their median: one p99 of 600 slots moves by 2x between runs of the same code.

    .venv/bin/python bench/noisy_neighbour.py [--only runscheduler,celery] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BROKER_URL,
    ROOT,
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
from _cpu import (
    cores_busy,
    cores_by_part,
    cpu_by_process,
    machine_busy,
    move_to,
    steal_percent,
    stolen,
)
from _largest_policy import largest_policy, policy_sizes
from _scenario import (
    LOGS,
    Params,
    Processes,
    free_port,
    start_celery,
    start_runscheduler,
)

ENGINES = ("runscheduler", "celery")
PASSWORD = "noisy-neighbour-bench"  # A's staff user, in the bench database only
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
FAR_FUTURE = timedelta(days=1)


# --- the world ------------------------------------------------------------------------


def make_tenants(b_endpoints: int, fast_url: str) -> dict[str, Any]:
    """B with its endpoints (not yet due) and a key; A with a key and a staff user."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from api.models import ApiKey
    from endpoints.models import Endpoint, Job, Tenant

    b = Tenant.objects.create(name="B")
    job = Job.objects.create(tenant=b, name="b-jobs")
    later = timezone.now() + FAR_FUTURE
    # No max_interval_ms: the rules planner never relaxes B's cadence (its calm rule
    # needs a maximum above the baseline), so every slot measured is one B asked for.
    Endpoint.objects.bulk_create(
        Endpoint(
            job=job,
            name=f"b{i}",
            url=f"{fast_url}?b={i}",
            baseline_interval_ms=1000,
            timeout_ms=5000,
            next_run_at=later,
            next_run_source="baseline-interval",
        )
        for i in range(b_endpoints)
    )
    a = Tenant.objects.create(name="A")
    user = get_user_model().objects.create_user("a-staff", password=PASSWORD, is_staff=True)
    a.members.add(user)
    keys = {}
    for tenant in (a, b):
        key = ApiKey(tenant=tenant, name=f"{tenant.name} key")
        keys[tenant.name] = key.issue()
        key.save()
    return {"a": a, "b": b, "keys": keys, "user": user.username}


def make_a_endpoints(
    api: str, key: str, tenant: Any, slow_url: str, count: int, policy: Any, clients: int
) -> tuple[int, list[int]]:
    """A's job and endpoints through the REST API, as A's key would create them (on
    ``clients`` connections at once); the job's id and the endpoints'."""
    from endpoints.validation import MAX_RESPONSE_KB, MAX_TIMEOUT_MS

    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=api, headers=headers, timeout=60) as http:
        job = http.post("/jobs", json={"name": "a-jobs", "run_policy": policy})
        if job.status_code != 201:
            raise SystemExit(f"A's job was refused: {job.status_code} {job.text[:2000]}")

        def create(i: int) -> int:
            answer = http.post(
                "/endpoints",
                json={
                    "job_id": job.json()["id"],
                    "name": f"a{i}",
                    "url": f"{slow_url}?a={i}",
                    "baseline_interval_ms": tenant.min_interval_ms,
                    "timeout_ms": MAX_TIMEOUT_MS,
                    "max_response_size_kb": MAX_RESPONSE_KB,
                    "run_policy": policy,
                },
            )
            if answer.status_code != 201:
                raise SystemExit(f"A's endpoint was refused: {answer.status_code} {answer.text}")
            return int(answer.json()["id"])

        with ThreadPoolExecutor(clients) as pool:
            return int(job.json()["id"]), list(pool.map(create, range(count)))


def make_b_due(b: Any) -> datetime:
    """B's first runs spread evenly over one second from a second from now (returned)."""
    from django.utils import timezone

    from endpoints.models import Slot

    slots = list(Slot.objects.filter(job__tenant=b).order_by("pk"))
    start = timezone.now() + timedelta(seconds=1)
    for i, slot in enumerate(slots):
        slot.next_run_at = start + timedelta(milliseconds=i * 1000 / len(slots))
    Slot.objects.bulk_update(slots, ["next_run_at"])
    return start


def admin_form(job_id: int, endpoint_id: int, slow_url: str, policy: Any) -> dict[str, str]:
    """What the admin's change form posts for one of A's endpoints, with the policy."""
    return {
        "job": str(job_id),
        "name": f"a-preview-{endpoint_id}",
        "url": slow_url,
        "method": "GET",
        "headers": "{}",
        "secret_header_names": "[]",
        "body": "null",
        "timeout_ms": "30m",
        "max_response_size_kb": "100",
        "baseline_cron": "",
        "timezone": "UTC",
        "baseline_interval_ms": "1000",
        "min_interval_ms": "",
        "max_interval_ms": "",
        "description": "",
        "run_policy": json.dumps(policy),
        "initial-headers": "{}",
        "initial-secret_header_names": "[]",
        "initial-run_policy": "{}",
    }


# --- clients --------------------------------------------------------------------------


def mcp_call(http: httpx.Client, url: str, tool: str, arguments: dict[str, Any]) -> str:
    """One stateless MCP tool call (JSON-RPC over POST); its outcome in a word."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    response = http.post(url, json=message, headers=MCP_HEADERS)
    if response.status_code != 200:
        return str(response.status_code)
    result = response.json().get("result") or {}
    if result.get("isError"):
        text = " ".join(part.get("text", "") for part in result.get("content", []))
        return "tool error " + text.split(":")[0][:20]
    return "ok"


class Loop(threading.Thread):
    """Calls ``call`` from ``start`` until ``stop`` (epoch seconds), at most ``most``
    times: back to back, or with ``every`` once per ``every`` s on a fixed schedule, each
    call's time then counted from its planned start, so that a stall counts for every call
    it delays (no coordinated omission). Keeps (planned start, seconds, outcome)."""

    def __init__(
        self, call: Callable[[int], str], *, start: float, stop: float, every: float = 0.0,
        most: int = 100_000,
    ) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.call, self.start_at, self.stop_at = call, start, stop
        self.every, self.most = every, most
        self.samples: list[tuple[float, float, str]] = []

    def run(self) -> None:
        for count in range(self.most):
            planned = self.start_at + count * self.every if self.every else time.time()
            if planned >= self.stop_at:
                return
            time.sleep(max(0.0, planned - time.time()))
            try:
                outcome = self.call(count)
            except httpx.HTTPError as exc:
                outcome = type(exc).__name__
            self.samples.append((planned, time.time() - planned, outcome))


def latency(samples: list[tuple[float, float, str]], start: float, end: float) -> dict[str, Any]:
    inside = [(took, outcome) for at, took, outcome in samples if start <= at < end]
    ms = [took * 1000 for took, _ in inside]
    return {
        "requests": len(ms),
        "p50_ms": round(percentile(ms, 0.50), 1) if ms else None,
        "p99_ms": round(percentile(ms, 0.99), 1) if ms else None,
        "max_ms": round(max(ms), 1) if ms else None,
        "outcomes": dict(Counter(outcome for _, outcome in inside)),
    }


def hostile(plan: dict[str, Any]) -> dict[str, Any]:
    """A's clients, in their own process, from ``plan["start"]`` to ``plan["stop"]``."""
    time.sleep(max(0.0, plan["start"] - time.time()))  # the admin's sign-in is A's too
    bearer = {"Authorization": f"Bearer {plan['key']}"}
    ids, timeout = plan["endpoint_ids"], plan["timeout"]
    loops: dict[str, list[Loop]] = {}

    def each(name: str, clients: int, make: Callable[[int], Callable[[int], str]]) -> None:
        loops[name] = [
            Loop(make(k), start=plan["start"], stop=plan["stop"], most=plan["max_requests"])
            for k in range(clients)
        ]

    def preview(k: int) -> Callable[[int], str]:
        http = httpx.Client(base_url=plan["api"], headers=bearer, timeout=timeout)
        return lambda n: str(
            http.get(
                f"/endpoints/{ids[(k + n) % len(ids)]}/preview", params={"count": 100}
            ).status_code
        )

    def analysis(k: int) -> Callable[[int], str]:
        # Each client its own endpoint: the rules pause a failing endpoint they analyse,
        # and the others are to keep running.
        http = httpx.Client(base_url=plan["api"], headers=bearer, timeout=timeout)
        path = f"/endpoints/{ids[k % len(ids)]}/analyze"
        return lambda n: str(http.post(path, json={"backend": "rules"}).status_code)

    def test(k: int) -> Callable[[int], str]:
        http = httpx.Client(headers=bearer, timeout=timeout)
        return lambda n: mcp_call(
            http, plan["mcp"], "test_endpoint", {"endpoint_id": ids[(k + n) % len(ids)]}
        )

    def admin(k: int) -> Callable[[int], str]:
        http = httpx.Client(base_url=plan["site"], timeout=timeout)
        http.get(plan["login"])
        signed = http.post(
            plan["login"],
            data={
                "username": plan["user"],
                "password": PASSWORD,
                "csrfmiddlewaretoken": http.cookies["csrftoken"],
                "next": "/admin/",
            },
        )
        if "sessionid" not in http.cookies:
            raise SystemExit(f"A's staff user could not sign in: {signed.status_code}")
        token = http.cookies["csrftoken"]
        return lambda n: str(
            http.post(
                plan["preview"], data={**plan["form"], "csrfmiddlewaretoken": token}
            ).status_code
        )

    each("REST preview count=100", plan["previews"], preview)
    each("admin live preview", plan["admin_previews"], admin)
    each("MCP test_endpoint", plan["tests"], test)
    each("REST analyze", plan["analyses"], analysis)
    for loop in (loop for group in loops.values() for loop in group):
        loop.start()
    for loop in (loop for group in loops.values() for loop in group):
        loop.join(timeout=max(0.0, plan["stop"] - time.time()) + 1)  # calls still out: left
    return {
        name: {
            "clients": len(group),
            **latency([s for loop in group for s in loop.samples], plan["start"], plan["stop"]),
        }
        for name, group in loops.items()
    }


# --- one engine -----------------------------------------------------------------------


def lateness(tenant: Any, start: float, end: float) -> dict[str, Any]:
    """Start lateness of ``tenant``'s slots scheduled in [start, end) (epoch seconds)."""
    from django.db.models import Count

    from endpoints.models import Run

    since, until = (datetime.fromtimestamp(t, UTC) for t in (start, end))
    slots = Run.objects.filter(
        endpoint__job__tenant=tenant, scheduled_for__gte=since, scheduled_for__lt=until
    )
    late = [
        (started - scheduled).total_seconds() * 1000
        for started, scheduled in slots.values_list("started_at", "scheduled_for")
    ]
    statuses = slots.values_list("status").annotate(n=Count("pk")).order_by()
    return {
        "slots": len(late),
        "p50_ms": round(percentile(late, 0.50), 1) if late else None,
        "p99_ms": round(percentile(late, 0.99), 1) if late else None,
        "max_ms": round(max(late), 1) if late else None,
        "statuses": dict(statuses),
    }


def wake_lateness(probe: Path, start: float, end: float) -> dict[str, Any]:
    """The wake probe's lateness (``_wake_probe.py``) in [start, end) (epoch seconds)."""
    late = []
    lines = probe.read_text().splitlines() if probe.exists() else []  # its log says why
    for line in lines:
        planned, ms = (float(value) for value in line.split())
        if start <= planned < end:
            late.append(ms)
    return {
        "wakes": len(late),
        "p50_ms": round(percentile(late, 0.50), 1) if late else None,
        "p99_ms": round(percentile(late, 0.99), 1) if late else None,
        "max_ms": round(max(late), 1) if late else None,
    }


def started_runs(tenant: Any, start: float, end: float) -> dict[str, Any]:
    from django.db.models import Count

    from endpoints.models import Run

    since, until = (datetime.fromtimestamp(t, UTC) for t in (start, end))
    runs = Run.objects.filter(
        endpoint__job__tenant=tenant, started_at__gte=since, started_at__lt=until
    )
    return dict(runs.values_list("trigger").annotate(n=Count("pk")).order_by())


def serve_web(procs: Processes, workers: int) -> tuple[str, str]:
    """gunicorn (REST API, admin) and ``manage.py mcp --http``; their base URLs."""
    web, mcp = free_port(), free_port()
    gunicorn = [sys.executable, "-m", "gunicorn", "-c", "cronicorn_site/gunicorn.conf.py"]
    procs.start(
        "noisy-web",
        [*gunicorn, "-w", str(workers), "-b", f"127.0.0.1:{web}", "cronicorn_site.wsgi"],
    )
    procs.start("noisy-mcp", [sys.executable, "manage.py", "mcp", "--http", "--port", str(mcp)])
    for name, port in (("noisy-web", web), ("noisy-mcp", mcp)):
        if not wait_until(lambda port=port: _up(f"http://127.0.0.1:{port}/healthz"), timeout=60):
            raise RuntimeError(f"{name} did not start:\n{procs.log(name)[-3000:]}")
    return f"http://127.0.0.1:{web}", f"http://127.0.0.1:{mcp}/mcp"


def _up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def start_world(args: dict[str, Any], procs: Processes) -> dict[str, Any]:
    """The two targets, the tenants, the web and MCP servers."""
    from endpoints.cpus import cpu_list

    fast_port, slow_port = free_port(), free_port()
    procs.start("noisy-fast", [sys.executable, "bench/fast_server.py", str(fast_port)])
    slow = [sys.executable, "bench/slow_server.py", str(slow_port), str(args["slow_seconds"])]
    procs.start("noisy-slow", slow)
    for name in ("noisy-fast", "noisy-slow"):
        if not wait_until(lambda name=name: "ready" in procs.log(name), timeout=20):
            raise RuntimeError(f"{name} did not start")
        if args["web_cpus"]:  # the targets, B's clients (this process) stand for elsewhere
            os.sched_setaffinity(procs.children[name].pid, cpu_list(args["web_cpus"], "-"))
    if args["web_cpus"]:
        os.sched_setaffinity(0, cpu_list(args["web_cpus"], "--web-cpus"))
    world = make_tenants(args["b_endpoints"], f"http://127.0.0.1:{fast_port}/ping")
    world["site"], world["mcp"] = serve_web(procs, args["web_workers"])
    world["api"], world["slow_url"] = f"{world['site']}/api/v1", f"http://127.0.0.1:{slow_port}/"
    return world


def b_clients(world: dict[str, Any], args: dict[str, Any], start: float, stop: float) -> Any:
    """B's REST and MCP clients, started, from ``start`` to ``stop``."""
    headers = {"Authorization": f"Bearer {world['keys']['B']}"}
    rest = httpx.Client(base_url=world["api"], headers=headers, timeout=60)
    mcp = httpx.Client(headers=headers, timeout=60)
    calls: dict[str, Callable[[int], str]] = {
        "REST GET /jobs": lambda _n: str(rest.get("/jobs").status_code),
        "MCP list_jobs": lambda _n: mcp_call(mcp, world["mcp"], "list_jobs", {}),
    }
    loops = {
        name: Loop(call, start=start, stop=stop, every=args["b_every"], most=args["max_requests"])
        for name, call in calls.items()
    }
    for loop in loops.values():
        loop.start()
    return loops


def hostile_plan(
    world: dict[str, Any], args: dict[str, Any], window: tuple[float, float], policy: Any
) -> dict[str, Any]:
    """What A's clients do, for the ``hostile`` process."""
    from django.urls import reverse

    first = world["a_ids"][0]
    return {
        "start": window[0],
        "stop": window[1],
        "key": world["keys"]["A"],
        "endpoint_ids": world["a_ids"],
        **{name: world[name] for name in ("api", "mcp", "site", "user")},
        "login": reverse("admin:login"),
        "preview": reverse("admin:endpoints_endpoint_preview", args=[first]),
        "form": admin_form(world["a_job"], first, world["slow_url"], policy),
        "timeout": args["slow_seconds"] * 4 + 60,
        **{k: args[k] for k in ("max_requests", "previews", "admin_previews", "tests", "analyses")},
    }


def scenario(args: dict[str, Any]) -> dict[str, Any]:
    """One engine: set up, the idle window, the hostile window, the figures."""
    began = time.time()
    broker = args["broker"] or BROKER_URL
    url = pg_url(f"cc_bench_noisy_{args['engine']}{args['database_suffix']}")
    env = bench_env(
        url,
        DEBUG="false",
        DJANGO_SECRET_KEY="bench-only-" + "x" * 40,
        DJANGO_SECURE_COOKIES="false",  # the admin over plain http on 127.0.0.1
        CELERY_BROKER_URL=broker,
        CRONICORN_API_CACHE_URL=broker,  # one rate count per key across the web processes
        CRONICORN_MAX_IN_FLIGHT=str(args["in_flight"]),
        CRONICORN_WEB_NICE=str(args["web_nice"]),
        CRONICORN_SCHEDULER_CPUS=args["scheduler_cpus"],
        CRONICORN_WEB_CPUS=args["web_cpus"],
    )
    fresh_database(url)
    setup_django(url, **env)
    import redis

    redis.Redis.from_url(broker).flushdb()  # rate counts of an earlier run's keys
    from django.conf import settings

    from endpoints.cpus import cpu_list

    result: dict[str, Any] = {"engine": args["engine"], "load_before": load()}
    with Processes(env) as procs:
        world = start_world(args, procs)
        a_count = min(args["a_endpoints"], world["a"].max_endpoints)
        marks = {"servers up": time.time()}
        # A's free minute starts the hostile window: after the engine's start (Celery's
        # takes longer), A's endpoints made during B's warm-up, and the idle window.
        making = max(args["warmup"], 0.25 * a_count / args["web_workers"] + 2)
        ready = time.time() + (25 if args["engine"] == "celery" else 5) + making + args["idle"]
        hostile = (math.ceil(ready / 60) * 60, math.ceil(ready / 60) * 60 + args["hostile"])
        policy = largest_policy(datetime.fromtimestamp(hostile[0], UTC))
        result["policy_sizes"] = policy_sizes(policy)
        window = hostile[1] + 30 - time.time()
        params = Params(args["engine"], "postgres", warmup=0, window=window)
        params.in_flight = args["in_flight"]
        (start_celery if args["engine"] == "celery" else start_runscheduler)(params, procs)
        marks["engine up"] = time.time()
        b_start = make_b_due(world["b"]).timestamp()
        made = time.monotonic()
        world["a_job"], world["a_ids"] = make_a_endpoints(
            world["api"], world["keys"]["A"], world["a"], world["slow_url"], a_count, policy,
            min(args["web_workers"], settings.CRONICORN_API_CALLS_PER_KEY),  # the key's bound
        )  # fmt: skip
        result["a_endpoints"] = {"count": a_count, "made_in_s": round(time.monotonic() - made, 1)}
        idle = (max(b_start + args["warmup"], time.time() + 1), hostile[0])
        marks |= {"idle": idle[0], "hostile": hostile[0], "end": hostile[1]}
        if idle[1] - idle[0] < 5:
            raise RuntimeError("the set-up took longer than planned: no idle window is left")
        b_loops = b_clients(world, args, idle[0], hostile[1])
        out = LOGS / "noisy-hostile.json"
        out.unlink(missing_ok=True)
        plan = hostile_plan(world, args, hostile, policy)
        a_clients = procs.start(
            "noisy-hostile", [sys.executable, __file__, "hostile", json.dumps(plan), str(out)]
        )
        windows = {"idle": idle, "hostile": hostile}
        # The machine's own share: a sleeper on the scheduler's cores, and their steal.
        woken = LOGS / "noisy-wake-probe.txt"
        probe = [sys.executable, str(ROOT / "bench" / "_wake_probe.py"), str(woken)]
        probe += ["--cpus", args["scheduler_cpus"], "--seconds", f"{hostile[1] - time.time():.0f}"]
        procs.start("noisy-wake-probe", probe)
        scheduler_cpus = cpu_list(args["scheduler_cpus"], "-") if args["scheduler_cpus"] else None
        cpu, by_part, steal = {}, {}, {}
        # Where the CPU goes (its cores per part): this bench's PostgreSQL backends by their
        # database's name (first: the name holds the engine's), the rest by command line.
        parts = [("postgres", f" {url.rsplit('/', 1)[1]} "),
                 ("A's clients", "noisy_neighbour.py hostile"), ("targets", "fast_server.py"),
                 ("targets", "slow_server.py"), ("B's clients", "noisy_neighbour.py"),
                 ("engine", "runscheduler"), ("engine", "celery"), ("web", "gunicorn"),
                 ("web", "manage.py mcp"), ("redis", "redis-server")]  # fmt: skip
        if args["web_cpus"]:  # PostgreSQL and Redis too stand on machines of their own
            threading.Thread(
                target=keep_others_to, args=(args, parts, hostile[1]), daemon=True
            ).start()
        for name, (start, end) in windows.items():
            time.sleep(max(0.0, start - time.time()))
            before, processes, stole = machine_busy(), cpu_by_process(parts), stolen(scheduler_cpus)
            time.sleep(max(0.0, end - time.time()))
            cpu[name] = cores_busy(before, machine_busy())
            steal[name] = steal_percent(stole, stolen(scheduler_cpus))
            by_part[name] = cores_by_part(processes, cpu_by_process(parts), end - start)
            result[f"load_{name}"] = load()
        for loop in b_loops.values():
            loop.join(timeout=120)
        a_clients.wait(timeout=plan["timeout"] + 60)
        time.sleep(3)  # runs of the window's last slots start
        result["windows"] = {
            name: {
                "seconds": round(end - start, 1),
                "b_lateness": lateness(world["b"], start, end),
                "b_requests": {n: latency(loop.samples, start, end) for n, loop in b_loops.items()},
                "a_runs_started": started_runs(world["a"], start, end),
                "cores_busy": cpu[name],
                "cores_by_part": by_part[name],
                "wake_probe": wake_lateness(woken, start, end),
                "scheduler_steal_percent": steal[name],
            }
            for name, (start, end) in windows.items()
        }
        result["a_clients"] = json.loads(out.read_text())
        result["b_endpoints"] = args["b_endpoints"]
        result["timeline_s"] = {name: round(at - began, 1) for name, at in marks.items()}
        result["load_after"] = load()
        result["alive"] = {name: child.poll() is None for name, child in procs.children.items()}
    return result


# --- the report -----------------------------------------------------------------------


def keep_others_to(args: dict[str, Any], parts: list[tuple[str, str]], until: float) -> None:
    """This database's PostgreSQL backends (each as it comes: a web process's connection
    is opened again after CONN_MAX_AGE) and the broker's Redis server on the web's cores
    until ``until``, as machines of their own would be; Redis on every core again after."""
    import redis

    from endpoints.cpus import cpu_list

    cpus = cpu_list(args["web_cpus"], "--web-cpus")
    broker = int(redis.Redis.from_url(args["broker"] or BROKER_URL).info("server")["process_id"])
    while time.time() < until:
        pids = [pid for pid, (part, _) in cpu_by_process(parts).items() if part == "postgres"]
        move_to([*pids, broker], cpus)
        time.sleep(0.5)
    move_to([broker], range(os.cpu_count() or 1))


def ratio(hostile: float | None, idle: float | None) -> str:
    if hostile is None or not idle:
        return "-"
    return f"{hostile / idle:.1f}x" if hostile >= idle / 10 else f"{hostile / idle:.2f}x"


def report(result: dict[str, Any]) -> None:
    label, windows, rows = f"{result['engine']}-pg", result["windows"], []
    for name in ("idle", "hostile"):
        w = windows[name]
        late = w["b_lateness"]
        rest, mcp = w["b_requests"]["REST GET /jobs"], w["b_requests"]["MCP list_jobs"]
        rows.append([
            f"{label} A {name}", f"{late['slots']}/{round(result['b_endpoints'] * w['seconds'])}",
            late["p50_ms"], late["p99_ms"], late["max_ms"], rest["p50_ms"], rest["p99_ms"],
            mcp["p50_ms"], mcp["p99_ms"], w["wake_probe"]["p99_ms"],
            sum(w["a_runs_started"].values()), w["cores_busy"], w["scheduler_steal_percent"],
        ])  # fmt: skip
    idle, hostile = rows
    ratios = [ratio(h, i) for h, i in zip(hostile[2:10], idle[2:10], strict=True)]
    rows.append([f"{label} hostile/idle", "", *ratios, "", "", ""])
    print_table([
        "B beside A", "B slots", "late p50 ms", "late p99 ms", "late max ms", "/jobs p50 ms",
        "/jobs p99 ms", "MCP p50 ms", "MCP p99 ms", "wake p99 ms", "A runs", "cores busy",
        "steal %",
    ], rows)  # fmt: skip
    print("  wake p99: a sleeper on the scheduler's cores woken every 50 ms (_wake_probe.py),")
    print("  the machine's own lateness there; steal %: the hypervisor's share of those cores")
    print_table(
        ["A's clients", "clients", "requests", "p50 ms", "p99 ms", "outcomes"],
        [
            [name, a["clients"], a["requests"], a["p50_ms"], a["p99_ms"], a["outcomes"]]
            for name, a in result["a_clients"].items()
        ],
    )
    for name in ("idle", "hostile"):
        w = windows[name]
        outcomes = {n: r["outcomes"] for n, r in w["b_requests"].items()}
        print(f"  {name}: B's outcomes {outcomes}; B's run statuses {w['b_lateness']['statuses']}")
        print(f"  {name}: cores by part {w['cores_by_part']} ('other': not this bench's)")
    print(f"  A's policy: {result['policy_sizes']}; A's endpoints {result['a_endpoints']}")


def summary(results: list[dict[str, Any]]) -> None:
    """B's p99 start lateness round by round, and the median of the rounds' ratios: one
    p99 of a few hundred slots moves by 2x between runs of the same code on this machine
    (its hypervisor's steal, the kernel's work), so a goal is judged on the median; the
    wake probe's beside it, the same windows' lateness of the machine itself."""
    rows = []
    for engine in dict.fromkeys(result["engine"] for result in results):
        mine = [r["windows"] for r in results if r["engine"] == engine]
        for what, key in (("B's late p99 ms", "b_lateness"), ("wake p99 ms", "wake_probe")):
            p99s = [(w["idle"][key]["p99_ms"], w["hostile"][key]["p99_ms"]) for w in mine]
            ratios = [h / i for i, h in p99s if i and h is not None]
            rows.append([
                f"{engine}-pg {what}", " ".join(f"{i}→{h}" for i, h in p99s),
                " ".join(ratio(h, i) for i, h in p99s),
                f"{statistics.median(ratios):.1f}x" if ratios else "-",
            ])  # fmt: skip
    print_table(["p99 by round", "idle → hostile", "ratios", "median"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="runscheduler", help="runscheduler,celery")
    parser.add_argument("--b-endpoints", type=int, default=20, help="B's endpoints at 1 s")
    parser.add_argument("--a-endpoints", type=int, default=50, help="capped by A's quota")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--idle", type=float, default=15.0, help="s, A idle (up to +60 s)")
    parser.add_argument("--hostile", type=float, default=30.0, help="s, A hostile")
    parser.add_argument("--slow-seconds", type=float, default=5.0, help="the slow target's wait")
    parser.add_argument("--previews", type=int, default=2, help="A's REST preview clients")
    parser.add_argument("--admin-previews", type=int, default=1, help="A's admin preview clients")
    parser.add_argument("--tests", type=int, default=2, help="A's MCP test_endpoint clients")
    parser.add_argument("--analyses", type=int, default=2, help="A's concurrent analyses")
    parser.add_argument("--b-every", type=float, default=0.2, help="s, B's request schedule")
    parser.add_argument("--web-workers", type=int, default=6, help="gunicorn sync workers")
    parser.add_argument("--in-flight", type=int, default=200, help="CRONICORN_MAX_IN_FLIGHT")
    parser.add_argument("--web-nice", type=int, default=10, help="CRONICORN_WEB_NICE (0: none)")
    parser.add_argument("--scheduler-cpus", default="", help="CRONICORN_SCHEDULER_CPUS, e.g. 0")
    parser.add_argument("--web-cpus", default="", help="CRONICORN_WEB_CPUS, e.g. 1")
    parser.add_argument("--max-requests", type=int, default=20_000, help="per client loop")
    parser.add_argument("--broker", default="", help="Redis URL (default: db 8), flushed")
    parser.add_argument("--database-suffix", default="", help="cc_bench_noisy_<engine><suffix>")
    parser.add_argument("--rounds", type=int, default=1, help="scenarios per engine (median)")
    args = parser.parse_args()
    engines = [name for name in args.only.split(",") if name]
    if not set(engines) <= set(ENGINES):
        raise SystemExit(f"--only takes {', '.join(ENGINES)}; got {args.only!r}.")
    if not (1 <= args.b_endpoints <= 1000 and 1 <= args.a_endpoints <= 10_000):
        raise SystemExit("Keep --b-endpoints within 1..1000 and --a-endpoints within 1..10000.")
    if not (5 <= args.idle <= 300 and 5 <= args.hostile <= 300 and 0 <= args.warmup <= 60):
        raise SystemExit("Keep --idle and --hostile within 5..300 s and --warmup within 0..60 s.")
    if not (0.05 <= args.b_every <= 10 and 0.1 <= args.slow_seconds <= 60):
        raise SystemExit("Keep --b-every within 0.05..10 s and --slow-seconds within 0.1..60 s.")
    if not 1 <= args.rounds <= 9:
        raise SystemExit("Keep --rounds within 1..9.")

    results = []
    for engine, round_ in ((e, r) for e in engines for r in range(1, args.rounds + 1)):
        print(f"{engine} round {round_}/{args.rounds}: B {args.b_endpoints} endpoints at 1 s, "
              f"A hostile (load {load()})")  # fmt: skip
        child = {**vars(args), "engine": engine}
        budget = 240 + 0.5 * args.a_endpoints + args.warmup + args.idle + 60 + args.hostile
        budget += 4 * args.slow_seconds
        done = subprocess.run(
            [sys.executable, __file__, "scenario", json.dumps(child)],
            cwd=ROOT, capture_output=True, text=True, timeout=budget,
        )  # fmt: skip
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            raise SystemExit(f"{engine} failed:\n{done.stderr[-3000:]}")
        results.append(json.loads(lines[-1]))
    print()
    for result in results:
        report(result)
    if args.rounds > 1:
        summary(results)
    write_results("noisy_neighbour", {"args": vars(args), "results": results})


if __name__ == "__main__":
    role = sys.argv[1] if len(sys.argv) > 1 else ""
    if role == "scenario":
        print(json.dumps(scenario(json.loads(sys.argv[2])), default=str))
    elif role == "hostile":
        # A's clients stand for machines elsewhere: they yield the CPU to the system under
        # test (its web workers, the engine) rather than compete with it as equals, and
        # keep off the scheduler's cores when it has its own.
        os.nice(10)
        if web_cpus := os.environ.get("CRONICORN_WEB_CPUS"):
            sys.path.insert(0, str(ROOT))
            from endpoints.cpus import cpu_list

            os.sched_setaffinity(0, cpu_list(web_cpus, "--web-cpus"))
        Path(sys.argv[3]).write_text(json.dumps(hostile(json.loads(sys.argv[2]))))
    else:
        main()
