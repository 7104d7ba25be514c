"""The cost of one claim (``claiming.claim_due_endpoints``) in PostgreSQL.

Fills a dedicated database (``cc_bench``, dropped and re-created) with INSERT ... SELECT
generate_series, so that 1 000 of 10 000 and then of 1 000 000 endpoints are due, and
times the claim of those 1 000 over several repetitions (the claimed rows are released
between repetitions). Further scenarios on the 1 000 000 table:

- ``+40k in flight``: 40 000 claimed rows whose ``next_run_at`` has passed (runs still in
  flight), which DESIGN.md warns about;
- ``+limited jobs``: the same, with 10 of the 100 jobs under ``max_concurrent``;
- ``contrast``: the same table with an index that keeps claimed rows (what the partial
  index ``endpoints_slot_claimable`` avoids), to show what the design saves;
- ``--what-if``: the claim's UPDATE statement alone (EXPLAIN ANALYZE, rolled back) with
  and without the two indexes of leased rows, to price the index entries every claimed
  row gets (see bench/README.md).

Baselines in the same run: a plain ``SELECT ... ORDER BY next_run_at LIMIT 1000`` by the
same index; a bare ``UPDATE`` of the same 1 000 rows by id, setting the same two
columns (the floor: what writing those rows costs at all); and the claim among 10 000.

    .venv/bin/python bench/claim_cost.py [--sizes 10000,1000000] [--reps 15] [--what-if]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from _common import fresh_database, load, pg_url, print_table, setup_django, summary_ms
from _common import write_results as save

JOBS = 100
LIMITED_JOBS = 10
HORIZON_MS = 1000
TARGET_MS = 20.0

# Every n-th endpoint is due; the job expression spreads due ones over all jobs. Ids
# restart at 1, so the slot of endpoint g has endpoint_id g.
POPULATE = """
INSERT INTO endpoints_endpoint (
    name, description, url, method, headers, secret_header_names, timeout_ms,
    max_response_size_kb, baseline_cron, timezone, baseline_interval_ms, ai_hint_reason,
    pause_reason, failure_count, analyzed_failure_count, created_at, updated_at, job_id)
SELECT 'endpoint-' || g, '', 'http://127.0.0.1:9/', 'GET', '{}', '[]', 30000, 100, '',
       'UTC', 60000, '', '', 0, 0, now(), now(),
       %(first_job)s + (g / %(every)s + g) %% %(jobs)s
FROM generate_series(1, %(size)s) AS g
"""
POPULATE_SLOTS = """
INSERT INTO endpoints_slot (endpoint_id, job_id, next_run_at, next_run_source)
SELECT id, job_id,
       CASE WHEN id %% %(every)s = 0
            THEN %(t0)s - INTERVAL '10 seconds' + (id %% 1000) * INTERVAL '1 millisecond'
            ELSE %(t0)s + INTERVAL '1 hour' + (id %% 86400) * INTERVAL '1 second' END,
       'baseline-interval'
FROM endpoints_endpoint
"""

# Runs in flight: leased, and due long ago, so an index that kept them would read them
# before any truly due row.
IN_FLIGHT = """
UPDATE endpoints_slot
SET claim_token = gen_random_uuid(), locked_until = %(t0)s + INTERVAL '2 hours',
    next_run_at = %(t0)s - INTERVAL '60 seconds' + (endpoint_id %% 1000) * INTERVAL '1 millisecond'
WHERE endpoint_id %% %(every)s = 1
"""

# What-if: the claim's UPDATE without the two indexes of leased rows (the lease release's
# and the per-job slot count's), to price the index entries each claimed row gets. Not a
# design option: without them the release of expired leases scans the whole table.
LEASED_INDEXES = ("endpoints_slot_leased", "endpoints_slot_job_leased")

# The floor of a claim: the same rows, the same columns set, found by primary key.
BARE_UPDATE = """
UPDATE endpoints_slot
SET claim_token = gen_random_uuid(), locked_until = now() + INTERVAL '1 minute'
WHERE endpoint_id = ANY(%(ids)s)
"""
RELEASE = """
UPDATE endpoints_slot SET claim_token = NULL, locked_until = NULL
WHERE endpoint_id = ANY(%(ids)s)
"""

BASELINE_SELECT = """
SELECT c.endpoint_id FROM endpoints_slot AS c JOIN endpoints_job AS j ON j.id = c.job_id
WHERE c.claim_token IS NULL AND c.next_run_at <= %(due_by)s AND j.status = 'active'
ORDER BY c.next_run_at LIMIT %(limit)s
"""


def execute(sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def populate(size: int, due: int, t0: datetime) -> float:
    """Empty the tables, then insert ``size`` endpoints of which ``due`` are due at ``t0``."""
    started = time.perf_counter()
    execute(
        "TRUNCATE endpoints_tenant, endpoints_job, endpoints_endpoint, endpoints_slot "
        "RESTART IDENTITY CASCADE"
    )
    (tenant,) = execute(
        "INSERT INTO endpoints_tenant (name, max_endpoints, min_interval_ms, "
        "monthly_token_budget, hmac_secret, created_at) "
        "VALUES ('bench', 2000000, 1000, 0, '', now()) RETURNING id"
    )[0]
    jobs = execute(
        "INSERT INTO endpoints_job (name, description, status, created_at, updated_at, "
        "tenant_id) SELECT 'job-' || g, '', 'active', now(), now(), %(tenant)s "
        "FROM generate_series(1, %(jobs)s) AS g RETURNING id",
        {"tenant": tenant, "jobs": JOBS},
    )
    first_job = min(row[0] for row in jobs)
    params = {"every": size // due, "t0": t0, "first_job": first_job, "jobs": JOBS, "size": size}
    execute(POPULATE, params)
    execute(POPULATE_SLOTS, params)
    vacuum()
    return time.perf_counter() - started


def vacuum(*tables: str) -> None:
    """VACUUM ANALYZE, then a CHECKPOINT: the write-ahead log of a large fill would
    otherwise start one in the middle of the timed claims."""
    for table in tables or ("endpoints_endpoint", "endpoints_slot", "endpoints_job"):
        execute(f"VACUUM ANALYZE {table}")
    execute("CHECKPOINT")


def time_claims(reps: int, due: int) -> tuple[list[float], list[int]]:
    """Claim ``reps`` times (after two unrecorded warm-ups), releasing the claims each time."""
    from django.utils import timezone

    from endpoints.engine.claiming import claim_due_endpoints

    samples, counts = [], []
    for rep in range(reps + 2):
        now = timezone.now()
        started = time.perf_counter()
        claims = claim_due_endpoints(now=now, limit=due, horizon_ms=HORIZON_MS)
        elapsed = time.perf_counter() - started
        execute(RELEASE, {"ids": [claim.endpoint_id for claim in claims]})
        if rep >= 2:
            samples.append(elapsed)
            counts.append(len(claims))
    return samples, counts


def time_bare_update(reps: int, due: int) -> list[float]:
    """The rows a claim would take, updated by id (after two unrecorded warm-ups)."""
    from django.utils import timezone

    now = timezone.now()
    params = {"now": now, "due_by": now + timedelta(milliseconds=HORIZON_MS), "limit": due}
    ids = [row[0] for row in execute(BASELINE_SELECT, params)]
    samples = []
    for rep in range(reps + 2):
        started = time.perf_counter()
        execute(BARE_UPDATE, {"ids": ids})
        elapsed = time.perf_counter() - started
        execute(RELEASE, {"ids": ids})
        if rep >= 2:
            samples.append(elapsed)
    return samples


def time_select(reps: int, due: int) -> list[float]:
    from django.utils import timezone

    samples = []
    for rep in range(reps + 2):
        now = timezone.now()
        params = {"now": now, "due_by": now + timedelta(milliseconds=HORIZON_MS), "limit": due}
        started = time.perf_counter()
        execute(BASELINE_SELECT, params)
        if rep >= 2:
            samples.append(time.perf_counter() - started)
    return samples


def explain_claim(due: int, *, drop: tuple[str, ...] = ()) -> str:
    """EXPLAIN ANALYZE of the claim's main statement, rolled back (with the indexes in
    ``drop`` dropped inside the same transaction, so they come back)."""
    from django.conf import settings
    from django.db import transaction
    from django.utils import timezone

    from endpoints.engine import claiming

    now = timezone.now()
    params = {
        "now": now,
        "due_by": now + timedelta(milliseconds=HORIZON_MS),
        "lease": settings.CRONICORN_LEASE_SECONDS,
        "limit": due,
    }
    with transaction.atomic():
        for name in drop:
            execute(f"DROP INDEX {name}")
        explain = "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + claiming._PG_CLAIM_UNLIMITED
        rows = execute(explain, params)
        transaction.set_rollback(True)
    return "\n".join(row[0] for row in rows)


def statement_ms(plan: str) -> float:
    return float(plan.rsplit("Execution Time:", 1)[1].split()[0])


def scenario(
    label: str, size: int, reps: int, due: int, prepare: Callable[[], None] | None = None
) -> dict[str, Any]:
    if prepare is not None:
        prepare()
    claim_samples, counts = time_claims(reps, due)
    select_samples = time_select(reps, due)
    bare_samples = time_bare_update(reps, due)
    row = {
        "scenario": label,
        "endpoints": size,
        "due": due,
        "claimed_per_rep": sorted(set(counts)),
        "claim": summary_ms(claim_samples),
        "plain_select": summary_ms(select_samples),
        "bare_update": summary_ms(bare_samples),
        "load": load(),
    }
    print(
        f"  {label}: claim median {row['claim']['median_ms']} ms, "
        f"select {row['plain_select']['median_ms']} ms, "
        f"bare update {row['bare_update']['median_ms']} ms (load {row['load']})"
    )
    return row


def limit_some_jobs() -> None:
    execute(
        "UPDATE endpoints_job SET max_concurrent = 1000 WHERE id IN "
        "(SELECT id FROM endpoints_job ORDER BY id LIMIT %(n)s)",
        {"n": LIMITED_JOBS},
    )
    vacuum()


def unlimit_jobs() -> None:
    execute("UPDATE endpoints_job SET max_concurrent = NULL")
    vacuum()


def index_keeping_claimed_rows() -> None:
    """Swap the partial claim index for one that keeps leased rows (the bad design)."""
    execute("CREATE INDEX bench_keeps_claimed ON endpoints_slot (next_run_at)")
    execute("DROP INDEX endpoints_slot_claimable")
    vacuum()


def restore_claim_index() -> None:
    execute(
        "CREATE INDEX endpoints_slot_claimable ON endpoints_slot (next_run_at) "
        "WHERE claim_token IS NULL"
    )
    execute("DROP INDEX bench_keeps_claimed")


def run(sizes: list[int], due: int, in_flight: int, reps: int, what_if: bool) -> dict[str, Any]:
    from django.utils import timezone

    rows: list[dict[str, Any]] = []
    plans: dict[str, str] = {}
    for size in sizes:
        seconds = populate(size, due, timezone.now())
        print(f"populated {size} endpoints ({due} due) in {seconds:.1f} s")
        rows.append(scenario(f"{size} endpoints", size, reps, due))
    largest = max(sizes)
    if in_flight and in_flight < largest:
        t0 = timezone.now()
        execute(IN_FLIGHT, {"t0": t0, "every": largest // in_flight})
        vacuum()
        label = f"{largest} +{in_flight // 1000}k in flight"
        rows.append(scenario(label, largest, reps, due))
        plans[label] = explain_claim(due)
        rows.append(scenario(f"{label} +limited jobs", largest, reps, due, limit_some_jobs))
        unlimit_jobs()
        contrast = f"contrast: {label}, index keeps claimed rows"
        rows.append(scenario(contrast, largest, max(3, reps // 3), due, index_keeping_claimed_rows))
        plans[contrast] = explain_claim(due)
        restore_claim_index()
        if what_if:
            priced = what_if_no_leased_indexes(label, reps, due)
            return {"rows": rows, "plans": plans, "what_if": priced}
    return {"rows": rows, "plans": plans}


def what_if_no_leased_indexes(label: str, reps: int, due: int) -> dict[str, Any]:
    """The UPDATE statement alone (EXPLAIN ANALYZE, rolled back): as is and without the
    leased-row indexes, alternating."""
    as_is, without = [], []
    for _ in range(reps):
        as_is.append(statement_ms(explain_claim(due)))
        without.append(statement_ms(explain_claim(due, drop=LEASED_INDEXES)))
    row = {
        "scenario": f"what-if, the UPDATE alone: {label}",
        "as_is_ms": round(statistics.median(as_is), 2),
        "without_leased_indexes_ms": round(statistics.median(without), 2),
        "load": load(),
    }
    print(
        f"  the claim's UPDATE alone, median of {reps}: {row['as_is_ms']} ms; without the two "
        f"leased-row indexes: {row['without_leased_indexes_ms']} ms"
    )
    return row


def report(result: dict[str, Any]) -> None:
    rows = result["rows"]
    base = rows[0]["claim"]["median_ms"]
    table = []
    for row in rows:
        claim, select, bare = row["claim"], row["plain_select"], row["bare_update"]
        table.append(
            [
                row["scenario"],
                ",".join(map(str, row["claimed_per_rep"])),
                claim["median_ms"],
                claim["p95_ms"],
                select["median_ms"],
                round(claim["median_ms"] / select["median_ms"], 2),
                bare["median_ms"],
                round(claim["median_ms"] / bare["median_ms"], 2),
                round(claim["median_ms"] / base, 2),
                row["load"],
            ]
        )
    print()
    print_table(
        [
            "scenario",
            "claimed",
            "claim med ms",
            "claim p95 ms",
            "select med ms",
            "x select",
            "bare update med ms",
            "x bare update",
            "x first row",
            "load 1/5/15",
        ],
        table,
    )
    print(f"\ntarget: 1 000 due among 1 000 000 claimed in under {TARGET_MS} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="cc_bench")
    parser.add_argument("--sizes", default="10000,1000000")
    parser.add_argument("--due", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=40_000)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--what-if", action="store_true", help="also price the leased-row indexes")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if any(size < args.due for size in sizes) or not 1 <= args.reps <= 200:
        raise SystemExit("Every size must be at least --due, and --reps must be 1..200.")

    url = pg_url(args.database)
    print(f"load before: {load()}")
    fresh_database(url)
    setup_django(url)
    result = run(sizes, args.due, args.in_flight, args.reps, args.what_if)
    report(result)
    save("claim_cost", {"load_after": load(), "args": vars(args), **result})


if __name__ == "__main__":
    main()
