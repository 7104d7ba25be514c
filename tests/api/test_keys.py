"""API keys: created in the admin and with manage.py create_api_key (shown once, stored
hashed), revoked in the admin, and then refused."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from api.models import ApiKey, hash_key
from endpoints.models import Tenant


def create_key(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_api_key", *args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue()


def test_the_command_prints_a_key_once_and_stores_only_its_hash(tenant: Tenant) -> None:
    raw, note = create_key("--tenant", "Acme", "--name", "CI")
    key = ApiKey.objects.get()
    assert raw.startswith(f"cc_{key.prefix}_") and len(raw) > 40
    assert key.key_hash == hash_key(raw) and raw not in str(ApiKey.objects.values().get())
    assert (key.name, key.scope, key.expires_at) == ("CI", "write", None)
    assert "never shown again" in note and raw not in note


def test_the_command_makes_read_only_keys_that_expire(tenant: Tenant) -> None:
    create_key("--tenant", "Acme", "--read-only", "--expires", "90d")
    key = ApiKey.objects.get()
    assert key.scope == "read"
    assert key.expires_at is not None
    assert abs(key.expires_at - (timezone.now() + timedelta(days=90))) < timedelta(minutes=1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant", "Nobody"], "No tenant named 'Nobody'"),
        (["--tenant", "Acme", "--expires", "soon"], "--expires 'soon'"),
    ],
)
def test_the_command_explains_bad_arguments(tenant: Tenant, args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        create_key(*args)
    assert not ApiKey.objects.exists()


@pytest.fixture
def admin_client(db: None) -> Client:
    root = get_user_model().objects.create_superuser("root", "root@example.com", None)
    client = Client()
    client.force_login(root)
    return client


def test_a_superuser_creates_a_key_in_the_admin_and_sees_it_once(
    admin_client: Client, tenant: Tenant
) -> None:
    response = admin_client.post(
        reverse("admin:api_apikey_add"),
        {"tenant": tenant.pk, "name": "deploys", "scope": "write"},
        follow=True,
    )
    assert response.status_code == 200
    key = ApiKey.objects.get()
    shown = [str(m) for m in response.context["messages"] if "The new key is" in str(m)]
    assert len(shown) == 1 and key.key_hash in {hash_key(word) for word in shown[0].split()}
    page = admin_client.get(reverse("admin:api_apikey_change", args=[key.pk]))
    assert f"cc_{key.prefix}_" in page.content.decode()
    assert not any(hash_key(w) == key.key_hash for w in page.content.decode().split())


def test_revoking_in_the_admin_stops_the_key_at_once(admin_client: Client, tenant: Tenant) -> None:
    raw, _ = create_key("--tenant", "Acme")
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    assert api.get("/api/v1/jobs").status_code == 200
    key = ApiKey.objects.get()
    admin_client.post(
        reverse("admin:api_apikey_changelist"),
        {"action": "revoke", "_selected_action": [key.pk]},
    )
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert api.get("/api/v1/jobs").status_code == 401


def test_staff_who_are_not_superusers_do_not_see_api_keys(tenant: Tenant) -> None:
    user = get_user_model().objects.create_user("alice", is_staff=True)
    tenant.members.add(user)
    client = Client()
    client.force_login(user)
    assert client.get(reverse("admin:api_apikey_changelist")).status_code == 403
