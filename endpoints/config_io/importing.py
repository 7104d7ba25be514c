"""Import: compare the specs with the database, validate with the model's ``full_clean``
(the single home of the rules), then write everything in one transaction."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import IntegrityError, models, transaction

from endpoints import audit
from endpoints.audit import Actor
from endpoints.config_io.documents import ConfigError, load_document
from endpoints.config_io.schema import (
    ALERT_KEYS,
    CHANNEL_KEYS,
    DEFINITION_FIELDS,
    ENDPOINT_KEYS,
    ESCALATE_TO,
    JOB_KEYS,
    SCHEDULE_CHOICE,
    TENANT_KEYS,
    AlertSpec,
    ChannelSpec,
    Config,
    EndpointSpec,
    JobSpec,
    Key,
    TenantSpec,
    field_default,
    read_config,
    same_value,
)
from endpoints.follow_ups import follow_up_problems, mentions_follow_ups
from endpoints.governor import REPLAN_FIELDS
from endpoints.models import Endpoint, Job, Tenant
from endpoints.operations import archive_endpoint, replan_after_edit, replan_job
from endpoints.progress import Progress, Tally
from endpoints.secrets import (
    MASK,
    is_secret_header,
)

# --- Planning: compare with the database, validate with full_clean --------------------


@dataclass(frozen=True)
class FieldChange:
    name: str
    old: str
    new: str


@dataclass
class Change:
    kind: str  # tenant | job | endpoint
    label: str
    action: str  # created | updated | unchanged | archived
    fields: list[FieldChange] = field(default_factory=list)


@dataclass
class _Write:
    change: Change
    instance: models.Model
    update_fields: list[str]
    members: list[Any] | None = None
    reschedule: bool = False


@dataclass
class ImportPlan:
    changes: list[Change]
    warnings: list[str]
    writes: list[_Write]
    prune: list[Endpoint]

    def count(self, action: str) -> int:
        return sum(1 for change in self.changes if change.action == action)

    @property
    def has_changes(self) -> bool:
        return any(change.action != "unchanged" for change in self.changes)


@dataclass
class _Planner:
    prune: bool
    checked: Tally = field(default_factory=lambda: Tally(None, "checking"))
    problems: list[str] = field(default_factory=list)
    writes: list[_Write] = field(default_factory=list)
    pruned: list[Endpoint] = field(default_factory=list)
    # The channels the file declares, by tenant and channel name: an alert rule's
    # escalate_to names one, maybe created by this very import.
    channels: dict[tuple[str, str], models.Model] = field(default_factory=dict)

    def invalid(
        self, where: str, error: ValidationError, keys: dict[str, str], skip: set[str]
    ) -> None:
        for model_field, messages in error.message_dict.items():
            if model_field in skip:
                continue
            key = keys.get(model_field, model_field)
            location = where if model_field == NON_FIELD_ERRORS else f"{where}.{key}"
            for message in messages:
                self.problems.append(f"{location}: {message}")


def plan_import(
    config: Config, *, prune: bool = False, progress: Progress | None = None
) -> ImportPlan:
    """What importing ``config`` would change; raises ConfigError listing every problem
    (the reader's and the models') if anything is invalid. ``progress`` is told each
    endpoint checked (stage "checking")."""
    total = sum(len(job.endpoints) for tenant in config.tenants for job in tenant.jobs)
    planner = _Planner(prune, Tally(progress, "checking", total), problems=list(config.problems))
    for spec in config.tenants:
        if spec.name:
            _plan_tenant(planner, spec)
    if planner.problems:
        raise ConfigError(planner.problems)
    changes = [write.change for write in planner.writes]
    changes += [Change("endpoint", e.ref, "archived") for e in planner.pruned]
    return ImportPlan(changes, config.warnings, planner.writes, planner.pruned)


def _validate(
    planner: _Planner, instance: models.Model, spec: Any, keys: dict[str, Key], exclude: list[str]
) -> None:
    skip = set(spec.failed)
    if skip & SCHEDULE_CHOICE:
        skip |= SCHEDULE_CHOICE  # "give a cron or an interval" would blame the other one
    try:
        # clean() mirrors every named CHECK with a message that names the field, and
        # Django checks each constraint with its own query (12 per endpoint: most of an
        # import's time), so the constraints are left to the database at write time.
        instance.full_clean(exclude=[*exclude, *skip], validate_constraints=False)
    except ValidationError as exc:
        planner.invalid(spec.where, exc, _file_keys(keys), skip)


def _plan_tenant(planner: _Planner, spec: TenantSpec) -> None:
    tenant = Tenant.objects.filter(name=spec.name).first() or Tenant(name=spec.name)
    old = _snapshot(tenant, spec.values)
    for model_field, value in spec.values.items():
        setattr(tenant, model_field, value)
    _validate(planner, tenant, spec, TENANT_KEYS, exclude=[])
    write = _record(planner, "tenant", spec.name, tenant, old, TENANT_KEYS)
    if spec.members is not None:
        _plan_members(planner, spec, tenant, write)
    for channel_spec in spec.channels:
        if channel_spec.name:
            _plan_channel(planner, tenant, channel_spec)
    live_after = 0
    for job_spec in spec.jobs:
        live_after += _plan_job(planner, tenant, job_spec) if job_spec.name else 0
    if tenant.pk:
        named = {job.name for job in spec.jobs}
        live_after += (
            Endpoint.objects.live().filter(job__tenant=tenant).exclude(job__name__in=named).count()
        )
    _check_follow_ups(planner, spec, tenant)
    if live_after > tenant.max_endpoints:
        planner.problems.append(
            f"{spec.where}: the tenant would have {live_after} endpoints but max_endpoints is "
            f"{tenant.max_endpoints}; raise max_endpoints or declare fewer endpoints"
        )


def _check_follow_ups(planner: _Planner, spec: TenantSpec, tenant: Tenant) -> None:
    """The tenant's follow-ups as the import would leave them: names of endpoints the
    file creates count, and no cycle (``endpoints.follow_ups``)."""
    instances = [write.instance for write in planner.writes]
    jobs = [job for job in instances if isinstance(job, Job) and job.tenant is tenant]
    endpoints = [
        item for item in instances if isinstance(item, Endpoint) and item.job.tenant is tenant
    ]
    policies = [job.run_policy for job in jobs] + [item.run_policy for item in endpoints]
    if not mentions_follow_ups(*policies):
        return
    for problem in follow_up_problems(tenant.pk, endpoints=endpoints, jobs=jobs):
        planner.problems.append(f"{spec.where}: {problem}")


def _plan_channel(planner: _Planner, tenant: Tenant, spec: ChannelSpec) -> None:
    """An alert channel of the notifications app, checked by its model like the rest."""
    if not apps.is_installed("notifications"):
        planner.problems.append(f"{spec.where}: alert channels need the notifications app")
        return
    model = apps.get_model("notifications", "Channel")
    existing = model.objects.filter(tenant=tenant, name=spec.name).first() if tenant.pk else None
    channel = existing or model(tenant=tenant, name=spec.name)
    channel.tenant = tenant
    desired = {"kind": "", "target": "", "enabled": True, "escalation_only": False, **spec.values}
    old = _snapshot(channel, desired)
    for model_field, value in desired.items():
        setattr(channel, model_field, value)
    planner.channels[tenant.name, spec.name] = channel
    _validate(planner, channel, spec, CHANNEL_KEYS, exclude=["tenant"])
    _record(planner, "channel", f"{tenant.name}/{spec.name}", channel, old, CHANNEL_KEYS)


def _plan_members(planner: _Planner, spec: TenantSpec, tenant: Tenant, write: _Write) -> None:
    users = list(get_user_model().objects.filter(username__in=spec.members or []))
    missing = set(spec.members or []) - {user.get_username() for user in users}
    if missing:
        planner.problems.append(
            f"{spec.where}.members: no user named {', '.join(sorted(missing))}; create them "
            "first (manage.py createsuperuser or the admin)"
        )
    current = sorted(tenant.members.values_list("username", flat=True)) if tenant.pk else []
    wanted = sorted(spec.members or [])
    write.members = users
    if current != wanted:
        write.change.fields.append(FieldChange("members", _render(current), _render(wanted)))
        if write.change.action == "unchanged":
            write.change.action = "updated"


def _plan_job(planner: _Planner, tenant: Tenant, spec: JobSpec) -> int:
    """Plan one job and its endpoints; return how many live endpoints it will have."""
    existing = Job.objects.filter(tenant=tenant, name=spec.name).first() if tenant.pk else None
    job = existing or Job(tenant=tenant, name=spec.name)
    job.tenant = tenant  # the planned tenant, so new quotas apply to the checks below
    desired = {k.model_field: field_default(Job, k.model_field) for k in JOB_KEYS.values()}
    desired.update(spec.values)
    old = _snapshot(job, desired)
    for model_field, value in desired.items():
        setattr(job, model_field, value)
    _validate(planner, job, spec, JOB_KEYS, exclude=["tenant"])
    write = _record(planner, "job", f"{tenant.name}/{spec.name}", job, old, JOB_KEYS)
    # Its endpoints' windows may have moved (an active period extended, say).
    write.reschedule = write.change.action == "updated" and "run_policy" in write.update_fields
    if spec.alerts is not None:
        _plan_alerts(planner, spec.alerts, f"{tenant.name}/{spec.name}", job=job)
    current = {e.name: e for e in job.endpoints.all()} if job.pk else {}
    for endpoint_spec in spec.endpoints:
        if endpoint_spec.name:
            _plan_endpoint(planner, job, current.get(endpoint_spec.name), endpoint_spec)
    declared = {endpoint_spec.name for endpoint_spec in spec.endpoints}
    others = [e for e in current.values() if e.name not in declared and e.archived_at is None]
    if planner.prune:
        planner.pruned.extend(others)
        return len(spec.endpoints)
    return len(spec.endpoints) + len(others)


def _plan_endpoint(
    planner: _Planner, job: Job, existing: Endpoint | None, spec: EndpointSpec
) -> None:
    endpoint = existing or Endpoint(job=job, name=spec.name)
    endpoint.job = job
    desired = {name: field_default(Endpoint, name) for name in DEFINITION_FIELDS}
    desired.update(spec.values)
    old = _snapshot(endpoint, [*desired, "archived_at"])
    for model_field, value in desired.items():
        setattr(endpoint, model_field, value)
    endpoint.archived_at = None  # a declared endpoint is live, even if it was archived
    _validate(planner, endpoint, spec, ENDPOINT_KEYS, exclude=["job"])
    write = _record(planner, "endpoint", f"{job.name}/{spec.name}", endpoint, old, ENDPOINT_KEYS)
    moved = set(write.update_fields) & {*REPLAN_FIELDS, "archived_at"}
    write.reschedule = write.change.action == "created" or bool(moved)
    if spec.alerts is not None:
        _plan_alerts(planner, spec.alerts, f"{job.name}/{spec.name}", endpoint=endpoint)
    planner.checked.add()


def _plan_alerts(
    planner: _Planner,
    spec: AlertSpec,
    label: str,
    *,
    job: Job | None = None,
    endpoint: Endpoint | None = None,
) -> None:
    """The alert rule of a job (or an endpoint's override), declarative like the rest: the
    keys left out take their defaults. A job or endpoint without ``alerts`` keeps its rule."""
    if not apps.is_installed("notifications"):
        planner.problems.append(f"{spec.where}: alert rules need the notifications app")
        return
    model = apps.get_model("notifications", "AlertRule")
    owner = job if job is not None else endpoint
    assert owner is not None
    existing = None
    if owner.pk:
        existing = model.objects.filter(**{"job" if job else "endpoint": owner}).first()
    rule = existing or model(job=job, endpoint=endpoint)
    desired = {k.model_field: field_default(model, k.model_field) for k in ALERT_KEYS.values()}
    desired.update(spec.values)
    tenant = job.tenant if job is not None else cast(Endpoint, endpoint).job.tenant
    if isinstance(name := desired[ESCALATE_TO], str):
        desired[ESCALATE_TO] = _escalation_channel(planner, tenant, name, spec.where)
    old = _snapshot(rule, desired)
    for model_field, value in desired.items():
        setattr(rule, model_field, value)
    skip = set(spec.failed)
    try:
        # The job or endpoint may be new (saved just before the rule, in the same
        # transaction): its link is checked by the database, the values here.
        rule.clean_fields(exclude=["job", "endpoint", *skip])
    except ValidationError as exc:
        planner.invalid(spec.where, exc, _file_keys(ALERT_KEYS), skip)
    if (rule.quiet_from is None) != (rule.quiet_until is None):
        planner.problems.append(
            f"{spec.where}: give both quiet_from and quiet_until (quiet hours), or neither"
        )
    if isinstance(rule.after_failures, int) and rule.after_failures < 1:
        planner.problems.append(f"{spec.where}.after_failures: alert after at least 1 failure")
    if rule.escalate_after_minutes and rule.escalate_to is None and ESCALATE_TO not in skip:
        planner.problems.append(
            f"{spec.where}.escalate_to: name the channel escalations go to, or leave out "
            "escalate_after_minutes"
        )
    _record(planner, "alert rule", label, rule, old, ALERT_KEYS)


def _escalation_channel(
    planner: _Planner, tenant: Tenant, name: str, where: str
) -> models.Model | None:
    """The tenant's channel named ``name``: one the file declares, else one it has."""
    if (tenant.name, name) in planner.channels:
        return planner.channels[tenant.name, name]
    model = apps.get_model("notifications", "Channel")
    channel = model.objects.filter(tenant=tenant, name=name).first() if tenant.pk else None
    if channel is None:
        planner.problems.append(
            f"{where}.escalate_to: {tenant.name} has no channel named {name!r}; declare it "
            "under the tenant's channels"
        )
    return channel


def _file_keys(keys: dict[str, Key]) -> dict[str, str]:
    return {spec.model_field: key for key, spec in keys.items()}


def _snapshot(instance: models.Model, names: Iterable[str]) -> dict[str, Any]:
    return {name: getattr(instance, name) for name in names}


def _record(
    planner: _Planner,
    kind: str,
    label: str,
    instance: models.Model,
    old: dict[str, Any],
    keys: dict[str, Key],
) -> _Write:
    if instance.pk is None:
        write = _Write(Change(kind, label, "created"), instance, [])
    else:
        changed = [
            name
            for name, value in old.items()
            if not same_value(name, value, getattr(instance, name))
        ]
        fields = [change for name in changed for change in _describe(name, old, instance, keys)]
        write = _Write(
            Change(kind, label, "updated" if changed else "unchanged", fields), instance, changed
        )
    planner.writes.append(write)
    return write


def _describe(
    name: str, old: dict[str, Any], instance: models.Model, keys: dict[str, Key]
) -> list[FieldChange]:
    new = getattr(instance, name)
    if name == "archived_at":
        return [FieldChange("archived", "yes", "no")]
    if name in ("hmac_secret", "target"):
        return [FieldChange(name, MASK if old[name] else "", MASK if new else "")]
    if name == "headers":
        endpoint = cast(Endpoint, instance)
        secret = {*old.get("secret_header_names", []), *endpoint.secret_header_names}
        return _header_changes(old[name], new, secret)
    file_key = _file_keys(keys).get(name, name)
    to_file = keys[file_key].to_file
    return [FieldChange(file_key, _render(to_file(old[name])), _render(to_file(new)))]


def _header_changes(
    old: dict[str, str], new: dict[str, str], secret: set[str]
) -> list[FieldChange]:
    changes = []
    for header in sorted({*old, *new}):
        before, after = old.get(header), new.get(header)
        if before == after:
            continue
        hidden = is_secret_header(header, secret)
        changes.append(
            FieldChange(
                f"headers.{header}",
                "(absent)" if before is None else MASK if hidden else _render(before),
                "(absent)" if after is None else MASK if hidden else _render(after),
            )
        )
    return changes


def _render(value: Any) -> str:
    if value is None or value == "":
        return "(none)"
    if isinstance(value, str) and value == value.strip():
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def apply_plan(
    plan: ImportPlan,
    *,
    now: datetime,
    actor: Actor = Actor.SYSTEM,
    progress: Progress | None = None,
) -> None:
    """Write ``plan`` in one transaction; new and rescheduled endpoints go through the
    governor. Each tenant, job and endpoint created or updated is an audit entry with the
    changes the plan describes (secrets masked there). ``progress`` is told each object
    written (stage "writing")."""
    written = Tally(progress, "writing", len(plan.writes))
    with transaction.atomic():
        for write in plan.writes:
            written.add()
            instance = write.instance
            if write.change.action == "created":
                instance.save()
            elif write.update_fields:
                stamp = ["updated_at"] if hasattr(instance, "updated_at") else []
                instance.save(update_fields=[*write.update_fields, *stamp])
            if write.members is not None:
                instance.members.set(write.members)  # type: ignore[attr-defined]
            if write.reschedule and isinstance(instance, Job):
                replan_job(instance, now=now)
            elif write.reschedule:
                replan_after_edit(instance, now=now)  # type: ignore[arg-type]
            _audit(write, actor=actor, now=now)
        for endpoint in plan.prune:
            archive_endpoint(endpoint, now=now, actor=actor)


def _audit(write: _Write, *, actor: Actor, now: datetime) -> None:
    change = write.change
    if change.kind not in ("tenant", "job", "endpoint") or change.action == "unchanged":
        return
    fields = [{"field": f.name, "before": f.old, "after": f.new} for f in change.fields]
    audit.record(actor, write.instance, change.action, now=now, changes=fields, reason="import")


def import_config(
    text: str,
    *,
    fmt: str,
    environ: Mapping[str, str],
    now: datetime,
    prune: bool = False,
    dry_run: bool = False,
    admit: Callable[[ImportPlan], list[str]] | None = None,
    progress: Progress | None = None,
    actor: Actor = Actor.SYSTEM,
) -> ImportPlan:
    """Parse, check and (unless ``dry_run``) apply a file.

    Raises ConfigError, having written nothing, when anything in the file is invalid.
    """
    return import_document(
        load_document(text, fmt=fmt),
        environ=environ,
        now=now,
        prune=prune,
        dry_run=dry_run,
        admit=admit,
        progress=progress,
        actor=actor,
    )


def import_document(
    document: Any,
    *,
    environ: Mapping[str, str],
    now: datetime,
    prune: bool = False,
    dry_run: bool = False,
    admit: Callable[[ImportPlan], list[str]] | None = None,
    progress: Progress | None = None,
    actor: Actor = Actor.SYSTEM,
) -> ImportPlan:
    """``import_config`` for an already parsed document (``manage.py demo`` builds one).

    ``admit``: the caller's own refusals of a valid plan (the REST API's: a key changes no
    tenant's settings); any problem it lists is raised as a ConfigError, nothing written."""
    config = read_config(document, environ=environ)
    if dry_run:
        return _admitted(plan_import(config, prune=prune, progress=progress), admit)
    # Planning inside the transaction: what was compared is what gets written.
    try:
        with transaction.atomic():
            plan = _admitted(plan_import(config, prune=prune, progress=progress), admit)
            apply_plan(plan, now=now, actor=actor, progress=progress)
    except IntegrityError as exc:
        # Only a rule the models' clean() does not mirror, or a concurrent edit, gets here.
        raise ConfigError([f"(database): a constraint refused the import: {exc}"]) from None
    return plan


def _admitted(plan: ImportPlan, admit: Callable[[ImportPlan], list[str]] | None) -> ImportPlan:
    problems = admit(plan) if admit else []
    if problems:
        raise ConfigError(problems)
    return plan
