"""Alerts in the admin: channels (target write-only and masked, a test button), rules,
and the records (alerts, deliveries with every attempt), scoped to the user's tenants
like the rest of the admin."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from console.admin.base import DeletesForGood, RecordAdmin, TenantScopedAdmin
from console.admin.filters import scope, user_tenant_ids
from endpoints.models import Endpoint, Job, Tenant
from notifications.delivery import send_test_message
from notifications.forms import AlertRuleForm, ChannelForm
from notifications.models import (
    Alert,
    AlertRule,
    Channel,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
)
from notifications.transports import masked_target


@admin.register(Channel)
class ChannelAdmin(DeletesForGood, TenantScopedAdmin):
    tenant_path = "tenant"
    editable = True
    form = ChannelForm
    list_display = ("name", "tenant", "kind", "shown_target", "enabled", "health")
    list_filter = ("kind", "enabled")
    list_select_related = ("tenant",)
    readonly_fields = ("shown_target", "health", "last_error", "test_button")
    actions = ("send_test",)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = ["tenant", "name", "kind", "target", "enabled", "escalation_only"]
        if obj is not None:
            fields[3:3] = ["shown_target"]
            fields += ["health", "last_error", "test_button"]
        return fields

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "tenant":
            ids = user_tenant_ids(request)
            tenants = Tenant.objects.all()
            kwargs["queryset"] = tenants if ids is None else tenants.filter(pk__in=ids)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description="target")
    def shown_target(self, obj: Channel) -> str:
        return masked_target(obj)

    @admin.display(description="health")
    def health(self, obj: Channel) -> str:
        if obj.failing_since is not None:
            since = f"{obj.failing_since:%Y-%m-%d %H:%M} UTC"
            return f"failing since {since} ({obj.consecutive_failures} failed attempts in a row)"
        return "ok" if not obj.consecutive_failures else f"{obj.consecutive_failures} failed"

    @admin.display(description="test")
    def test_button(self, obj: Channel) -> str:
        return format_html(
            '<button type="submit" class="button" formaction="{}" formmethod="post" '
            'formnovalidate name="_test">Send a test message</button>',
            reverse("admin:notifications_channel_test", args=[obj.pk]),
        )

    def get_urls(self) -> list[URLPattern]:
        test = path(
            "<path:object_id>/test/",
            self.admin_site.admin_view(self.test_view),
            name="notifications_channel_test",
        )
        return [test, *super().get_urls()]

    def test_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The change page's button: POST only (with CSRF, via admin_view), then back."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        channel = self.get_object(request, unquote(object_id))
        if not self.has_change_permission(request, channel):
            raise PermissionDenied
        self._report_test(request, channel)
        return redirect("admin:notifications_channel_change", channel.pk)

    @admin.action(description="Send a test message")
    def send_test(self, request: HttpRequest, queryset: QuerySet[Channel]) -> None:
        for channel in queryset.select_related("tenant"):
            self._report_test(request, channel)

    def _report_test(self, request: HttpRequest, channel: Channel) -> None:
        delivery = send_test_message(channel, now=timezone.now())
        if delivery.status == DeliveryStatus.SENT:
            self.message_user(request, f"{channel}: test message sent.")
        else:
            self.message_user(
                request, f"{channel}: test message failed: {delivery.last_error}", messages.ERROR
            )


@admin.register(AlertRule)
class AlertRuleAdmin(TenantScopedAdmin):
    tenant_path = "job__tenant"
    editable = True
    form = AlertRuleForm
    list_display = (
        "__str__",
        "enabled",
        "after_failures",
        "on_recovery",
        "on_pause",
        "remind_every_minutes",
        "escalate_after_minutes",
    )
    list_select_related = ("job", "endpoint__job")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # A rule hangs off a job or an endpoint: either leads to the tenant.
        ids = user_tenant_ids(request)
        rules = AlertRule.objects.select_related("job", "endpoint__job")
        if ids is None:
            return rules
        return rules.filter(Q(job__tenant__in=ids) | Q(endpoint__job__tenant__in=ids))

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "job":
            kwargs["queryset"] = scope(Job.objects.select_related("tenant"), request, "tenant")
        if db_field.name == "endpoint":
            kwargs["queryset"] = scope(
                Endpoint.objects.live().select_related("job"), request, "job__tenant"
            )
        if db_field.name == "escalate_to":
            kwargs["queryset"] = scope(Channel.objects.select_related("tenant"), request, "tenant")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(Alert)
class AlertAdmin(RecordAdmin):
    tenant_path = "tenant"
    list_display = ("created_at", "endpoint", "kind", "detail", "queued_at")
    list_filter = ("kind",)
    list_select_related = ("endpoint__job",)


class AttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    can_delete = False
    fields = ("number", "at", "ok", "duration_ms", "error")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(RecordAdmin):
    tenant_path = "channel__tenant"
    list_display = ("created_at", "channel", "subject", "status", "attempts", "next_attempt_at")
    list_filter = ("status",)
    list_select_related = ("channel__tenant",)
    inlines = (AttemptInline,)
    exclude = ("alerts",)
    readonly_fields = (
        "channel",
        "subject",
        "body",
        "payload",
        "status",
        "attempts",
        "next_attempt_at",
        "last_error",
        "created_at",
        "sent_at",
    )
