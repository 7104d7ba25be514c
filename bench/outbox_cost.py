"""The cost of the alerts' outbox on the hot path (issue 24): the engine's reschedule
statement (``reschedule_all``) for 1 000 claimed endpoints, 100 per call as the
dispatcher's writer batches them, each batch in one transaction.

Two kinds of runs: ``no streak ends`` (a success after a success, or a failure: every run
but a recovery; the outbox's INSERT selects nothing) and ``recoveries`` (a success after
3 failures: each writes one ``endpoints.Flip`` row). Both with the statement as shipped
and ``without`` the outbox: the same statement with the outbox's INSERT replaced by an
unreferenced SELECT of the same parameters (PostgreSQL skips it: the statement as it was
before, parameters bound alike), interleaved rep by rep so a busy machine costs both alike.

    .venv/bin/python bench/outbox_cost.py [--n 1000] [--reps 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta
from typing import Any

from _common import fresh_database, load, pg_url, print_table, setup_django
from _common import write_results as save

BATCH = 100


def populate(n: int) -> list[int]:
    from endpoints.models import Endpoint, Job, Tenant

    tenant = Tenant.objects.create(name="bench", max_endpoints=n + 10)
    job = Job.objects.create(tenant=tenant, name="outbox")
    return [
        Endpoint.objects.create(
            job=job, name=f"e{i}", url="http://127.0.0.1:9/", baseline_interval_ms=60_000
        ).pk
        for i in range(n)
    ]


def engine() -> tuple[Any, Any]:
    from endpoints.engine import claiming, sql

    return claiming, sql


WITHOUT_OUTBOX = """flip AS (
    SELECT %s::integer, %s::timestamptz, %s::integer
)"""


def one_rep(ids: list[int], failures_before: int, *, outbox: bool) -> float:
    """Claim every endpoint, then time their reschedules (a success each): ms per run."""
    from django.db import transaction
    from django.utils import timezone

    from endpoints.models import Endpoint, Slot

    claim_module, sql = engine()
    now = timezone.now()
    Endpoint.objects.filter(pk__in=ids).update(failure_count=failures_before)
    Slot.objects.filter(pk__in=ids).update(
        next_run_at=now - timedelta(seconds=1), claim_token=None, locked_until=None
    )
    claims = claim_module.claim_due_endpoints(now=now, limit=len(ids), horizon_ms=0)
    loaded = sql.load_endpoints([c.endpoint_id for c in claims])
    values = {
        "last_run_at": now,
        "next_run_at": now + timedelta(minutes=1),
        "next_run_source": "baseline-interval",
        "failure_count": 0,
        "ai_hint_interval_ms": None,
        "ai_hint_next_run_at": None,
        "ai_hint_expires_at": None,
        "ai_hint_reason": "",
    }
    work = [(loaded[c.endpoint_id], c.claim_token, values) for c in claims]
    shipped = sql._PG_RESCHEDULE
    if not outbox:
        head, _flip, tail = shipped.partition("flip AS (")
        sql._PG_RESCHEDULE = head + WITHOUT_OUTBOX + tail.split("\n)", 1)[1]
    try:
        started = time.perf_counter()
        for k in range(0, len(work), BATCH):
            with transaction.atomic():
                won = sql.reschedule_all(work[k : k + BATCH])
            assert all(won)
        return (time.perf_counter() - started) * 1000 / len(work)
    finally:
        sql._PG_RESCHEDULE = shipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    url = pg_url("cc_bench_outbox")
    fresh_database(url)
    setup_django(url)
    ids = populate(args.n)
    if "flip AS (" not in engine()[1]._PG_RESCHEDULE:
        raise SystemExit("This checkout's reschedule has no outbox to compare.")
    kinds = {"no streak ends": 0, "recoveries": 3}
    results: dict[str, list[float]] = {}
    for _ in range(args.reps):  # interleaved, so a busy moment costs each alike
        for kind, failures in kinds.items():
            for outbox in (False, True):
                name = f"{kind}, {'with' if outbox else 'without'} the outbox"
                results.setdefault(name, []).append(one_rep(ids, failures, outbox=outbox))
    rows = [
        [name, round(statistics.median(ms), 4), round(min(ms), 4), round(max(ms), 4)]
        for name, ms in results.items()
    ]
    print_table(["runs", "median ms/run", "min", "max"], rows)
    print(f"load {load()}")
    save("outbox_cost", {"args": vars(args), "ms_per_run": results})


if __name__ == "__main__":
    main()
