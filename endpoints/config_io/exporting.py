"""Export: the same format, every secret written as a ``${CRONICORN_SECRET_...}``
reference, so export then import changes nothing."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.apps import apps

from endpoints.config_io.schema import (
    ALERT_KEYS,
    ENDPOINT_KEYS,
    FORMAT_VERSION,
    JOB_KEYS,
    TENANT_KEYS,
    field_default,
    same_value,
)
from endpoints.models import Endpoint, Job, Tenant
from endpoints.progress import Progress, Tally
from endpoints.secrets import (
    is_secret_header,
    replace_url_password,
    url_password,
)

# --- Export ---------------------------------------------------------------------------


def export_config(
    *,
    tenant_names: Iterable[str] = (),
    job_names: Iterable[str] = (),
    progress: Progress | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The document for the selected tenants and jobs (all when empty), and the
    environment variables its secret references name. ``progress`` is told each endpoint
    written (stage "exporting")."""
    tenants = Tenant.objects.prefetch_related("members").order_by("name")
    if tenant_names := list(tenant_names):
        tenants = tenants.filter(name__in=tenant_names)
    job_filter = list(job_names)
    references: list[str] = []
    tally = Tally(progress, "exporting")
    if progress is not None:
        selected = Endpoint.objects.live().filter(job__tenant__in=tenants)
        tally.total = (
            selected.filter(job__name__in=job_filter) if job_filter else selected
        ).count()
    entries = [_export_tenant(tenant, job_filter, references, tally) for tenant in tenants]
    if job_filter:
        entries = [entry for entry in entries if entry.get("jobs")]
    return {"version": FORMAT_VERSION, "tenants": entries}, references


def _export_tenant(
    tenant: Tenant, job_filter: list[str], references: list[str], tally: Tally
) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": tenant.name}
    members = sorted(user.get_username() for user in tenant.members.all())
    if members:
        entry["members"] = members
    for key, spec in TENANT_KEYS.items():
        value = getattr(tenant, spec.model_field)
        if value != field_default(Tenant, spec.model_field):
            entry[key] = spec.to_file(value)
    if tenant.hmac_secret:
        entry["hmac_secret"] = _reference(references, tenant.name, "HMAC_SECRET")
    if channels := _export_channels(tenant, references):
        entry["channels"] = channels
    jobs = tenant.jobs.order_by("name")
    if job_filter:
        jobs = jobs.filter(name__in=job_filter)
    exported = [_export_job(tenant, job, references, tally) for job in jobs]
    if exported:
        entry["jobs"] = exported
    return entry


def _export_channels(tenant: Tenant, references: list[str]) -> list[dict[str, Any]]:
    """Alert channels, each target (a secret) as a reference."""
    if not apps.is_installed("notifications"):
        return []
    model = apps.get_model("notifications", "Channel")
    return [
        {
            "name": channel.name,
            "kind": channel.kind,
            "target": _reference(references, tenant.name, "CHANNEL", channel.name),
            **({} if channel.enabled else {"enabled": False}),
            **({"escalation_only": True} if channel.escalation_only else {}),
        }
        for channel in model.objects.filter(tenant=tenant).order_by("name")
    ]


def _export_job(tenant: Tenant, job: Job, references: list[str], tally: Tally) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": job.name}
    for key, spec in JOB_KEYS.items():
        value = getattr(job, spec.model_field)
        if value != field_default(Job, spec.model_field):
            entry[key] = spec.to_file(value)
    if (alerts := _export_alerts(job=job)) is not None:
        entry["alerts"] = alerts
    endpoints = []
    for endpoint in job.endpoints.live().order_by("name"):
        endpoints.append(_export_endpoint(tenant, job, endpoint, references))
        tally.add()
    if endpoints:
        entry["endpoints"] = endpoints
    return entry


def _export_alerts(**owner: Any) -> dict[str, Any] | None:
    """The alert rule of a job or an endpoint (only the keys that differ from the
    defaults); None when it has none."""
    if not apps.is_installed("notifications"):
        return None
    model = apps.get_model("notifications", "AlertRule")
    rule = model.objects.filter(**owner).first()
    if rule is None:
        return None
    return {
        key: spec.to_file(getattr(rule, spec.model_field))
        for key, spec in ALERT_KEYS.items()
        if getattr(rule, spec.model_field) != field_default(model, spec.model_field)
    }


def _export_endpoint(
    tenant: Tenant, job: Job, endpoint: Endpoint, references: list[str]
) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": endpoint.name}
    for key, spec in ENDPOINT_KEYS.items():
        value = getattr(endpoint, spec.model_field)
        if not same_value(spec.model_field, value, field_default(Endpoint, spec.model_field)):
            entry[key] = spec.to_file(value)
    secret = endpoint.secret_header_names
    if "headers" in entry:
        entry["headers"] = {
            header: _reference(references, tenant.name, job.name, endpoint.name, header)
            if is_secret_header(header, secret)
            else value
            for header, value in endpoint.headers.items()
        }
    if (alerts := _export_alerts(endpoint=endpoint)) is not None:
        entry["alerts"] = alerts
    if url_password(endpoint.url):
        password = _reference(references, tenant.name, job.name, endpoint.name, "URL_PASSWORD")
        entry["url"] = replace_url_password(endpoint.url, password)
    return entry


def _reference(references: list[str], *parts: str) -> str:
    name = secret_reference_name(*parts)
    references.append(name)
    return "${" + name + "}"


def secret_reference_name(*parts: str) -> str:
    """The environment variable export names for a secret (tenant, job, endpoint, header)."""
    return re.sub(r"[^A-Za-z0-9]+", "_", "_".join(("CRONICORN_SECRET", *parts))).upper().strip("_")
