"""Rotating a tenant's request-signing secret: the new secret is shown once, and for the
grace period every request carries a signature with each secret, so a receiver holding
either one verifies it with the recipe in README.md; then only the new one signs."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from endpoints.engine.claiming import claim_due_endpoints
from endpoints.engine.maintenance import end_signing_grace
from endpoints.engine.running import execute_claim
from endpoints.models import Endpoint, Slot, Source, Tenant
from endpoints.operations import rotate_signing_secret, test_endpoint
from tests.e2e.readme import recipe
from tests.world import make_key

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]

OLD = "the-old-secret"


def verify() -> Any:
    """The README's recipe, run as written there."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    return recipe(readme, "verify.py", "verify")


@pytest.fixture
def signed(tenant: Tenant) -> Tenant:
    Tenant.objects.filter(pk=tenant.pk).update(hmac_secret=OLD)
    tenant.refresh_from_db()
    return tenant


def test_during_the_grace_period_a_request_verifies_with_either_secret(
    signed, make_endpoint, target
):
    endpoint = make_endpoint(url=target.url("/signed"))
    now = timezone.now()
    new = rotate_signing_secret(signed, now=now, grace=timedelta(hours=1))
    assert new != OLD and len(new) >= 32

    test_endpoint(endpoint)  # the Test button's path
    Slot.objects.filter(pk=endpoint.pk).update(
        next_run_at=timezone.now(), next_run_source=Source.BASELINE_INTERVAL
    )
    [claim] = claim_due_endpoints(now=timezone.now(), limit=10, horizon_ms=0)
    execute_claim(claim)  # the scheduler's path (the hot path reads the tenant's secrets)

    check = verify()
    for hit in target.hits("/signed"):
        assert check(new.encode(), hit.headers, hit.body)
        assert check(OLD.encode(), hit.headers, hit.body)
        assert not check(b"someone-else", hit.headers, hit.body)
    assert len(target.hits("/signed")) == 2


def test_after_the_grace_period_only_the_new_secret_signs(signed, make_endpoint, target):
    endpoint = make_endpoint(url=target.url("/signed"))
    now = timezone.now()
    new = rotate_signing_secret(signed, now=now, grace=timedelta(minutes=5))

    assert end_signing_grace(now=now + timedelta(minutes=4)) == 0  # not yet
    assert end_signing_grace(now=now + timedelta(minutes=5)) == 1
    test_endpoint(Endpoint.objects.select_related("job__tenant").get(pk=endpoint.pk))

    [hit] = target.hits("/signed")
    assert "," not in hit.headers["X-Cronicorn-Signature"]
    assert verify()(new.encode(), hit.headers, hit.body)
    assert not verify()(OLD.encode(), hit.headers, hit.body)


def test_a_tenant_that_signed_nothing_starts_signing_with_no_previous_secret(tenant):
    rotate_signing_secret(tenant, now=timezone.now())
    tenant.refresh_from_db()
    assert tenant.hmac_secret and tenant.hmac_secret_previous == ""
    assert tenant.hmac_previous_until is None


def test_the_api_shows_the_new_secret_once_and_the_grace_after(signed, settings):
    settings.CRONICORN_SIGNING_GRACE_SECONDS = 3600
    key = make_key(signed)
    client = Client(headers={"Authorization": f"Bearer {key}"})
    before = timezone.now()

    answer = client.post(f"/api/v1/tenants/{signed.pk}/signing-secret")

    assert answer.status_code == 200, answer.content
    body = answer.json()
    signed.refresh_from_db()
    assert body["secret"] == signed.hmac_secret != OLD
    assert signed.hmac_secret_previous == OLD
    until = signed.hmac_previous_until
    assert before + timedelta(seconds=3600) <= until <= timezone.now() + timedelta(seconds=3600)
    shown = client.get(f"/api/v1/tenants/{signed.pk}").json()
    assert body["secret"] not in str(shown) and OLD not in str(shown)
    assert shown["previous_secret_signs_until"] is not None


def test_the_command_prints_the_secret_once_and_wants_units(signed):
    out, err = StringIO(), StringIO()
    call_command(
        "rotate_signing_secret", "--tenant", signed.name, "--grace", "2h", stdout=out, stderr=err
    )
    signed.refresh_from_db()
    assert out.getvalue().strip() == signed.hmac_secret
    assert "not shown again" in err.getvalue()
    with pytest.raises(CommandError, match="missing unit"):
        call_command("rotate_signing_secret", "--tenant", signed.name, "--grace", "2")
    with pytest.raises(CommandError, match="No tenant"):
        call_command("rotate_signing_secret", "--tenant", "nobody")
