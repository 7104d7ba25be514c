"""The admin lists stay cheap at scale: 10 000 endpoints and 1 000 000 runs.

The rows are written once for the module with PostgreSQL's generate_series (seconds,
not minutes) and removed afterwards. Each page must render with a bounded number of
queries: no query per row, no COUNT(*) over the runs table.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test import Client
from django.urls import reverse

from console.admin.filters import BoundedCountPaginator
from endpoints.models import Endpoint

ENDPOINTS = 10_000
RUNS = 1_000_000
MAX_QUERIES = 12  # measured: 9 for either list, 12 for the endpoint page

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="bulk rows come from generate_series"
    ),
]


def _fill(cursor: Any) -> dict[str, int]:
    cursor.execute(
        "INSERT INTO endpoints_tenant (name, max_endpoints, min_interval_ms, "
        "monthly_token_budget, hmac_secret, created_at) "
        "VALUES ('Scale', 20000, 1000, 0, '', now()) RETURNING id"
    )
    tenant_id = cursor.fetchone()[0]
    cursor.execute(
        "INSERT INTO endpoints_job (tenant_id, name, description, status, created_at, "
        "updated_at) SELECT %s, 'job-' || g, '', 'active', now(), now() "
        "FROM generate_series(1, 20) g",
        [tenant_id],
    )
    cursor.execute(
        """
        INSERT INTO endpoints_endpoint (job_id, name, description, url, method, headers,
            secret_header_names, timeout_ms, max_response_size_kb, baseline_cron, timezone,
            baseline_interval_ms, ai_hint_reason, pause_reason,
            failure_count, analyzed_failure_count, created_at, updated_at)
        SELECT j.id, 'endpoint-' || g, '', 'https://example.com/' || g, 'GET', '{}', '[]',
            30000, 100, '', 'UTC', 60000 * (1 + mod(g, 10)), '', '',
            mod(g, 3), 0, now(), now()
        FROM generate_series(1, %s) g
        JOIN endpoints_job j ON j.tenant_id = %s AND j.name = 'job-' || (1 + mod(g, 20))
        """,
        [ENDPOINTS, tenant_id],
    )
    cursor.execute(
        """
        INSERT INTO endpoints_slot (endpoint_id, job_id, next_run_at, next_run_source)
        SELECT e.id, e.job_id, now() + (e.id - first.id) * interval '1 second',
            'baseline-interval'
        FROM endpoints_endpoint e, (SELECT min(id) AS id FROM endpoints_endpoint) first
        WHERE e.job_id IN (SELECT id FROM endpoints_job WHERE tenant_id = %s)
        """,
        [tenant_id],
    )
    cursor.execute(
        """
        INSERT INTO endpoints_run (endpoint_id, trigger, source, scheduled_for, started_at,
            finished_at, duration_ms, status, status_code, request_method, request_url,
            response_truncated, error, attempt)
        SELECT e.first + mod(g, %s), 'scheduled', 'baseline-interval',
            now() - g * interval '1 second' - interval '50 milliseconds',
            now() - g * interval '1 second', now() - g * interval '1 second',
            10 + mod(g, 900), (ARRAY['success', 'success', 'failure', 'timeout'])[1 + mod(g, 4)],
            200, 'GET', 'https://example.com/', false, '', 1
        FROM generate_series(1, %s) g,
            (SELECT min(id) AS first FROM endpoints_endpoint
             WHERE job_id IN (SELECT id FROM endpoints_job WHERE tenant_id = %s)) e
        """,
        [ENDPOINTS, RUNS, tenant_id],
    )
    cursor.execute(
        "ANALYZE endpoints_tenant, endpoints_job, endpoints_endpoint, endpoints_slot, endpoints_run"
    )
    return {"tenant": tenant_id}


@pytest.fixture(scope="module")
def scale(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    with django_db_blocker.unblock():
        started = time.monotonic()
        with connection.cursor() as cursor:
            ids = _fill(cursor)
        users = get_user_model().objects
        member = users.create_user("scale-member", is_staff=True)
        root = users.create_superuser("scale-root", "root@example.com", None)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO endpoints_tenant_members (tenant_id, user_id) VALUES (%s, %s)",
                [ids["tenant"], member.pk],
            )
        print(
            f"\nfilled {ENDPOINTS} endpoints and {RUNS} runs in {time.monotonic() - started:.1f}s"
        )
        yield {"member": member, "root": root}
        with connection.cursor() as cursor:
            cursor.execute(
                "TRUNCATE endpoints_run, endpoints_hinthistory, planner_analysissession, "
                "endpoints_slot, endpoints_endpoint, endpoints_job, endpoints_tenant_members, "
                "endpoints_tenant "
                "CASCADE"
            )
        users.filter(pk__in=[member.pk, root.pk]).delete()


def _get(client: Client, url: str, params: dict[str, str] | None = None) -> Any:
    started = time.monotonic()
    response = client.get(url, params or {})
    elapsed = time.monotonic() - started
    assert response.status_code == 200, response.content[:500]
    print(f"{url} {params or ''}: {elapsed * 1000:.0f} ms")
    return response


@pytest.fixture
def as_member(scale: dict[str, Any]) -> Client:
    client = Client()
    client.force_login(scale["member"])
    return client


@pytest.fixture
def as_root(scale: dict[str, Any]) -> Client:
    client = Client()
    client.force_login(scale["root"])
    return client


@pytest.mark.parametrize(
    "params",
    [{}, {"status": "failing"}, {"q": "endpoint-99"}, {"o": "4"}],
    ids=["all", "failing", "search", "by-next-run"],
)
def test_the_endpoint_list_of_10000_renders_with_bounded_queries(
    as_member: Client, django_assert_max_num_queries: Any, params: dict[str, str]
) -> None:
    with django_assert_max_num_queries(MAX_QUERIES):
        response = _get(as_member, reverse("admin:endpoints_endpoint_changelist"), params)

    assert len(response.context["cl"].result_list) > 0
    assert "cc-badge" in response.content.decode()


@pytest.mark.parametrize(
    "params",
    [{}, {"status__exact": "failure"}, {"started": "1h"}, {"trigger__exact": "scheduled"}],
    ids=["all", "failed", "last-hour", "scheduled"],
)
@pytest.mark.parametrize("who", ["member", "root"])
def test_the_run_list_of_a_million_renders_with_bounded_queries_and_no_full_count(
    request: pytest.FixtureRequest,
    django_assert_max_num_queries: Any,
    params: dict[str, str],
    who: str,
) -> None:
    client: Client = request.getfixturevalue(f"as_{who}")

    with django_assert_max_num_queries(MAX_QUERIES) as queries:
        response = _get(client, reverse("admin:endpoints_run_changelist"), params)

    cl = response.context["cl"]
    assert len(cl.result_list) == cl.list_per_page
    assert cl.full_result_count is None
    assert cl.result_count <= BoundedCountPaginator.cap
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert all("LIMIT" in sql.upper() for sql in counts), counts


def test_a_capped_run_count_says_more_than(as_member: Client) -> None:
    text = _get(as_member, reverse("admin:endpoints_run_changelist")).content.decode()

    assert f"more than {BoundedCountPaginator.cap} runs" in text


def test_an_endpoint_page_with_100_runs_of_history_stays_bounded(
    as_member: Client, django_assert_max_num_queries: Any
) -> None:
    endpoint = Endpoint.objects.order_by("pk").first()
    assert endpoint is not None

    # The page also reads the adaptation chart's runs and hints, the tenant (its interval
    # floor) and the job's runs in flight (why it waits): a fixed number, not per run.
    # The endpoint's content type is read once per process (Django caches it): warmed, so
    # the count does not depend on whether an earlier test of this worker read it.
    ContentType.objects.get_for_model(Endpoint)
    with django_assert_max_num_queries(MAX_QUERIES + 5):
        _get(as_member, reverse("admin:endpoints_endpoint_change", args=[endpoint.pk]))
