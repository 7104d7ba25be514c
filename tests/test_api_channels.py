"""Alert channels through the REST API: the admin's form and checks, the target a secret
that is written and never read back, and a test message to a real webhook receiver."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from endpoints.models import Tenant
from endpoints.secrets import MASK
from notifications.models import Channel, Delivery
from tests.api_world import make_key
from tests.http_targets import TargetServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]

TOKEN = "s3cr3t-hook-token"


@pytest.fixture
def api(live_server) -> Iterator[httpx.Client]:
    tenant = Tenant.objects.create(name="Acme")
    key = make_key(tenant)
    with httpx.Client(
        base_url=f"{live_server.url}/api/v1", headers={"Authorization": f"Bearer {key}"}
    ) as client:
        yield client


def test_a_channel_made_through_the_api_never_shows_its_target_again(api):
    with TargetServer() as receiver:
        url = receiver.url(f"/hook/{TOKEN}")
        made = api.post("/channels", json={"name": "oncall", "kind": "webhook", "target": url})
        assert made.status_code == 201, made.text
        channel = made.json()
        assert channel["target"] == MASK and TOKEN not in made.text

        shown = api.get(f"/channels/{channel['id']}")
        listed = api.get("/channels")
        assert TOKEN not in shown.text + listed.text
        assert shown.json()["target"] == MASK

        # A change that leaves the target out keeps it.
        changed = api.patch(f"/channels/{channel['id']}", json={"name": "pager"})
        assert changed.status_code == 200, changed.text
        assert Channel.objects.get(pk=channel["id"]).target == url

        sent = api.post(f"/channels/{channel['id']}/test")
        assert sent.status_code == 200, sent.text
        assert sent.json()["status"] == "sent"
        [hit] = receiver.hits(f"/hook/{TOKEN}")
        assert b'"kind": "test"' in hit.body or b'"kind":"test"' in hit.body

    assert api.delete(f"/channels/{channel['id']}").status_code == 200
    assert not Channel.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "kind": "pigeon", "target": "ops@example.com"}, "kind"),
        ({"name": "x", "kind": "email", "target": "not an address"}, "target"),
        ({"name": "x", "kind": "webhook", "target": "ftp://example.com/"}, "target"),
        ({"name": "x", "kind": "apprise", "target": "nonsense://"}, "target"),
    ],
)
def test_a_bad_channel_is_a_field_level_problem_and_nothing_is_written(api, body, field):
    answer = api.post("/channels", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert field in answer.json()["errors"]
    assert not Channel.objects.exists() and not Delivery.objects.exists()
