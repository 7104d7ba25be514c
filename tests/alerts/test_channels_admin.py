"""Alert channels in the admin and from the command line: secrets masked, tenants kept
apart, the test message sent from the button and from ``test_channel``."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command
from django.urls import reverse

from notifications.models import Channel, ChannelKind, Delivery, DeliveryStatus
from tests.world import World

SECRET = "xoxb-super-secret-slack-token"
SLACK_TOKEN = "TIiajkdnlazkcOXrIdevi7FQ"


@pytest.fixture(autouse=True)
def channels_reach_the_test_servers(settings) -> None:
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = True
    settings.CRONICORN_NOTIFY_TIMEOUT_SECONDS = 2


@pytest.fixture
def hook(world: World, target) -> Channel:
    return Channel.objects.create(
        tenant=world.a.tenant,
        name="hook",
        kind=ChannelKind.WEBHOOK,
        target=target.url(f"/hooks/{SECRET}"),
    )


def messages_of(response: object) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]  # type: ignore[attr-defined]


def test_channel_pages_show_the_target_masked_and_never_its_secret(world: World, hook) -> None:
    client = world.client_for(world.alice)
    chat = Channel.objects.create(
        tenant=world.a.tenant,
        name="chat",
        kind=ChannelKind.APPRISE,
        target=f"slack://T1JJ3T3L2/A1BRTD4JD/{SLACK_TOKEN}",
    )
    for url in (
        reverse("admin:notifications_channel_changelist"),
        reverse("admin:notifications_channel_change", args=[hook.pk]),
        reverse("admin:notifications_channel_change", args=[chat.pk]),
    ):
        page = client.get(url)
        assert page.status_code == 200
        assert SECRET not in page.content.decode()
        assert SLACK_TOKEN not in page.content.decode()
    chat_page = client.get(reverse("admin:notifications_channel_change", args=[chat.pk]))
    # Scheme and host only: Slack keeps its tokens where a host and path would be.
    assert "slack://••••" in chat_page.content.decode()


def test_another_tenants_channel_does_not_exist_for_a_member(world: World, hook) -> None:
    client = world.client_for(world.bob)
    assert (
        client.get(reverse("admin:notifications_channel_change", args=[hook.pk])).status_code == 404
    )
    listing = client.get(reverse("admin:notifications_channel_changelist")).content.decode()
    assert "Alpha" not in listing and "/hooks/" not in listing
    test = client.post(reverse("admin:notifications_channel_test", args=[hook.pk]))
    assert test.status_code == 404


def test_the_change_page_button_sends_a_test_message_through_the_channel(
    world: World, hook, target
) -> None:
    client = world.client_for(world.alice)
    page = client.get(reverse("admin:notifications_channel_change", args=[hook.pk]))
    assert "Send a test message" in page.content.decode()

    response = client.post(reverse("admin:notifications_channel_test", args=[hook.pk]))

    assert response.status_code == 302
    assert messages_of(response) == ["Alpha/hook: test message sent."]
    [hit] = target.hits(f"/hooks/{SECRET}")
    assert json.loads(hit.body)["kind"] == "test"
    assert Delivery.objects.get().status == DeliveryStatus.SENT


def test_a_failing_test_message_says_why_without_the_secret(world: World, hook, target) -> None:
    target.reply(f"/hooks/{SECRET}", status=502)
    client = world.client_for(world.alice)
    response = client.post(reverse("admin:notifications_channel_test", args=[hook.pk]))
    [message] = messages_of(response)
    assert "test message failed" in message and "HTTP 502" in message
    assert SECRET not in message
    hook.refresh_from_db()
    assert hook.consecutive_failures == 1


def test_a_channel_with_a_target_its_kind_cannot_use_is_refused_with_a_clear_message(
    world: World,
) -> None:
    client = world.client_for(world.alice)
    response = client.post(
        reverse("admin:notifications_channel_add"),
        {"tenant": world.a.tenant.pk, "name": "mail", "kind": "email", "target": "not an email"},
    )
    assert response.status_code == 200
    assert "Give one or more email addresses separated by commas" in response.content.decode()
    assert not Channel.objects.filter(name="mail").exists()


def test_saving_a_channel_without_retyping_its_target_keeps_it(world: World, hook) -> None:
    client = world.client_for(world.alice)
    response = client.post(
        reverse("admin:notifications_channel_change", args=[hook.pk]),
        {
            "tenant": world.a.tenant.pk,
            "name": "renamed",
            "kind": "webhook",
            "target": "",
            "enabled": "on",
        },
    )
    assert response.status_code == 302
    hook.refresh_from_db()
    assert (hook.name, SECRET in hook.target) == ("renamed", True)


def test_test_channel_sends_a_test_message_and_names_the_channel(hook, target) -> None:
    out = StringIO()
    call_command("test_channel", "Alpha/hook", stdout=out)
    assert out.getvalue().startswith(f"Alpha/hook (webhook {target.url('/')}••••)")
    assert out.getvalue().strip().endswith("test message sent.")
    assert SECRET not in out.getvalue()
    assert len(target.hits(f"/hooks/{SECRET}")) == 1


def test_test_channel_exits_non_zero_when_the_channel_fails(hook, target) -> None:
    target.reply(f"/hooks/{SECRET}", status=500)
    with pytest.raises(CommandError, match="the test message failed: webhook: HTTP 500") as err:
        call_command("test_channel", "hook")
    assert SECRET not in str(err.value)


def test_test_channel_names_the_channels_when_it_finds_none(hook) -> None:
    with pytest.raises(CommandError, match=r"No channel 'nope'; give tenant/name or the id"):
        call_command("test_channel", "nope")


def test_rules_alerts_and_deliveries_of_another_tenant_are_invisible(world: World, hook) -> None:
    from django.utils import timezone

    from notifications.models import Alert, AlertRule

    rule = AlertRule.objects.create(endpoint=world.a.endpoint, after_failures=7)
    alert = Alert.objects.create(
        tenant=world.a.tenant, job=world.a.job, endpoint=world.a.endpoint, kind="failing",
        detail="alpha-only detail", created_at=timezone.now(),
    )  # fmt: skip
    delivery = Delivery.objects.create(
        channel=hook, subject="alpha-only subject", body="b", payload={},
        next_attempt_at=timezone.now(), created_at=timezone.now(),
    )  # fmt: skip
    alice, bob = world.client_for(world.alice), world.client_for(world.bob)
    pages = [
        ("notifications_alertrule", rule.pk, "alpha-orders"),
        ("notifications_alert", alert.pk, "alpha-only detail"),
        ("notifications_delivery", delivery.pk, "alpha-only subject"),
    ]
    for name, pk, text in pages:
        listing = reverse(f"admin:{name}_changelist")
        assert text in alice.get(listing).content.decode(), name
        assert text not in bob.get(listing).content.decode(), name
        assert bob.get(reverse(f"admin:{name}_change", args=[pk])).status_code == 404, name
    form = bob.get(reverse("admin:notifications_alertrule_add")).content.decode()
    assert "alpha-orders" not in form and "ops-alpha" not in form


def test_a_rule_for_both_a_job_and_an_endpoint_is_refused_with_a_clear_message(
    world: World,
) -> None:
    from notifications.models import AlertRule

    client = world.client_for(world.alice)
    form = {
        "job": world.a.job.pk,
        "endpoint": world.a.endpoint.pk,
        "enabled": "on",
        "after_failures": "3",
        "on_recovery": "on",
        "on_pause": "on",
        "stale_factor": "0",
    }
    response = client.post(reverse("admin:notifications_alertrule_add"), form)
    assert response.status_code == 200
    assert "not both, not neither" in response.content.decode()
    form["job"] = ""
    assert client.post(reverse("admin:notifications_alertrule_add"), form).status_code == 302
    assert AlertRule.objects.get().endpoint == world.a.endpoint
