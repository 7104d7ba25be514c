"""Alert channels (the notifications app): list, create, read, change, delete, and send a
test message; and acknowledging a failing endpoint's alert. A channel's target is a secret:
written, never read back."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone
from ninja import Router
from ninja.errors import HttpError

from api.alert_schemas import AcknowledgementOut, ChannelIn, ChannelOut, ChannelPatch, DeliveryOut
from api.auth import Principal, get_scoped
from api.forms import validated_channel
from api.operations import operation
from api.routers.endpoints import scoped_endpoint
from api.routers.jobs import tenant_for
from api.schemas import Message
from endpoints import operations
from endpoints.models import Tenant
from notifications.alerts import acknowledge
from notifications.delivery import send_test_message
from notifications.models import AlertState, Channel, Delivery

router = Router(tags=["alert channels"])


def scoped_channel(principal: Principal, channel_id: int) -> Channel:
    return get_scoped(principal, Channel.objects.select_related("tenant"), "tenant", channel_id)


@operation(router, "get", "/channels", name="list_channels", response=list[ChannelOut])
def list_channels(principal: Principal) -> list[Channel]:
    """The alert channels of the caller's tenant(s); targets masked."""
    return list(principal.scope(Channel.objects.all(), "tenant").order_by("name", "pk"))


@operation(
    router,
    "post",
    "/channels",
    name="create_channel",
    response=ChannelOut,
    status=201,
    idempotent=True,
)
def create_channel(principal: Principal, payload: ChannelIn) -> Channel:
    """Create an alert channel: email, a signed webhook, or an Apprise URL (chat, push)."""
    tenant = tenant_for(principal, payload)
    values = {**payload.dict(exclude={"tenant_id"}), "tenant": tenant}
    # The tenant's row is locked while its channels are counted (Channel.clean) and the
    # new one saved: concurrent creates are counted one after another.
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().filter(pk=tenant or 0)
        list(locked.values_list("pk", flat=True))
        channel = validated_channel(principal, Channel(), values)
        channel.save()
    return channel


@operation(router, "get", "/channels/{channel_id}", name="get_channel", response=ChannelOut)
def get_channel(principal: Principal, channel_id: int) -> Channel:
    """One alert channel, its target masked, with its health (failing since, failures)."""
    return scoped_channel(principal, channel_id)


@operation(
    router,
    "patch",
    "/channels/{channel_id}",
    name="update_channel",
    response=ChannelOut,
)
def update_channel(principal: Principal, channel_id: int, payload: ChannelPatch) -> Channel:
    """Change a channel (only the fields given; a target given replaces the stored one)."""
    values = payload.dict(exclude_unset=True)
    channel = validated_channel(principal, scoped_channel(principal, channel_id), values)
    channel.save(update_fields=["name", "kind", "target", "enabled"])
    return channel


@operation(
    router,
    "delete",
    "/channels/{channel_id}",
    name="delete_channel",
    response=Message,
)
def delete_channel(principal: Principal, channel_id: int) -> Message:
    """Delete an alert channel with its delivery records."""
    channel = scoped_channel(principal, channel_id)
    operations.delete_for_good(Channel.objects.filter(pk=channel.pk), actor=principal.actor)
    return Message(detail=f"Channel {channel.name} deleted.")


@operation(
    router,
    "post",
    "/channels/{channel_id}/test",
    name="test_channel",
    calls_out=True,
    response=DeliveryOut,
)
def test_channel(principal: Principal, channel_id: int) -> Delivery:
    """Send a test message on the channel now and return its delivery (sent or failed,
    with the error, secrets scrubbed)."""
    return send_test_message(scoped_channel(principal, channel_id), now=timezone.now())


@operation(
    router,
    "post",
    "/endpoints/{endpoint_id}/acknowledge",
    name="acknowledge_alert",
    response=AcknowledgementOut,
)
def acknowledge_alert(principal: Principal, endpoint_id: int) -> AlertState:
    """Acknowledge a failing endpoint's alert: no more reminders and no escalation until it
    recovers (its next failure alerts afresh). 409 when it is not failing."""
    endpoint = scoped_endpoint(principal, endpoint_id)
    who = principal.user.get_username() if principal.user else f"API key {principal.api_key_id}"
    state = acknowledge(endpoint, now=timezone.now(), by=who)
    if state is None:
        raise HttpError(
            409,
            f"{endpoint.ref} is not failing (or its failing alert is not raised yet): "
            "there is nothing to acknowledge.",
        )
    return state
