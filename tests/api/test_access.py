"""Who may call what, over a real HTTP server: tenants are isolated on every route, a
read-only key cannot write, an expired or revoked key and no key at all get 401."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from api.models import ApiKey
from api.operations import Operation
from tests.world import (
    ApiWorld,
    TenantWorld,
    names_objects,
    operations,
    sample_body,
    sample_query,
    sample_url,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def anonymous(live_server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server.url, timeout=30) as client:
        yield client


def call(
    anonymous: httpx.Client, op: Operation, side: TenantWorld, key: str | None
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return anonymous.request(
        op.method.upper(),
        sample_url(op, side),
        params=sample_query(op, side),
        json=sample_body(op, side),
        headers=headers,
    )


def test_a_key_of_tenant_a_gets_404_for_every_object_of_tenant_b_on_every_route(
    api_world: ApiWorld, anonymous: httpx.Client
) -> None:
    checked = []
    for op in operations():
        if not names_objects(op):
            continue
        response = call(anonymous, op, api_world.b, api_world.write_key)
        assert response.status_code == 404, (op.name, response.text)
        assert response.headers["Content-Type"] == "application/problem+json"
        checked.append(op.name)
    assert len(checked) >= 25


def test_lists_and_counts_show_only_the_keys_tenant(
    api_world: ApiWorld, anonymous: httpx.Client
) -> None:
    for op in operations(write=False):
        if names_objects(op):
            continue
        response = call(anonymous, op, api_world.a, api_world.write_key)
        assert response.status_code == 200, (op.name, response.text)
        assert "beta" not in response.text.lower(), op.name
    jobs = anonymous.get("/api/v1/jobs", headers={"Authorization": f"Bearer {api_world.read_key}"})
    assert [job["name"] for job in jobs.json()["items"]] == ["ops-alpha"]


def test_a_key_of_tenant_a_reaches_every_object_of_its_own_tenant(
    api_world: ApiWorld, anonymous: httpx.Client
) -> None:
    for op in operations(write=False):
        response = call(anonymous, op, api_world.a, api_world.read_key)
        assert response.status_code == 200, (op.name, response.text)


def test_a_read_only_key_gets_403_on_every_write_and_nothing_changes(
    api_world: ApiWorld, anonymous: httpx.Client
) -> None:
    endpoint = api_world.a.endpoint
    for op in operations(write=True):
        response = call(anonymous, op, api_world.a, api_world.read_key)
        assert response.status_code == 403, (op.name, response.text)
        assert "read-only" in response.json()["detail"]
    endpoint.refresh_from_db()
    assert endpoint.paused_until is None and endpoint.archived_at is None


@pytest.mark.parametrize("which", ["expired_key", "revoked_key", "no key", "a made-up key"])
def test_expired_revoked_missing_or_unknown_keys_get_401_on_every_route(
    api_world: ApiWorld, anonymous: httpx.Client, which: str
) -> None:
    key = {"no key": None, "a made-up key": "cc_00000000_nonsense"}.get(which)
    key = key if which in ("no key", "a made-up key") else getattr(api_world, which)
    for op in operations():
        response = call(anonymous, op, api_world.a, key)
        assert response.status_code == 401, (which, op.name, response.text)
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert "create_api_key" in response.json()["detail"]


def test_a_key_records_its_last_use_and_is_stored_only_as_a_hash(
    api_world: ApiWorld, anonymous: httpx.Client
) -> None:
    anonymous.get("/api/v1/jobs", headers={"Authorization": f"Bearer {api_world.write_key}"})
    key = ApiKey.objects.get(prefix=api_world.write_key.split("_")[1])
    assert key.last_used_at is not None
    assert api_world.write_key not in str(list(ApiKey.objects.values()))


def test_an_admin_session_may_use_the_api_but_writes_need_the_csrf_token(
    api_world: ApiWorld, live_server: Any
) -> None:
    client = api_world.world.client_for(api_world.world.alice)
    session = client.cookies["sessionid"].value
    cookies = {"sessionid": session, "csrftoken": "x" * 32}
    with httpx.Client(base_url=live_server.url, cookies=cookies) as browser:
        listed = browser.get("/api/v1/endpoints")
        assert listed.status_code == 200
        assert [e["name"] for e in listed.json()["items"]] == ["alpha-orders"]
        url = f"/api/v1/endpoints/{api_world.a.endpoint.pk}/reset-failures"
        assert browser.post(url).status_code in (401, 403)
        with_token = browser.post(url, headers={"X-CSRFToken": "x" * 32})
        assert with_token.status_code == 200, with_token.text


def test_keys_never_reach_the_logs(
    api_world: ApiWorld, anonymous: httpx.Client, caplog: pytest.LogCaptureFixture, settings: Any
) -> None:
    settings.DEBUG = True  # where ninja's own bearer class would log a rejected header
    caplog.set_level("DEBUG")
    for key in (api_world.write_key, api_world.revoked_key, api_world.read_key):
        for scheme in ("Bearer", "Token"):
            headers = {"Authorization": f"{scheme} {key}"}
            anonymous.get("/api/v1/jobs", headers=headers)
            anonymous.post(f"/api/v1/endpoints/{api_world.a.endpoint.pk}/run", headers=headers)
    secrets = [key.split("_")[-1] for key in (api_world.write_key, api_world.revoked_key)]
    assert caplog.records
    assert not any(secret in caplog.text for secret in secrets)
