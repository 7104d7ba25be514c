"""What one run costs PostgreSQL: statements, rows written, HOT updates, index entries.

Makes ``--n`` due endpoints (against the fast local server), claims them all and runs
them through a ``ClaimDispatcher`` as a worker does, then renews ``--n`` leases once;
counts, per run:

- statements sent, by stage (claim, start, finish + reschedule, renew), counted in this
  process at the driver (every ``execute`` of a psycopg cursor, every parameter row of an
  ``executemany``: the ORM's and the engine's plain SQL alike);
- with ``pg_stat_statements`` loaded (``shared_preload_libraries``), the server's time,
  blocks and WAL of each statement, per run;
- rows inserted and updated per table, and how many updates were HOT (no new index
  entries), from ``pg_stat_user_tables``;
- index entries written, from those and each index's predicate (an insert or a non-HOT
  update adds an entry to every index whose predicate the new row satisfies);
- the CPU of the PostgreSQL server processes of this database.

To measure the code before a change, copy this file into that checkout's ``bench/`` and
run it there, alternating with this one, on the same machine, in one session:

    .venv/bin/python bench/run_statements.py [--n 2000] [--what-if "ALTER TABLE …"]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# Which index entries a new row version of endpoints_run adds (scheduled runs, no retry).
STAGES = ("claim", "start", "finish+reschedule", "renew")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--database", default="cc_bench_statements")
    parser.add_argument(
        "--what-if", default="", help="SQL run after the migrations (e.g. drop a constraint)"
    )
    args = parser.parse_args()
    if not 100 <= args.n <= 20_000:
        raise SystemExit("Keep --n within 100..20000.")
    code = HERE.parent
    sys.path.insert(0, str(HERE))
    from _common import bench_env, load, pg_url
    from _cpu import cpu_seconds
    from _scenario import Params, Processes, free_port, make_endpoints, wait_until

    url = pg_url(args.database)
    _fresh(url, code, bench_env)
    if args.what_if:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(args.what_if)
    os.environ.update(bench_env(url, CRONICORN_LEASE_SECONDS="600"))
    sys.path.insert(0, str(code))
    import django

    django.setup()
    import psycopg
    from django.db import connection
    from django.utils import timezone

    from endpoints.engine.claiming import claim_due_endpoints
    from endpoints.engine.dispatch import ClaimDispatcher
    from endpoints.engine.leases import renew_leases
    from endpoints.models import Slot

    counts: Counter[str] = Counter()
    stage = {"now": "setup"}
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def counted_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        counts[stage["now"]] += 1
        return execute(self, query, params, **kw)

    def counted_executemany(self: Any, query: Any, params_seq: Any, **kw: Any) -> Any:
        params_seq = list(params_seq)
        counts[stage["now"]] += len(params_seq)
        return executemany(self, query, params_seq, **kw)

    with Processes(bench_env(url)) as procs:
        port = free_port()
        procs.start("server", [sys.executable, str(HERE / "fast_server.py"), str(port)])
        if not wait_until(lambda: "ready" in procs.log("server"), timeout=20):
            raise RuntimeError("the fast server did not start")
        make_endpoints(
            Params(mode="stmt", database="postgres", n=args.n), f"http://127.0.0.1:{port}/ping"
        )
        psycopg.Cursor.execute, psycopg.Cursor.executemany = counted_execute, counted_executemany  # type: ignore[method-assign]
        try:
            # Passes 1 and 2 warm up (a freshly loaded table has full pages, so its first
            # updates cannot be HOT); pass 3, nearer the steady state, is the one reported.
            for _pass in range(3):
                stage["now"] = "setup"
                Slot.objects.update(next_run_at=timezone.now() - timedelta(seconds=1))
                counts.clear()
                statements_kept = _reset_statements(url)
                before_tables = _table_stats()
                backends_before = _backend_cpu(cpu_seconds)
                stage["now"] = "claim"
                claims = claim_due_endpoints(now=timezone.now(), limit=args.n, horizon_ms=0)
                assert len(claims) == args.n, len(claims)
                python_before = time.process_time()
                dispatcher = ClaimDispatcher(max_in_flight=200)
                stage["now"] = "start, finish, reschedule"
                futures = [dispatcher.submit(claim) for claim in claims]
                for future in futures:
                    future.result()
                # The dispatcher's connections close at its shutdown: their CPU is read first.
                backend_cpu = _backend_cpu(cpu_seconds) - backends_before
                python_cpu = time.process_time() - python_before
                dispatcher.shutdown(timeout=10)
                stage["now"] = "setup"
                connection.close()
                time.sleep(1.2)  # the server's statistics are flushed at most once a second
                after_tables = _table_stats()
            # The renewal of n held claims, as the renewer makes it (counted apart).
            Slot.objects.update(next_run_at=timezone.now() - timedelta(seconds=1))
            again = claim_due_endpoints(now=timezone.now(), limit=args.n, horizon_ms=0)
            before_renew = _table_stats()
            stage["now"] = "renew"
            renew_leases(again, [], now=timezone.now())
            stage["now"] = "setup"
            connection.close()
            time.sleep(1.2)
            after_renew = _table_stats()
        finally:
            psycopg.Cursor.execute, psycopg.Cursor.executemany = execute, executemany  # type: ignore[method-assign]
    n = args.n
    rows = {
        table: {
            k: after_tables[table][k] - before_tables.get(table, {}).get(k, 0)
            for k in after_tables[table]
        }
        for table in after_tables
    }
    import endpoints

    print(f"code {Path(endpoints.__file__).parent.parent} ({_commit(code)}), n={n}, load {load()}")
    counts.pop("setup", None)
    print("statements per run:", {k: round(v / n, 3) for k, v in counts.items()})
    renew_slot = after_renew["endpoints_slot"]
    renewed = {
        k: round((v - before_renew["endpoints_slot"][k]) / n, 3) for k, v in renew_slot.items()
    }
    print(f"  renewal of a lease: endpoints_slot per lease {renewed}")
    for table, r in sorted(rows.items()):
        if any(r.values()):
            per = {k: round(v / n, 3) for k, v in r.items()}
            print(f"  {table}: per run {per}")
    print(f"index entries per run (from the predicates): {_index_entries(rows, n)}")
    print(
        f"this process's CPU per run (dispatcher, requests included): {1000 * python_cpu / n:.3f}"
        " ms"
    )
    print(
        f"PostgreSQL CPU per run (claim, start, finish, reschedule): {1000 * backend_cpu / n:.3f}"
        " ms"
    )
    if statements_kept:
        _print_statements(url, n)
    else:
        print("(pg_stat_statements is not loaded: shared_preload_libraries, then a restart)")


def _reset_statements(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT pg_stat_statements_reset()")
    except psycopg.Error:
        return False
    return True


def _print_statements(url: str, n: int) -> None:
    """The reported pass's statements by server time, per run (pg_stat_statements)."""
    import psycopg
    from _common import print_table

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT query, calls, total_exec_time, shared_blks_hit + shared_blks_read, "
            "wal_records, wal_bytes FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() "
            "AND query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC LIMIT 10"
        ).fetchall()
    total = sum(row[2] for row in rows)
    print(f"server time per run, top statements: {1000 * total / n:.1f} µs")
    print_table(
        ["statement", "calls/run", "µs/run", "blocks/run", "WAL records/run", "WAL bytes/run"],
        [
            [
                " ".join(query.split())[:90],
                round(calls / n, 3),
                round(1000 * ms / n, 1),
                round(blocks / n, 1),
                round(wal / n, 2),
                round(int(wal_bytes) / n),
            ]
            for query, calls, ms, blocks, wal, wal_bytes in rows
        ],
    )


def _fresh(url: str, code: Path, bench_env: Any) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=code, env=bench_env(url), check=True
    )


def _table_stats() -> dict[str, dict[str, int]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        # A partitioned endpoints_run (issue 23) keeps its counts in its partitions.
        cursor.execute(
            "SELECT CASE WHEN relname LIKE 'endpoints\\_run\\_%%' THEN 'endpoints_run'"
            " ELSE relname END AS name, sum(n_tup_ins)::bigint, sum(n_tup_upd)::bigint,"
            " sum(n_tup_hot_upd)::bigint, sum(n_tup_del)::bigint FROM pg_stat_user_tables"
            " WHERE relname IN ('endpoints_run', 'endpoints_slot', 'endpoints_endpoint')"
            " OR relname LIKE 'endpoints\\_run\\_%%' GROUP BY name"
        )
        return {
            name: {"inserted": i, "updated": u, "hot": h, "deleted": d}
            for name, i, u, h, d in cursor.fetchall()
        }


def _backend_cpu(cpu_seconds: Any) -> float:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        return sum(cpu_seconds(pid) for (pid,) in cursor.fetchall())


def _index_entries(rows: dict[str, dict[str, int]], n: int) -> dict[str, float]:
    """Entries = (inserts + non-HOT updates) x the indexes that take the row. Counted from
    the catalogue: every index of the table; partial ones by what a finished scheduled run
    satisfies (the in-flight index takes inserts only, the retry index none)."""
    from django.db import connection

    out: dict[str, float] = {}
    with connection.cursor() as cursor:
        for table, r in rows.items():
            cursor.execute(
                "SELECT indexrelid::regclass::text, indpred IS NOT NULL, "
                "pg_get_expr(indpred, indrelid) FROM pg_index WHERE indrelid = %s::regclass",
                [table],
            )
            entries = 0
            for _name, partial, predicate in cursor.fetchall():
                inserts, updates = r["inserted"], r["updated"] - r["hot"]
                if not partial:
                    entries += inserts + updates
                elif "retry_of" in predicate or "'manual'" in predicate:
                    continue  # no retries, no manual runs here
                elif "running" in predicate:
                    entries += inserts  # a run is inserted running, finished otherwise
                elif "scheduled" in predicate:
                    entries += inserts + updates
                elif "claim_token IS NULL" in predicate or "claim_token IS NOT NULL" in predicate:
                    entries += (inserts + updates) / 2  # a slot is in one of each pair
                elif "archived_at IS NULL" in predicate:
                    entries += inserts + updates  # every live endpoint
                else:
                    entries += 0  # endpoint partials: failing, paused (none here)
            out[table] = round(entries / n, 2)
    return out


def _commit(code: Path) -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=code, capture_output=True, text=True
    )
    return done.stdout.strip()


if __name__ == "__main__":
    main()
