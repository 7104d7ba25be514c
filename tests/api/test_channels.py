"""Alert channels through the REST API: the admin's form and checks, the target a secret
that is written and never read back, and a test message to a real webhook receiver."""

from __future__ import annotations

import pytest

from endpoints.secrets import MASK
from notifications.models import Channel, Delivery
from tests.http_targets import TargetServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]

TOKEN = "s3cr3t-hook-token"


def test_a_channel_made_through_the_api_never_shows_its_target_again(http):
    with TargetServer() as receiver:
        url = receiver.url(f"/hook/{TOKEN}")
        made = http.post("/channels", json={"name": "oncall", "kind": "webhook", "target": url})
        assert made.status_code == 201, made.text
        channel = made.json()
        assert channel["target"] == MASK and TOKEN not in made.text

        shown = http.get(f"/channels/{channel['id']}")
        listed = http.get("/channels")
        assert TOKEN not in shown.text + listed.text
        assert shown.json()["target"] == MASK

        # A change that leaves the target out keeps it.
        changed = http.patch(f"/channels/{channel['id']}", json={"name": "pager"})
        assert changed.status_code == 200, changed.text
        assert Channel.objects.get(pk=channel["id"]).target == url

        sent = http.post(f"/channels/{channel['id']}/test")
        assert sent.status_code == 200, sent.text
        assert sent.json()["status"] == "sent"
        [hit] = receiver.hits(f"/hook/{TOKEN}")
        assert b'"kind": "test"' in hit.body or b'"kind":"test"' in hit.body

    assert http.delete(f"/channels/{channel['id']}").status_code == 200
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
def test_a_bad_channel_is_a_field_level_problem_and_nothing_is_written(http, body, field):
    answer = http.post("/channels", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert field in answer.json()["errors"]
    assert not Channel.objects.exists() and not Delivery.objects.exists()
