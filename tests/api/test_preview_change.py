"""``POST /endpoints/{id}/preview``: the next runs a proposed change would give, through
the validation of update_endpoint, saving nothing; the MCP tool is the same operation."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import datetime

import pytest
from django.test import Client as DjangoClient
from mcp import Client

from api.mcp_server import build_server
from endpoints.audit import AuditEntry
from endpoints.models import Endpoint
from tests.world import make_key


def stored(endpoint: Endpoint) -> tuple[object, ...]:
    endpoint.refresh_from_db()
    return (endpoint.baseline_cron, endpoint.baseline_interval_ms, endpoint.next_run_at)


def test_a_proposed_cron_is_previewed_and_nothing_is_saved(make_endpoint, tenant) -> None:
    endpoint = make_endpoint(baseline_interval_ms=60_000)
    before = stored(endpoint)
    api = DjangoClient(headers={"Authorization": f"Bearer {make_key(tenant)}"})

    response = api.post(
        f"/api/v1/endpoints/{endpoint.pk}/preview?count=3",
        {"baseline_cron": "30 2 * * *", "baseline_interval_ms": None, "timezone": "Europe/Berlin"},
        content_type="application/json",
    )

    assert response.status_code == 200, response.content
    runs = response.json()["runs"]
    assert len(runs) == 3
    assert all(
        run["local"].startswith(run["local"][:10]) and "T02:30:00" in run["local"] for run in runs
    )
    assert {run["source"] for run in runs} == {"baseline-cron"}
    gaps = [
        (datetime.fromisoformat(b["utc"]) - datetime.fromisoformat(a["utc"])).total_seconds()
        for a, b in itertools.pairwise(runs)
    ]
    assert set(gaps) <= {86_400.0, 82_800.0, 90_000.0}  # a day (a DST change may shift it)
    assert stored(endpoint) == before
    assert not AuditEntry.objects.exists()


def test_an_invalid_proposal_is_a_422_in_words_and_a_read_key_may_preview(
    make_endpoint, tenant
) -> None:
    endpoint = make_endpoint()
    api = DjangoClient(headers={"Authorization": f"Bearer {make_key(tenant, scope='read')}"})

    bad = api.post(
        f"/api/v1/endpoints/{endpoint.pk}/preview",
        {"baseline_cron": "61 * * * *", "baseline_interval_ms": None},
        content_type="application/json",
    )

    assert bad.status_code == 422
    assert "baseline_cron" in bad.json()["errors"]
    assert bad.json()["errors"]["baseline_cron"][0]  # a sentence, not a code
    fine = api.post(
        f"/api/v1/endpoints/{endpoint.pk}/preview",
        {"baseline_interval_ms": 300_000},
        content_type="application/json",
    )
    assert fine.status_code == 200, fine.content


@pytest.mark.django_db(transaction=True)
def test_the_mcp_tool_previews_a_change_too(make_endpoint, tenant) -> None:
    endpoint = make_endpoint(baseline_interval_ms=60_000)
    key = make_key(tenant)
    before = stored(endpoint)

    async def preview() -> dict[str, object]:
        async with Client(build_server(stdio_key=key)) as client:
            result = await client.call_tool(
                "preview_change",
                {"endpoint_id": endpoint.pk, "baseline_interval_ms": 600_000, "count": 2},
            )
            assert not result.is_error, result
            return json.loads(result.content[0].text)  # type: ignore[union-attr]

    answer = asyncio.run(preview())
    assert len(answer["runs"]) == 2  # type: ignore[arg-type]
    assert stored(endpoint) == before
