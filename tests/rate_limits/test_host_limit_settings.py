"""A tenant's host rate limits as a setting: validated in the one validation path with
errors in words, edited in the admin, carried by import and export, shown by the API (and
so by MCP's get_tenant, the same operation)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from endpoints.config_io.documents import ConfigError
from endpoints.config_io.exporting import export_config
from endpoints.config_io.importing import import_config
from endpoints.models import Tenant
from tests.world import World


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("limits", "words"),
    [
        ([20], "Expected a mapping of host to requests per second"),
        ({"https://api.partner.com": 20}, "is not a host name"),
        ({"API.partner.com": 20}, "write 'api.partner.com'"),
        ({"api.partner.com:8443": 20}, "no scheme, port or path"),
        ({"api.partner.com": 2.5}, "must be a whole number of requests per second"),
        ({"api.partner.com": True}, "must be a whole number"),
        ({"api.partner.com": -1}, "between 1 and 10000"),
        ({f"h{k}.example": 1 for k in range(101)}, "At most 100 hosts"),
    ],
)
def test_a_bad_host_rate_limit_is_refused_in_words(limits, words):
    tenant = Tenant(name="Acme", host_rate_limits=limits)
    with pytest.raises(ValidationError) as refused:
        tenant.full_clean()
    assert words in " ".join(refused.value.message_dict["host_rate_limits"])


@pytest.mark.django_db
def test_host_rate_limits_are_imported_and_exported():
    limits = {"api.partner.com": 20, "127.0.0.1": 0}
    document = f"version: 1\ntenants:\n  - name: Acme\n    host_rate_limits: {json.dumps(limits)}\n"
    import_config(document, fmt="yaml", environ={}, now=timezone.now())
    tenant = Tenant.objects.get(name="Acme")
    assert tenant.host_rate_limits == limits
    exported, _references = export_config()
    assert exported["tenants"][0]["host_rate_limits"] == limits

    bad = (
        'version: 1\ntenants:\n  - name: Acme\n    host_rate_limits: {"api.partner.com": "fast"}\n'
    )
    with pytest.raises(ConfigError, match="whole number of requests per second"):
        import_config(bad, fmt="yaml", environ={}, now=timezone.now())
    tenant.refresh_from_db()
    assert tenant.host_rate_limits == limits


def test_a_superuser_sets_host_rate_limits_in_the_tenants_admin(world: World) -> None:
    client = world.client_for(world.root)
    tenant = world.a.tenant
    url = reverse("admin:endpoints_tenant_change", args=[tenant.pk])
    form: dict[str, Any] = {
        "name": tenant.name,
        "members": [user.pk for user in tenant.members.all()],
        "max_endpoints": tenant.max_endpoints,
        "min_interval_ms": tenant.min_interval_ms,
        "monthly_token_budget": tenant.monthly_token_budget,
        "hmac_secret": "",
    }

    refused = client.post(url, {**form, "host_rate_limits": '{"API.partner.com": 20}'})
    assert refused.status_code == 200
    assert "write &#x27;api.partner.com&#x27;" in refused.content.decode()

    saved = client.post(url, {**form, "host_rate_limits": '{"api.partner.com": 20}'})
    assert saved.status_code == 302
    tenant.refresh_from_db()
    assert tenant.host_rate_limits == {"api.partner.com": 20}

    # The page carries the stored value as a hidden initial (a callable default's field).
    stored = {"initial-host_rate_limits": '{"api.partner.com": 20}'}
    cleared = client.post(url, {**form, **stored, "host_rate_limits": ""})
    assert cleared.status_code == 302
    tenant.refresh_from_db()
    assert tenant.host_rate_limits == {}


@pytest.mark.django_db(transaction=True)
def test_the_api_shows_the_tenants_host_rate_limits(http: httpx.Client, tenant: Tenant) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(host_rate_limits={"api.partner.com": 20})
    assert http.get(f"/tenants/{tenant.pk}").json()["host_rate_limits"] == {"api.partner.com": 20}
