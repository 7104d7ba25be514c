"""An admin session has the admin's rights through the API, no more: what the admin
refuses a staff member (deleting, rotating the signing secret) the API refuses the same
session, and a new secret is shown only to whom the admin would show it."""

from __future__ import annotations

from typing import Any

from django.test import Client
from django.urls import reverse

from api.auth import SUPERUSER_ONLY_OPERATIONS
from endpoints.models import Endpoint, Job, Tenant
from notifications.models import Channel
from tests.world import ApiWorld


def admin_and_api(world: ApiWorld) -> dict[str, tuple[str, str, str]]:
    """Per superuser-only operation: (admin URL the member is refused, API method, URL)."""
    a = world.a
    return {
        "delete_endpoint": (
            reverse("admin:endpoints_endpoint_delete", args=[a.endpoint.pk]),
            "delete",
            f"/api/v1/endpoints/{a.endpoint.pk}",
        ),
        "delete_job": (
            reverse("admin:endpoints_job_delete", args=[a.job.pk]),
            "delete",
            f"/api/v1/jobs/{a.job.pk}",
        ),
        "delete_channel": (
            reverse("admin:notifications_channel_delete", args=[a.channel.pk]),
            "delete",
            f"/api/v1/channels/{a.channel.pk}",
        ),
        "rotate_signing_secret": (
            reverse("admin:endpoints_tenant_changelist"),
            "post",
            f"/api/v1/tenants/{a.tenant.pk}/signing-secret",
        ),
    }


def test_every_superuser_only_operation_is_refused_to_a_members_session_as_in_the_admin(
    api_world: ApiWorld,
) -> None:
    client: Client = api_world.world.client_for(api_world.world.alice)
    secret_before = Tenant.objects.get(pk=api_world.a.tenant.pk).hmac_secret
    cases = admin_and_api(api_world)
    assert set(cases) == SUPERUSER_ONLY_OPERATIONS
    for name, (admin_url, method, api_url) in cases.items():
        assert client.get(admin_url).status_code == 403, name  # the admin refuses...
        response = getattr(client, method)(api_url)
        assert response.status_code == 403, (name, response.content)  # ...so does the API
        assert response["Content-Type"] == "application/problem+json"
        assert "superuser" in response.json()["detail"]
    assert Endpoint.objects.filter(pk=api_world.a.endpoint.pk).exists()
    assert Job.objects.filter(pk=api_world.a.job.pk).exists()
    assert Channel.objects.filter(pk=api_world.a.channel.pk).exists()
    assert Tenant.objects.get(pk=api_world.a.tenant.pk).hmac_secret == secret_before


def test_a_members_session_keeps_the_members_rights(api_world: ApiWorld) -> None:
    client = api_world.world.client_for(api_world.world.alice)
    endpoint = api_world.a.endpoint
    paused = client.post(
        f"/api/v1/endpoints/{endpoint.pk}/pause",
        {"for_ms": 60_000},
        content_type="application/json",
    )
    assert paused.status_code == 200, paused.content
    assert client.get(f"/api/v1/tenants/{api_world.a.tenant.pk}").status_code == 200


def test_a_superusers_session_may_rotate_and_sees_the_new_secret_once(
    api_world: ApiWorld,
) -> None:
    client = api_world.world.client_for(api_world.world.root)
    response = client.post(f"/api/v1/tenants/{api_world.a.tenant.pk}/signing-secret")
    assert response.status_code == 200, response.content
    secret = response.json()["secret"]
    assert Tenant.objects.get(pk=api_world.a.tenant.pk).hmac_secret == secret
    again = client.get(f"/api/v1/tenants/{api_world.a.tenant.pk}")
    assert secret not in again.content.decode()


def test_a_tenant_key_keeps_its_rights(api_world: ApiWorld, client: Any) -> None:
    # Keys are the tenant's own credential (created by a superuser): unchanged.
    headers = {"Authorization": f"Bearer {api_world.write_key}"}
    response = client.delete(f"/api/v1/channels/{api_world.a.channel.pk}", headers=headers)
    assert response.status_code == 200, response.content
