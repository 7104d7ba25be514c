"""Who is calling, and what they may see: the one place every route and MCP tool uses.

A caller is a ``Principal``: an API key (one tenant, read or write) or a logged-in admin
user (the tenants they belong to, all for a superuser; CSRF applies). Objects of other
tenants do not exist for a caller: lookups answer 404, never 403.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, TypeVar

from django.conf import settings
from django.core.cache import caches
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from ninja.errors import HttpError, Throttled
from ninja.security import SessionAuth
from ninja.security.http import HttpAuthBase
from ninja.throttling import AuthRateThrottle

from api.models import ApiKey, hash_key
from endpoints.audit import Actor
from endpoints.models import Tenant

M = TypeVar("M", bound=Model)

# last_used_at is written at most this often per key: not a write on every request.
LAST_USED_PRECISION = timedelta(minutes=1)

# What the admin lets only superusers do (endpoints/admin.py: "Only superusers delete or
# manage tenants"; TenantAdmin, the signing-secret action, every has_delete_permission).
# A staff member's session has exactly the admin's rights through the API, so these
# answer 403 to it; tests/api/test_sessions.py checks each against the admin itself.
SUPERUSER_ONLY_OPERATIONS = frozenset(
    {
        "delete_endpoint",
        "delete_job",
        "delete_channel",
        "rotate_signing_secret",
    }
)


@dataclass(frozen=True)
class Principal:
    tenant_ids: tuple[int, ...] | None  # None: every tenant (a superuser's session)
    can_write: bool
    api_key_id: int | None = None
    user: Any = None
    key_prefix: str = ""

    def __str__(self) -> str:
        # The rate limiter's bucket: one per key, one per user.
        return f"key:{self.api_key_id}" if self.api_key_id else f"user:{self.user.pk}"

    @property
    def actor(self) -> Actor:
        """Who the audit trail names: the key by its prefix, or the signed-in user."""
        return Actor.api_key(self.key_prefix) if self.api_key_id else Actor.person(self.user)

    def scope(self, queryset: QuerySet[M], tenant_path: str) -> QuerySet[M]:
        if self.tenant_ids is None:
            return queryset
        return queryset.filter(**{f"{tenant_path}__in": self.tenant_ids})

    def require_write(self) -> None:
        if not self.can_write:
            raise HttpError(403, "This API key is read-only; use a key with the write scope.")

    def require_allowed(self, operation: str) -> None:
        """A session has the admin's rights for its user, no more."""
        if self.user is None or self.user.is_superuser:
            return
        if operation in SUPERUSER_ONLY_OPERATIONS:
            raise HttpError(
                403,
                "Only a superuser may do this in the admin, so a staff member's session may "
                "not do it through the API either; ask a superuser, or use an API key of the "
                "tenant.",
            )


class NotFound(HttpError):
    def __init__(self, what: str, pk: Any) -> None:
        super().__init__(404, f"No {what} with id {pk} (or not in your tenant).")


def get_scoped(principal: Principal, queryset: QuerySet[M], tenant_path: str, pk: Any) -> M:
    """The object with ``pk`` if the caller's tenants hold it; 404 otherwise."""
    if isinstance(pk, int) and not 1 <= pk < 2**63:
        raise NotFound(str(queryset.model._meta.verbose_name), pk)  # no such row can exist
    # order_by(): first() would sort by Meta.ordering, joining the tables it names.
    found = principal.scope(queryset, tenant_path).filter(pk=pk).order_by().first()
    if found is None:
        raise NotFound(str(queryset.model._meta.verbose_name), pk)
    return found


def tenants_of(principal: Principal) -> QuerySet[Tenant]:
    return principal.scope(Tenant.objects.all(), "pk")


def principal_for_key(raw: str) -> Principal | None:
    """The principal of a usable (not revoked, not expired) key; None otherwise."""
    now = timezone.now()
    key = (
        ApiKey.objects.usable(now=now)
        .filter(key_hash=hash_key(raw))
        .only("pk", "tenant_id", "scope", "last_used_at", "prefix")
        .order_by()
        .first()
    )
    if key is None:
        return None
    if key.last_used_at is None or key.last_used_at < now - LAST_USED_PRECISION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return Principal(
        tenant_ids=(key.tenant_id,),
        can_write=key.can_write,
        api_key_id=key.pk,
        key_prefix=key.prefix,
    )


def principal_for_user(user: Any) -> Principal | None:
    if not (user.is_authenticated and user.is_active and user.is_staff):
        return None
    if user.is_superuser:
        return Principal(tenant_ids=None, can_write=True, user=user)
    ids = tuple(Tenant.objects.filter(members=user).values_list("pk", flat=True))
    return Principal(tenant_ids=ids, can_write=True, user=user)


def bearer_key(authorization: str | None) -> str | None:
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class ApiKeyAuth(HttpAuthBase):
    """``Authorization: Bearer cc_…``. Ninja's HttpBearer logs an unexpected header in
    DEBUG, which could put a key in the logs; this reads the header without logging."""

    openapi_scheme = "bearer"

    def __call__(self, request: HttpRequest) -> Principal | None:
        raw = bearer_key(request.headers.get("Authorization"))
        return principal_for_key(raw) if raw else None


class AdminSessionAuth(SessionAuth):
    """A logged-in admin user's session; ninja checks the CSRF token on writes."""

    def __call__(self, request: HttpRequest) -> Principal | None:
        # Ninja checks CSRF before it looks for the session, which would answer a client
        # whose API key failed "CSRF check failed" (403) instead of 401.
        if settings.SESSION_COOKIE_NAME not in request.COOKIES:
            return None
        return super().__call__(request)  # type: ignore[no-any-return]

    def authenticate(self, request: HttpRequest, key: str | None) -> Principal | None:
        return principal_for_user(request.user)


class KeyRateThrottle(AuthRateThrottle):
    """Requests per key (or per user) in the ``api`` cache: Redis when
    CRONICORN_API_CACHE_URL names one (a fleet of web processes shares the count), the
    process's memory otherwise (one machine).

    A counter per key and window, counted atomically: ``add`` (Redis SET NX with the
    window's expiry) creates it, ``incr`` (Redis INCRBY) counts, and the count that INCR
    returns decides. No read-modify-write, so concurrent requests can never all see the
    same count and pass together (ninja's own throttle reads a history list, then writes
    it back)."""

    scope = "api"

    def __init__(self) -> None:
        self.cache = caches["api"]
        super().__init__(settings.CRONICORN_API_RATE)
        self.window_ends = 0.0

    def allow_request(self, request: HttpRequest) -> bool:
        # Read per request, so a settings change (or a test's override) applies at once.
        self.rate = settings.CRONICORN_API_RATE
        self.num_requests, self.duration = self.parse_rate(self.rate)
        key = self.get_cache_key(request)
        if key is None or not self.num_requests or not self.duration:
            return True
        now = time.time()
        window = int(now // self.duration)
        self.window_ends = (window + 1) * self.duration
        counter = f"{key}:{window}"
        self.cache.add(counter, 0, timeout=self.duration + 1)
        try:
            count = self.cache.incr(counter)
        except ValueError:  # expired between add and incr: this request starts it again
            self.cache.add(counter, 1, timeout=self.duration + 1)
            count = 1
        return bool(count <= self.num_requests)

    def wait(self) -> float | None:
        return max(self.window_ends - time.time(), 1.0)


def check_rate(principal: Principal) -> None:
    """The REST routes' per-key limit, for callers that are not a ninja route (MCP tools):
    the same bucket, so a key's REST requests and tool calls count together."""
    throttle = KeyRateThrottle()
    # The throttle reads only ``request.auth`` (the principal) to find the bucket.
    if not throttle.allow_request(SimpleNamespace(auth=principal)):  # type: ignore[arg-type]
        raise Throttled(wait=int(throttle.wait() or 1))
