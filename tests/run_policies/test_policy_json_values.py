"""A run policy's free JSON values (``body_json_equals``, ``body_contains``,
``body_json_path``) that PostgreSQL's jsonb cannot store: NaN, Infinity (or a float that
overflows to it), NUL, an unpaired surrogate, a YAML date. Every interface (REST, MCP,
the admin's form, the config file) refuses them with the same words, as the endpoint's
body is refused, and nothing is written: never a 500 or a DataError traceback."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.core.management import CommandError, call_command
from django.db import connections
from mcp import Client

from api.mcp_server import build_server
from console.admin.forms import EndpointAdminForm
from endpoints.models import Endpoint, Job, Tenant
from tests.world import endpoint_form, make_key

NOT_JSON = "holds NaN or Infinity, which JSON cannot carry"
BAD_TEXT = "holds text with NUL or invalid Unicode"
# (raw JSON of body_json_equals, the words of the refusal)
EQUALS: list[tuple[str, str]] = [
    ("NaN", NOT_JSON),
    ("Infinity", NOT_JSON),
    ("-Infinity", NOT_JSON),
    ("1e400", NOT_JSON),
    ('"ok\\u0000"', BAD_TEXT),
    ('"ok\\ud800"', BAD_TEXT),
]
GOOD = {"body_json_path": "status", "body_json_equals": "ok"}


def policy_text(equals: str) -> str:
    return '{"body_json_path": "status", "body_json_equals": %s}' % equals  # noqa: UP031


@pytest.fixture
def endpoint(job: Job) -> Endpoint:
    Job.objects.filter(pk=job.pk).update(run_policy=GOOD)
    return Endpoint.objects.create(
        job=job, name="health", url="https://e.com/", baseline_interval_ms=60_000, run_policy=GOOD
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("equals", "words"), EQUALS)
def test_the_api_refuses_a_policy_value_jsonb_cannot_store_and_keeps_the_old_one(
    http: httpx.Client, endpoint: Endpoint, equals: str, words: str
) -> None:
    body = '{"run_policy": %s}' % policy_text(equals)  # noqa: UP031
    json_type = {"Content-Type": "application/json"}
    for path in (f"/endpoints/{endpoint.pk}", f"/jobs/{endpoint.job_id}"):
        response = http.patch(path, content=body, headers=json_type)
        assert response.status_code == 422, response.text
        messages = response.json()["errors"]["run_policy"]
        assert any(f"body_json_equals: the value {words}" in m for m in messages), messages
    created = http.post(
        "/endpoints",
        content='{"job_id": %d, "name": "new", "url": "https://e.com/x", '  # noqa: UP031
        '"baseline_interval_ms": 60000, "run_policy": %s}' % (endpoint.job_id, policy_text(equals)),
        headers=json_type,
    )
    assert created.status_code == 422, created.text
    assert Endpoint.objects.get().run_policy == GOOD
    assert Job.objects.get().run_policy == GOOD
    assert http.get(f"/endpoints/{endpoint.pk}").status_code == 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("policy", "words"),
    [
        ({"body_json_path": "status", "body_json_equals": "ok\x00"}, BAD_TEXT),
        ({"body_json_path": "status", "body_json_equals": "ok\ud800"}, BAD_TEXT),
        ({"body_contains": "ok\ud800"}, "not valid Unicode"),
        ({"body_json_path": "status\ud800"}, "not valid Unicode"),
    ],
)
def test_the_mcp_tool_refuses_the_same_values_with_the_same_words(
    tenant: Tenant, endpoint: Endpoint, policy: dict[str, Any], words: str
) -> None:
    key = make_key(tenant)

    async def update() -> Any:
        async with Client(build_server(stdio_key=key)) as client:
            result = await client.call_tool(
                "update_endpoint", {"endpoint_id": endpoint.pk, "run_policy": policy}
            )
        await sync_to_async(connections.close_all)()
        return result

    result = asyncio.run(update())
    assert result.is_error
    text = result.content[0].text
    assert text.startswith("422 ") and words in text, text
    assert Endpoint.objects.get().run_policy == GOOD


@pytest.mark.parametrize(("equals", "words"), EQUALS)
def test_the_admin_form_refuses_the_same_values(job: Job, equals: str, words: str) -> None:
    form = EndpointAdminForm(data=endpoint_form(job, run_policy=policy_text(equals)))
    assert not form.is_valid()
    assert f"body_json_equals: the value {words}" in str(form.errors["run_policy"])


FILE = """version: 1
tenants:
- name: Acme
  jobs:
  - name: ops
    run_policy: {JOB}
    endpoints:
    - name: health
      url: https://e.com/
      baseline_interval: 5m
      run_policy: {ENDPOINT}
"""


@pytest.mark.parametrize(
    ("equals", "words"),
    [
        (".nan", NOT_JSON),
        ("-.inf", NOT_JSON),
        ('"ok\\0"', BAD_TEXT),
        ("2026-12-01", "holds a value of type date, which is not JSON"),
    ],
)
@pytest.mark.parametrize("where", ["JOB", "ENDPOINT"])
def test_a_config_file_with_such_a_value_is_refused_in_words_and_writes_nothing(
    db: None, tmp_path: Any, equals: str, words: str, where: str
) -> None:
    bad = "{body_json_path: status, body_json_equals: %s}" % equals  # noqa: UP031
    path = tmp_path / "config.yaml"
    path.write_text(
        FILE.replace("{" + where + "}", bad).replace("{JOB}", "{}").replace("{ENDPOINT}", "{}")
    )
    with pytest.raises(CommandError) as caught:
        call_command("import_endpoints", str(path), stdout=io.StringIO(), stderr=io.StringIO())
    assert "run_policy: body_json_equals: the value " + words in str(caught.value)
    assert not Tenant.objects.exists() and not Job.objects.exists()
