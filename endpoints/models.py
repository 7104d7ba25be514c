"""Tenants, jobs, endpoints, runs and hint history.

Invariants live in named database constraints (``endpoints_<model>_<what>``) and are
mirrored in ``clean()`` so ``full_clean`` gives a person a message naming the field.
Durations are milliseconds; times are UTC.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, get_args

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q, Value
from django.db.models.functions import MD5, Cast
from django.utils.timezone import now as current_time

from endpoints import validation
from endpoints.audit import AuditEntry, SchedulerGap  # noqa: F401 - the app's models too
from endpoints.beats import Flip, Heartbeat  # noqa: F401 - the app's models too
from endpoints.choices import (
    HintKind,
    HttpMethod,
    JobStatus,
    PauseSource,
    RunStatus,
    RunTrigger,
    Source,
)
from endpoints.policies import RunPolicy, stored_policy
from endpoints.validation import (
    MAX_INTERVAL_MS,
    MAX_RESPONSE_KB,
    MAX_TIMEOUT_MS,
    MIN_INTERVAL_MS,
    MIN_TIMEOUT_MS,
    validate_endpoint_url,
)
from endpoints.wording import pause_words


def _choices_check(
    field: str, choices: type[models.TextChoices], name: str
) -> models.CheckConstraint:
    return models.CheckConstraint(condition=Q(**{f"{field}__in": choices.values}), name=name)


def policy_context(obj: Any) -> dict[str, Any]:
    """Now, and the saved run policy if ``obj``'s sets a one-off time (a past one must be new)."""
    saved, policy = None, obj.run_policy
    if obj.pk is not None and isinstance(policy, dict) and policy.get("run_once_at"):
        saved = type(obj)._default_manager.filter(pk=obj.pk).values_list("run_policy").first()
    return {"stored": saved[0] if saved else None, "now": current_time()}


def policy_digest() -> models.GeneratedField:
    """A run policy's version, kept by the database (a stored generated column, so every
    write of the policy, raw SQL included, changes it): the engine reads it with each
    claimed endpoint and reads and parses the policy itself only when its process has
    not met that version yet (``endpoints.engine.sql``). A digest of the content, not a
    counter: a version can never name two contents, even where ids are reused."""
    return models.GeneratedField(
        expression=MD5(Cast("run_policy", models.TextField())),
        output_field=models.CharField(max_length=32),
        db_persist=True,
    )


class Tenant(models.Model):
    name = models.CharField(max_length=200, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="tenants", blank=True)
    max_endpoints = models.PositiveIntegerField(
        default=100, help_text="Most endpoints (not archived) this tenant may have."
    )
    min_interval_ms = models.PositiveIntegerField(
        default=MIN_INTERVAL_MS, help_text="Shortest baseline interval allowed, in ms."
    )
    monthly_token_budget = models.PositiveIntegerField(
        default=500_000, help_text="LLM tokens per calendar month; 0 means rules only."
    )
    hmac_secret = models.CharField(
        max_length=200,
        blank=True,
        help_text="When set, requests carry X-Cronicorn-Timestamp and X-Cronicorn-Signature "
        "(HMAC-SHA256 of timestamp + '.' + body).",
    )
    # The secret a rotation replaced, still signing (beside the new one) until
    # hmac_previous_until, so that receivers can switch within the grace period.
    hmac_secret_previous = models.CharField(
        max_length=200, blank=True, editable=False, default="", db_default=""
    )
    hmac_previous_until = models.DateTimeField(null=True, blank=True, editable=False)
    # Read by every run of the tenant with its endpoint (engine.sql), as text: "{}", the
    # default, costs the run nothing (engine.host_limits).
    host_rate_limits = models.JSONField(
        default=dict,
        db_default=Value({}, models.JSONField()),
        blank=True,
        help_text='Requests per second per target host, e.g. {"api.partner.com": 20}: runs of '
        "this tenant's endpoints on that host are delayed (never dropped) to stay within it, "
        "across all workers. 0 exempts a host from CRONICORN_HOST_RATE_LIMIT.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(min_interval_ms__gte=MIN_INTERVAL_MS),
                name="endpoints_tenant_min_interval_at_least_1s",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean_fields(self, exclude: Any = None) -> None:
        problems = validation.check_text_values(self, exclude or ())
        if "host_rate_limits" not in (exclude or ()) and (
            message := validation.host_rate_limits_problem(self.host_rate_limits)
        ):
            problems["host_rate_limits"] = [message]
        validation.clean_fields_checked(self, exclude, problems, super().clean_fields)

    def previous_secret(self, now: datetime) -> str:
        """The replaced secret while its grace period lasts, else "": once the period
        ends only one signature is sent, even before maintenance clears the field."""
        until = self.hmac_previous_until
        return self.hmac_secret_previous if until is not None and until > now else ""

    def clean(self) -> None:
        floor = self.min_interval_ms
        if isinstance(floor, int) and floor < MIN_INTERVAL_MS:
            raise ValidationError(
                {"min_interval_ms": "The shortest interval allowed must be at least 1 s (1000 ms)."}
            )
        if message := validation.longest_problem(floor):
            raise ValidationError({"min_interval_ms": message})


class Job(models.Model):
    Status = JobStatus

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="jobs")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, help_text="Context for the planner.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    max_concurrent = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Most runs of this job's endpoints in flight at once (1 = one at a time). "
        "Excess due endpoints wait; they are never skipped or doubled.",
    )
    run_policy = models.JSONField(
        default=dict,
        db_default=Value({}, models.JSONField()),  # rows inserted by raw SQL get {} too
        blank=True,
        help_text="Defaults of this job's endpoints: success criteria, retries, backoff cap, "
        "breaker, catch-up window, jitter (see endpoints.policies).",
    )
    run_policy_digest = policy_digest()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="endpoints_job_unique_name"),
            _choices_check("status", JobStatus, "endpoints_job_status_valid"),
            models.CheckConstraint(
                condition=Q(max_concurrent__isnull=True) | Q(max_concurrent__gte=1),
                name="endpoints_job_max_concurrent_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean_fields(self, exclude: Any = None) -> None:
        problems = validation.check_text_values(self, exclude or (), in_refs=True)
        validation.clean_fields_checked(self, exclude, problems, super().clean_fields)

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        limit = self.max_concurrent
        if isinstance(limit, int) and limit < 1:
            errors["max_concurrent"] = [
                "Allow at least 1 run at a time (1 = one at a time), "
                "or leave it empty for no limit."
            ]
        add = lambda field, text: errors.setdefault(field, []).append(text)  # noqa: E731
        validation.check_run_policy(self.run_policy, add, **policy_context(self))
        own = self.endpoints.filter(run_policy__overlap__has_key="allow") if self.pk else []
        validation.check_overlap_limit(self, add, "max_concurrent", [self.run_policy], own)
        if errors:
            raise ValidationError(errors)


# What the admin's status filter and the API's ``?status=`` offer (``in_status``).
EndpointStatus = Literal["healthy", "failing", "paused", "hinted", "archived"]
ENDPOINT_STATUSES: tuple[str, ...] = get_args(EndpointStatus)


class EndpointQuerySet(models.QuerySet["Endpoint"]):
    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> list[Endpoint]:
        """Also inserts their slots (``save`` does it one by one)."""
        created = super().bulk_create(objs, *args, **kwargs)
        Slot.objects.bulk_create([endpoint.slot_to_save() for endpoint in created])
        return created

    def live(self) -> EndpointQuerySet:
        return self.filter(archived_at__isnull=True)

    def in_status(self, status: str, *, now: datetime) -> EndpointQuerySet:
        """Endpoints in one of ``ENDPOINT_STATUSES``; all of them for any other value."""
        live, paused = Q(archived_at__isnull=True), Q(paused_until__gt=now)
        conditions = {
            "healthy": live & Q(failure_count=0) & ~paused,
            "failing": live & Q(failure_count__gt=0),
            "paused": live & paused,
            "hinted": live & Q(ai_hint_expires_at__gt=now),
            "archived": Q(archived_at__isnull=False),
        }
        return self.filter(conditions[status]) if status in conditions else self

    def for_user(self, user: Any) -> EndpointQuerySet:
        if user.is_superuser:
            return self
        return self.filter(job__tenant__members=user)

    def by_ref(self, ref: str) -> Endpoint:
        """Look up ``job/endpoint`` or a numeric id; raises Endpoint.DoesNotExist."""
        if ref.isdecimal():
            return self.get(pk=int(ref))
        job_name, sep, name = ref.partition("/")
        if not sep:
            raise self.model.DoesNotExist(
                f"{ref!r} is not an endpoint reference; use job/endpoint or the numeric id."
            )
        matches = list(self.filter(job__name=job_name, name=name)[:2])
        if len(matches) != 1:
            raise self.model.DoesNotExist(
                f"No endpoint {ref!r}." if not matches else f"{ref!r} is ambiguous; use the id."
            )
        return matches[0]


def _slot_property(name: str) -> Any:
    def get(endpoint: Endpoint) -> Any:
        return getattr(endpoint.slot_or_new(), name)

    def put(endpoint: Endpoint, value: Any) -> None:
        setattr(endpoint.slot_or_new(), name, value)

    return property(get, put, doc=f"The slot's ``{name}``: saved by ``Endpoint.save``.")


class Endpoint(models.Model):
    Method = HttpMethod

    # No index of its own: the unique (job, name) index leads with job_id.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="endpoints", db_index=False)
    name = models.CharField(max_length=200)
    description = models.TextField(
        blank=True,
        help_text="In plain English, what matters about this endpoint; read by the planner.",
    )

    # Request.
    url = models.CharField(
        max_length=2000,
        validators=[validate_endpoint_url],
        help_text="http:// or https:// URL; any host name, including single-label service names.",
    )
    method = models.CharField(max_length=8, choices=Method.choices, default=Method.GET)
    headers = models.JSONField(default=dict, blank=True)
    secret_header_names = models.JSONField(
        default=list, blank=True, help_text="Header names whose values are masked everywhere."
    )
    body = models.JSONField(null=True, blank=True)
    timeout_ms = models.PositiveIntegerField(default=30_000)
    max_response_size_kb = models.PositiveIntegerField(default=100)

    # Schedule: exactly one of cron (in ``timezone``) or interval.
    baseline_cron = models.CharField(max_length=200, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    baseline_interval_ms = models.BigIntegerField(null=True, blank=True)
    min_interval_ms = models.BigIntegerField(null=True, blank=True)
    max_interval_ms = models.BigIntegerField(null=True, blank=True)

    # The one active hint (history in HintHistory); one TTL covers both kinds.
    ai_hint_interval_ms = models.BigIntegerField(null=True, blank=True)
    ai_hint_next_run_at = models.DateTimeField(null=True, blank=True)
    ai_hint_expires_at = models.DateTimeField(null=True, blank=True)
    ai_hint_reason = models.TextField(blank=True)

    # State.
    paused_until = models.DateTimeField(null=True, blank=True)
    pause_reason = models.TextField(blank=True)
    pause_source = models.CharField(
        max_length=16, choices=PauseSource.choices, blank=True, db_default=""
    )
    failure_count = models.PositiveIntegerField(default=0)
    # Overrides of the job's run policy, key by key (endpoints.policies).
    run_policy = models.JSONField(
        default=dict, db_default=Value({}, models.JSONField()), blank=True
    )
    run_policy_digest = policy_digest()
    # A retry within the slot is planned (run policy): the attempt it will be (0: none)
    # and the slot's first run, which every attempt links to. Written by the engine only.
    retry_attempt = models.PositiveSmallIntegerField(default=0, db_default=0, editable=False)
    retry_of_run = models.BigIntegerField(null=True, blank=True, editable=False)
    # The run of another endpoint whose follow-up this one's waiting run is (engine only).
    follow_up_of_run = models.BigIntegerField(null=True, blank=True, editable=False)
    archived_at = models.DateTimeField(null=True, blank=True)
    # When it runs next, why, and the claim lease live in its Slot (below), read and
    # written here through these properties.
    last_run_at = _slot_property("last_run_at")
    next_run_at = _slot_property("next_run_at")
    next_run_source = _slot_property("next_run_source")
    locked_until = _slot_property("locked_until")
    claim_token = _slot_property("claim_token")

    # Planner bookkeeping.
    last_analyzed_at = models.DateTimeField(null=True, blank=True)
    next_analysis_at = models.DateTimeField(null=True, blank=True)
    analysis_locked_until = models.DateTimeField(null=True, blank=True)
    analyzed_failure_count = models.PositiveIntegerField(default=0)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = EndpointQuerySet.as_manager()

    class Meta:
        ordering = ["job__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["job", "name"], name="endpoints_endpoint_unique_name"),
            _choices_check("method", HttpMethod, "endpoints_endpoint_method_valid"),
            models.CheckConstraint(
                condition=(Q(baseline_cron="") & Q(baseline_interval_ms__isnull=False))
                | (~Q(baseline_cron="") & Q(baseline_interval_ms__isnull=True)),
                name="endpoints_endpoint_exactly_one_schedule",
            ),
            models.CheckConstraint(
                condition=Q(baseline_interval_ms__isnull=True)
                | Q(baseline_interval_ms__gte=MIN_INTERVAL_MS),
                name="endpoints_endpoint_interval_at_least_1s",
            ),
            models.CheckConstraint(
                condition=Q(timeout_ms__gte=MIN_TIMEOUT_MS) & Q(timeout_ms__lte=MAX_TIMEOUT_MS),
                name="endpoints_endpoint_timeout_range",
            ),
            models.CheckConstraint(
                condition=Q(max_response_size_kb__gte=1)
                & Q(max_response_size_kb__lte=MAX_RESPONSE_KB),
                name="endpoints_endpoint_response_size_range",
            ),
            models.CheckConstraint(
                condition=Q(min_interval_ms__isnull=True) | Q(min_interval_ms__gte=0),
                name="endpoints_endpoint_min_interval_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(max_interval_ms__isnull=True) | Q(max_interval_ms__gte=0),
                name="endpoints_endpoint_max_interval_not_negative",
            ),
            # A zero or empty bound means "none", so only two real bounds are compared.
            models.CheckConstraint(
                condition=Q(min_interval_ms__isnull=True)
                | Q(max_interval_ms__isnull=True)
                | Q(min_interval_ms=0)
                | Q(max_interval_ms=0)
                | Q(min_interval_ms__lte=F("max_interval_ms")),
                name="endpoints_endpoint_min_le_max",
            ),
            models.CheckConstraint(
                condition=Q(ai_hint_interval_ms__isnull=True)
                | Q(ai_hint_interval_ms__gte=MIN_INTERVAL_MS),
                name="endpoints_endpoint_hint_interval_at_least_1s",
            ),
            *(
                models.CheckConstraint(
                    condition=Q(**{f"{field}__isnull": True})
                    | Q(**{f"{field}__lte": MAX_INTERVAL_MS}),
                    name=f"endpoints_endpoint_{field.removesuffix('_ms')}_at_most_a_year",
                )
                for field in (
                    "baseline_interval_ms",
                    "min_interval_ms",
                    "max_interval_ms",
                    "ai_hint_interval_ms",
                )
            ),
            models.CheckConstraint(
                condition=Q(ai_hint_expires_at__isnull=False)
                | (Q(ai_hint_interval_ms__isnull=True) & Q(ai_hint_next_run_at__isnull=True)),
                name="endpoints_endpoint_hint_has_expiry",
            ),
        ]
        indexes = [
            # Used by planner selection.
            models.Index(
                fields=["next_analysis_at"],
                name="endpoints_endpoint_analysis",
                condition=Q(archived_at__isnull=True),
            ),
            # Used by the notify cycle (notifications/alerts.py): endpoints failing now.
            models.Index(
                fields=["failure_count"],
                name="endpoints_endpoint_failing",
                condition=Q(failure_count__gt=0),
            ),
            # Used by the notify cycle: endpoints paused (now or once).
            models.Index(
                fields=["paused_until"],
                name="endpoints_endpoint_paused",
                condition=Q(paused_until__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job.name}/{self.name}" if self.job_id else self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save the endpoint and its slot. A new endpoint's slot is inserted with it (with
        whatever was set through the properties); then the slot's copies follow the
        endpoint's job and timeout, and a save without ``update_fields`` writes the whole
        slot, as it would have written those columns on the endpoint row."""
        super().save(*args, **kwargs)
        slot = self.slot_to_save()
        update_fields = kwargs.get("update_fields")
        if slot._state.adding:
            slot.save(force_insert=True)
        elif update_fields is None:
            slot.save()
        elif copies := {SLOT_COPIES[name] for name in update_fields if name in SLOT_COPIES}:
            slot.save(update_fields=sorted(copies))

    @property
    def ref(self) -> str:
        return f"{self.job.name}/{self.name}"

    def clean_fields(self, exclude: Any = None) -> None:
        """Shape and type first (``validation.check_endpoint_values``): a value of the
        wrong kind is reported, and Django never converts or compares it."""
        problems = validation.check_endpoint_values(self, exclude or ())
        validation.clean_fields_checked(self, exclude, problems, super().clean_fields)

    def clean(self) -> None:
        """Rules across fields. ``full_clean`` calls it even when a field failed, so each
        comparison reads a field only if it holds a value of its type."""
        errors: dict[str, list[str]] = {}

        def add(field: str, message: str) -> None:
            errors.setdefault(field, []).append(message)

        validation.check_request_limits(self, add)
        validation.check_schedule(self, add, floor=self.tenant_min_interval_ms)
        validation.check_bounds(self, add, floor=self.tenant_min_interval_ms)
        context = policy_context(self)
        validation.check_run_policy(self.run_policy, add, job_policy=self.job_run_policy, **context)
        if self.job_id is not None:  # the job's policy, then its own over it
            layers = [self.job_run_policy, self.run_policy]
            validation.check_overlap_limit(self.job, add, "run_policy", layers)
        validation.check_hint(self, add)
        if "name" not in validation.refused_fields(self) and self._name_taken():
            add(
                "name",
                f"Job {self.job.name!r} already has an endpoint named {self.name!r}; "
                "choose another name.",
            )
        if errors:
            raise ValidationError(errors)

    @property
    def job_run_policy(self) -> dict[str, Any]:  # the defaults under this endpoint's own
        cached = self.job_id is not None or Endpoint.job.is_cached(self)  # type: ignore[attr-defined]
        return self.job.run_policy if cached and self.job is not None else {}

    @property
    def policy(self) -> RunPolicy:
        """The run policy it runs by (``policies.stored_policy``): its job's, overridden by
        its own, as stored."""
        return stored_policy(self.job_run_policy, self.run_policy)

    @property
    def tenant_min_interval_ms(self) -> int:
        """The tenant's shortest interval, once the endpoint has a job (saved or not);
        the governor clamps every plan to it."""
        if self.job_id is None and not Endpoint.job.is_cached(self):  # type: ignore[attr-defined]
            return MIN_INTERVAL_MS
        job = self.job
        return job.tenant.min_interval_ms if job is not None else MIN_INTERVAL_MS

    def _name_taken(self) -> bool:
        # Mirrors endpoints_endpoint_unique_name, blaming the field instead of the pair.
        if not self.job_id or not self.name:
            return False
        twins = Endpoint.objects.filter(job_id=self.job_id, name=self.name)
        return twins.exclude(pk=self.pk).exists() if self.pk else twins.exists()

    def is_paused(self, now: datetime) -> bool:
        return self.paused_until is not None and self.paused_until > now

    def pause_words(self, now: datetime, *, brief: bool = False) -> str:
        """How long its pause lasts, as every interface says it: 'until 2026-03-01 14:30
        UTC (for 2 hours)', or 'until resumed' for the breaker's without a cool-down."""
        assert self.paused_until is not None
        return pause_words(
            self.paused_until,
            now,
            until_resumed=self.pause_source == PauseSource.HELD,
            brief=brief,
        )

    # --- the slot -----------------------------------------------------------------------

    def slot_or_new(self) -> Slot:
        """The endpoint's Slot: the saved one, or for a new endpoint one that ``save``
        will insert."""
        try:
            return self.slot
        except Slot.DoesNotExist:
            slot = Slot()
            self.slot = slot
            return slot

    def slot_to_save(self) -> Slot:
        """The slot, attached to this (saved) endpoint, with its copies up to date."""
        slot = self.slot_or_new()
        slot.endpoint = self
        slot.job_id = self.job_id
        return slot


# The Slot's own fields (read and written through Endpoint properties), and the endpoint
# fields it copies by the names a save may give them.
SLOT_FIELDS = ("last_run_at", "next_run_at", "next_run_source", "locked_until", "claim_token")
SLOT_COPIES = {"job": "job", "job_id": "job"}


class SlotQuerySet(models.QuerySet["Slot"]):
    def overdue(self, now: datetime) -> SlotQuerySet:
        """Due by ``now``, not claimed, in an active job: the scheduler's backlog. Served
        by the partial index ``endpoints_slot_claimable``, like the claim itself."""
        return self.filter(
            claim_token__isnull=True, next_run_at__lte=now, job__status=JobStatus.ACTIVE
        )


class Slot(models.Model):
    """An endpoint's place in the scheduler: when it last ran and runs next, why, and the
    claim lease.

    Kept apart from the wide Endpoint row because the tick claims up to a thousand slots
    in one statement, and a claim writes a new version of every row it takes with an
    entry in each of the table's indexes: a version of this narrow row, with these few
    indexes, costs about half as much as one of the endpoint's (bench/claim_cost.py).
    ``job`` is the endpoint's, copied by ``Endpoint.save``, so the claim reads no endpoint
    row. An archived endpoint's slot has no next run. A claim's lease (``locked_until``)
    is short and renewed by the process that holds it, so it needs no request timeout.
    """

    endpoint = models.OneToOneField(
        Endpoint, on_delete=models.CASCADE, primary_key=True, related_name="slot"
    )
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+", db_index=False)
    # When its last run started. Here rather than on the wide endpoint row, which a run
    # then writes only when its failure count, hints or retry change (bench/README.md).
    last_run_at = models.DateTimeField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    next_run_source = models.CharField(max_length=32, choices=Source.choices, blank=True)
    locked_until = models.DateTimeField(null=True, blank=True)
    claim_token = models.UUIDField(null=True, blank=True)

    objects = SlotQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(next_run_source="") | Q(next_run_source__in=Source.values),
                name="endpoints_slot_source_valid",
            ),
            models.CheckConstraint(
                condition=(Q(locked_until__isnull=True) & Q(claim_token__isnull=True))
                | (Q(locked_until__isnull=False) & Q(claim_token__isnull=False)),
                name="endpoints_slot_lease_complete",
            ),
        ]
        indexes = [
            # Used by the tick claim (engine.claiming.claim_due_endpoints): a claimed slot
            # leaves the index, so the claim costs O(claimed), not O(endpoints) nor
            # O(runs in flight).
            models.Index(
                fields=["next_run_at"],
                name="endpoints_slot_claimable",
                condition=Q(claim_token__isnull=True),
            ),
            # Used by the release of expired leases: leased slots by lease expiry.
            models.Index(
                fields=["locked_until"],
                name="endpoints_slot_leased",
                condition=Q(claim_token__isnull=False),
            ),
            # Used by the claim of jobs with max_concurrent: their due, unleased slots...
            models.Index(
                fields=["job", "next_run_at"],
                name="endpoints_slot_job_due",
                condition=Q(claim_token__isnull=True),
            ),
            # ...and how many of theirs are leased now (the free slots).
            models.Index(
                fields=["job"],
                name="endpoints_slot_job_leased",
                condition=Q(claim_token__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"slot of endpoint {self.endpoint_id}"


class RunQuerySet(models.QuerySet["Run"]):
    def for_user(self, user: Any) -> RunQuerySet:
        if user.is_superuser:
            return self
        return self.filter(endpoint__job__tenant__members=user)

    def stale(self, *, now: datetime) -> RunQuerySet:
        """Runs still marked running whose lease has expired (zombies)."""
        return self.filter(status=Run.Status.RUNNING, lease_expires_at__lt=now)


class Run(models.Model):
    Trigger = RunTrigger

    Status = RunStatus

    # No index of its own: endpoints_run_history and endpoints_run_one_per_slot lead with
    # endpoint_id. Every index costs each run twice (its insert, then its finish).
    endpoint = models.ForeignKey(
        Endpoint, on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.SCHEDULED)
    source = models.CharField(max_length=32, blank=True)
    scheduled_for = models.DateTimeField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    request_method = models.CharField(max_length=8, blank=True)
    request_url = models.CharField(max_length=2000, blank=True)
    response_body = models.JSONField(null=True, blank=True)
    response_truncated = models.BooleanField(default=False)
    response_size_bytes = models.PositiveIntegerField(null=True, blank=True)
    # Only the rate-limit headers and Content-Type (executor.KEPT_RESPONSE_HEADERS); NULL
    # when there were none (or no answer), so rows written by raw SQL need not name it.
    response_headers = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    # Why the run started after its slot, when its host's rate limit held it back
    # (engine.host_limits), in words; "" otherwise.
    delay_reason = models.CharField(max_length=300, blank=True, default="", db_default="")
    attempt = models.PositiveSmallIntegerField(default=1)
    retry_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="retries",
        db_index=False,  # endpoints_run_retries holds the few runs that are retries
        # No constraint in the database: on PostgreSQL the history is partitioned and
        # ``id`` alone is no longer a unique key (migration 0017). Django still sets it
        # NULL when the run it names is deleted; retention unlinks retries itself.
        db_constraint=False,
    )
    claim_token = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # A follow-up's cause: the run of another endpoint it followed. An id, no key, as
    # ``retry_of`` on the partitioned history; retention may have deleted that run.
    caused_by = models.BigIntegerField(null=True, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            _choices_check("status", RunStatus, "endpoints_run_status_valid"),
            _choices_check("trigger", RunTrigger, "endpoints_run_trigger_valid"),
            # Exactly once per slot: a second scheduled run for the same slot cannot exist.
            models.UniqueConstraint(
                fields=["endpoint", "scheduled_for"],
                condition=Q(trigger="scheduled"),
                name="endpoints_run_one_per_slot",
            ),
            # One run per claim for the other attempts too (run now, retries): two
            # deliveries of one claim cannot both start it (engine.running._start_run).
            models.UniqueConstraint(
                fields=["endpoint", "scheduled_for", "attempt"],
                condition=Q(trigger__in=["manual", "retry", "follow-up"]),
                name="endpoints_run_one_per_attempt",
            ),
            # A backfill runs a past slot once (endpoints.backfill): a second backfill of
            # the slot is its next attempt, and only after the first failed.
            models.UniqueConstraint(
                fields=["endpoint", "scheduled_for", "attempt"],
                condition=Q(trigger="backfill"),
                name="endpoints_run_one_backfill_per_slot",
            ),
            models.CheckConstraint(
                condition=Q(attempt__gte=1), name="endpoints_run_attempt_positive"
            ),
        ]
        indexes = [
            # Used by run history per endpoint (admin, planner tools, retention).
            models.Index(fields=["endpoint", "-started_at"], name="endpoints_run_history"),
            # Used by the zombie sweep: only running rows, by lease expiry.
            models.Index(
                fields=["lease_expires_at"],
                name="endpoints_run_in_flight",
                condition=Q(status="running"),
            ),
            # Used by the dashboard and retention: recent runs across endpoints.
            models.Index(fields=["started_at"], name="endpoints_run_started"),
            # Used when runs are deleted (retention), to unlink their retries.
            models.Index(
                fields=["retry_of"],
                name="endpoints_run_retries",
                condition=Q(retry_of__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.endpoint_id} ({self.status})"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.attempt is not None and self.attempt < 1:
            errors["attempt"] = "The attempt number must be at least 1 (the first try is 1)."
        if self.trigger == RunTrigger.SCHEDULED and self._slot_taken():
            errors["scheduled_for"] = (
                "This endpoint already has a scheduled run for this slot; a slot runs once."
            )
        if errors:
            raise ValidationError(errors)

    def _slot_taken(self) -> bool:
        # Mirrors endpoints_run_one_per_slot, blaming the field instead of the constraint.
        if not self.endpoint_id or not self.scheduled_for:
            return False
        twins = Run.objects.filter(
            endpoint_id=self.endpoint_id, scheduled_for=self.scheduled_for, trigger=self.trigger
        )
        return twins.exclude(pk=self.pk).exists() if self.pk else twins.exists()


class HintHistory(models.Model):
    Kind = HintKind

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="hint_history")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    interval_ms = models.BigIntegerField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    paused_until = models.DateTimeField(null=True, blank=True)
    pause_source = models.CharField(
        max_length=16, choices=PauseSource.choices, blank=True, db_default=""
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    session = models.ForeignKey(
        "planner.AnalysisSession",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="hints",
    )

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "hint history"
        constraints = [_choices_check("kind", HintKind, "endpoints_hinthistory_kind_valid")]
        indexes = [models.Index(fields=["endpoint", "-created_at"], name="endpoints_hint_history")]

    def __str__(self) -> str:
        return f"{self.kind} hint for {self.endpoint_id}"


from endpoints.backfill_models import Backfill, BackfillSlot  # noqa: E402, F401 - one registry
