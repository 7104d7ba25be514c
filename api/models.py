"""API keys and the responses kept for Idempotency-Key replays.

A key is ``cc_<prefix>_<secret>``: the prefix is stored in clear to find the row and to
show which key is which; only a SHA-256 of the whole key is stored. Keys are 256-bit
random strings, so a fast hash is enough (a slow password hash such as PBKDF2 guards
guessable passwords, and would cost every API request tens of milliseconds).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q

from endpoints.models import Tenant

KEY_PREFIX = "cc_"


class Scope(models.TextChoices):
    READ = "read"
    WRITE = "write"


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiKeyQuerySet(models.QuerySet["ApiKey"]):
    def usable(self, *, now: datetime) -> ApiKeyQuerySet:
        return self.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now), revoked_at=None)


class ApiKey(models.Model):
    Scope = Scope

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, help_text="What uses it, e.g. 'CI deploys'.")
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    # Unique, so indexed: every request looks its key up by hash.
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.WRITE)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    objects = ApiKeyQuerySet.as_manager()

    class Meta:
        ordering = ["tenant__name", "name"]
        verbose_name = "API key"
        constraints = [
            models.CheckConstraint(
                condition=Q(scope__in=Scope.values), name="api_apikey_scope_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({KEY_PREFIX}{self.prefix}_…)"

    @property
    def can_write(self) -> bool:
        return self.scope == Scope.WRITE

    def issue(self) -> str:
        """Give this (unsaved) key its secret; returns the only copy of the full key."""
        self.prefix = secrets.token_hex(4)
        raw = f"{KEY_PREFIX}{self.prefix}_{secrets.token_urlsafe(32)}"
        self.key_hash = hash_key(raw)
        return raw


class IdempotentRequest(models.Model):
    """The first answer to a create or run-now sent with an Idempotency-Key, replayed
    to retries with the same key for a day (and refused for a different request); an
    older row is replaced by the next request that reuses its key."""

    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    fingerprint = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(null=True)
    body = models.BinaryField(null=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["api_key", "key"], name="api_idempotentrequest_once"),
        ]

    def __str__(self) -> str:
        return f"idempotency key {self.key}"
