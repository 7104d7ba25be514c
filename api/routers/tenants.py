"""The caller's tenant(s): limits and usage this month."""

from __future__ import annotations

from django.utils import timezone
from ninja import Router

from api.auth import Principal, get_scoped, tenants_of
from api.operations import operation
from api.schemas import Message, SigningSecretOut, TenantOut
from endpoints import operations
from endpoints.models import Endpoint, Tenant
from endpoints.wording import count_words
from planner.analysis import tokens_committed_this_month, tokens_spent_this_month

router = Router(tags=["tenant"])


def _usage(tenant: Tenant) -> TenantOut:
    now = timezone.now()
    tokens = tokens_spent_this_month(tenant.pk, now=now)
    return TenantOut(
        id=tenant.pk,
        name=tenant.name,
        max_endpoints=tenant.max_endpoints,
        endpoints_used=Endpoint.objects.live().filter(job__tenant=tenant).count(),
        min_interval_ms=tenant.min_interval_ms,
        monthly_token_budget=tenant.monthly_token_budget,
        host_rate_limits=tenant.host_rate_limits,
        tokens_used_this_month=tokens,
        tokens_reserved_now=tokens_committed_this_month(tenant.pk, now=now) - tokens,
        signs_requests=bool(tenant.hmac_secret),
        previous_secret_signs_until=tenant.hmac_previous_until,
    )


@operation(router, "get", "/tenants", name="list_tenants", response=list[TenantOut])
def list_tenants(principal: Principal) -> list[TenantOut]:
    """The caller's tenants (an API key has one) with their limits and usage."""
    return [_usage(tenant) for tenant in tenants_of(principal)]


@operation(router, "get", "/tenants/{tenant_id}", name="get_tenant", response=TenantOut)
def get_tenant(principal: Principal, tenant_id: int) -> TenantOut:
    """A tenant's limits (endpoints, shortest interval, token budget) and usage."""
    return _usage(get_scoped(principal, Tenant.objects.all(), "pk", tenant_id))


@operation(
    router,
    "post",
    "/tenants/{tenant_id}/signing-secret",
    name="rotate_signing_secret",
    response=SigningSecretOut,
    destructive=True,
)
def rotate_signing_secret(principal: Principal, tenant_id: int) -> SigningSecretOut:
    """Rotate the tenant's request-signing secret and show the new one, once.

    Requests carry X-Cronicorn-Signature: the HMAC-SHA256 of timestamp + "." + body. For
    CRONICORN_SIGNING_GRACE_SECONDS (a day by default) after a rotation they carry two,
    comma-separated: one with the new secret, one with the previous, so receivers can
    switch whenever they like within the grace period.
    """
    tenant = get_scoped(principal, Tenant.objects.all(), "pk", tenant_id)
    secret = operations.rotate_signing_secret(tenant, now=timezone.now(), actor=principal.actor)
    return SigningSecretOut(secret=secret, previous_secret_signs_until=tenant.hmac_previous_until)


@operation(router, "post", "/tenants/{tenant_id}/pause", name="pause_tenant", response=Message)
def pause_tenant(principal: Principal, tenant_id: int) -> Message:
    """Pause every active job of the tenant: nothing of it runs until resume_tenant."""
    tenant = get_scoped(principal, Tenant.objects.all(), "pk", tenant_id)
    count = operations.pause_tenant(tenant, now=timezone.now(), actor=principal.actor)
    return Message(detail=f"{tenant.name}: {count_words(count, 'job')} paused.")


@operation(
    router,
    "post",
    "/tenants/{tenant_id}/resume",
    name="resume_tenant",
    response=Message,
)
def resume_tenant(principal: Principal, tenant_id: int) -> Message:
    """Resume every paused job of the tenant; each endpoint is planned afresh."""
    tenant = get_scoped(principal, Tenant.objects.all(), "pk", tenant_id)
    count = operations.resume_tenant(tenant, now=timezone.now(), actor=principal.actor)
    return Message(detail=f"{tenant.name}: {count_words(count, 'job')} resumed.")
