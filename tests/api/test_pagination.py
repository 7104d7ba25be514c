"""Cursor pagination over a million runs: every page costs the same few queries (no
COUNT, no OFFSET), wherever it starts, and the pages tile the history exactly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from api.pagination import _encode
from endpoints.models import Endpoint, Job, Run, Tenant
from tests.world import make_key

RUNS = 1_000_000
# Two runs share each started_at, so the id must break ties between pages.
INSERT_RUNS = """
INSERT INTO endpoints_run (endpoint_id, trigger, source, scheduled_for, started_at,
    finished_at, duration_ms, status, status_code, request_method, request_url,
    response_truncated, error, attempt)
SELECT %(endpoint)s, 'scheduled', 'baseline-interval',
    now() - (g / 2) * interval '1 second' - interval '1 millisecond' * g,
    now() - (g / 2) * interval '1 second',
    now() - (g / 2) * interval '1 second' + interval '120 milliseconds', 120,
    CASE WHEN g %% 10 = 0 THEN 'failure' ELSE 'success' END,
    CASE WHEN g %% 10 = 0 THEN 503 ELSE 200 END, 'GET', 'https://e.com/', false, '', 1
FROM generate_series(1, %(count)s) AS g
"""


@pytest.fixture(scope="module")
def history(django_db_setup: None, django_db_blocker: Any) -> Iterator[Endpoint]:
    """Inserted once for the module (a million rows take a while), deleted after it."""
    with django_db_blocker.unblock():
        tenant = Tenant.objects.create(name="Paged")
        job = Job.objects.create(tenant=tenant, name="ops")
        endpoint = Endpoint(job=job, name="busy", url="https://e.com/", baseline_interval_ms=60_000)
        endpoint.save()
        with connection.cursor() as cursor:
            cursor.execute(INSERT_RUNS, {"endpoint": endpoint.pk, "count": RUNS})
            cursor.execute("ANALYZE endpoints_run")
        yield endpoint
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM endpoints_run WHERE endpoint_id = %s", [endpoint.pk])
        tenant.delete()


@pytest.fixture
def client(db: None, history: Endpoint) -> Client:
    key = make_key(history.job.tenant)
    client = Client(headers={"Authorization": f"Bearer {key}"})
    client.get("/api/v1/jobs")  # records the key's first use, a write of its own
    return client


def fetch(client: Client, url: str, **params: Any) -> tuple[dict[str, Any], list[str]]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, params)
    assert response.status_code == 200, response.content
    return response.json(), [query["sql"] for query in queries.captured_queries]


def rows_read(sql: str) -> int:
    """Rows the plan of ``sql`` read from tables (EXPLAIN ANALYZE of its last run)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        plan = cursor.fetchone()[0][0]["Plan"]

    def scanned(node: dict[str, Any]) -> int:
        own = node["Actual Rows"] * node["Actual Loops"] if "Scan" in node["Node Type"] else 0
        own += node.get("Rows Removed by Filter", 0)
        return own + sum(scanned(child) for child in node.get("Plans", []))

    return scanned(plan)


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["endpoint", "job"])
def test_every_page_of_a_million_runs_costs_the_same_few_queries_and_rows_read(
    client: Client, history: Endpoint, scope: str
) -> None:
    url = (
        f"/api/v1/endpoints/{history.pk}/runs"
        if scope == "endpoint"
        else f"/api/v1/jobs/{history.job_id}/runs"
    )
    middle = Run.objects.filter(endpoint=history).order_by("started_at", "id")[RUNS // 2]
    starts = [None, None, None, _encode(middle.started_at, middle.pk)]
    counts, seen, cursor = [], [], None
    for start in starts:
        cursor = start or cursor
        page, sql = fetch(client, url, limit=100, **({"cursor": cursor} if cursor else {}))
        counts.append(len(sql))
        assert not any("COUNT(" in q.upper() or "OFFSET" in q.upper() for q in sql), sql
        seen.extend(run["id"] for run in page["items"])
        cursor = page["next_cursor"]
        if start is not None:
            assert len(page["items"]) == 100 and page["next_cursor"] is not None
    assert len(set(counts)) == 1 and counts[0] <= 4, counts
    assert len(seen) == len(set(seen)) == 400
    # The middle page reads about a page of rows, not the half million before its cursor.
    assert rows_read(sql[-1]) < 1_000


@pytest.mark.slow
def test_following_the_cursor_tiles_the_history_in_order_with_filters(
    client: Client, history: Endpoint
) -> None:
    url = f"/api/v1/endpoints/{history.pk}/runs"
    newest = list(Run.objects.filter(endpoint=history).order_by("-started_at", "-id")[:1000])
    ids, cursor = [], None
    while len(ids) < 1000:
        page, _ = fetch(client, url, limit=250, **({"cursor": cursor} if cursor else {}))
        ids.extend(run["id"] for run in page["items"])
        cursor = page["next_cursor"]
    assert ids == [run.pk for run in newest]
    since = newest[199].started_at.isoformat()
    failed, _ = fetch(client, url, status="failure", since=since, limit=500)
    expected = [
        r.pk for r in newest if r.status == "failure" and r.started_at >= newest[199].started_at
    ]
    assert [run["id"] for run in failed["items"]] == expected and failed["next_cursor"] is None
