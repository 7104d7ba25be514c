"""Configuration as code through the API: export the caller's tenants as the file
``manage.py import_endpoints`` reads, and import such a file (``endpoints/config_io``, the
one owner of the format and its checks).

An API key imports into its own tenant only: a tenant the file names that is not the
caller's does not exist for it (404, as every lookup), and a tenant's own settings,
members and signing secret stay the admin's (a plan that would change them is refused).
The file's ``${CRONICORN_SECRET_...}`` references take their values from the request, never
from the server's environment, which holds other tenants' secrets."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from ninja import Router
from ninja.errors import HttpError

from api.auth import Principal, tenants_of
from api.config_schemas import ConfigExport, ConfigImportIn, ConfigImportOut, Format
from api.errors import InvalidInput
from api.operations import operation
from endpoints.config_io.documents import ConfigError, dump_document, load_document
from endpoints.config_io.exporting import export_config
from endpoints.config_io.importing import ImportPlan, import_document
from endpoints.config_io.schema import FORMAT_VERSION
from endpoints.jsonb import unencodable_problem

router = Router(tags=["config"])
ACTIONS = ("created", "updated", "archived", "unchanged")


@operation(router, "get", "/config", name="export_config", response=ConfigExport)
def export_configuration(
    principal: Principal, format: Format = "yaml", job: str | None = None
) -> ConfigExport:
    """Export the caller's tenants, jobs and live endpoints as a configuration file (the
    format import_config reads); secrets are written as ${CRONICORN_SECRET_...} references."""
    if job and ("\x00" in job or unencodable_problem(job)):  # PostgreSQL's text refuses both
        raise InvalidInput({"job": ["A job's name holds no NUL and only valid Unicode."]})
    names = list(tenants_of(principal).values_list("name", flat=True))
    document: dict[str, Any] = {"version": FORMAT_VERSION, "tenants": []}
    references: list[str] = []
    if names:
        document, references = export_config(tenant_names=names, job_names=[job] if job else [])
    if job and not document["tenants"]:
        raise InvalidInput(
            {"job": [f"No job named {job!r} in your tenant; leave job out for all."]}
        )
    return ConfigExport(
        format=format,
        text=dump_document(document, fmt=format),
        secret_references=sorted(set(references)),
    )


@operation(
    router,
    "post",
    "/config/import",
    name="import_config",
    response=ConfigImportOut,
    repeatable=True,
)
def import_configuration(principal: Principal, payload: ConfigImportIn) -> ConfigImportOut:
    """Apply a configuration file to the caller's tenants: create or update its jobs and
    endpoints (matched by name), all or nothing; with dry_run, only say what would change.
    Problems are listed with their place in the file."""
    try:
        document = load_document(payload.text, fmt=payload.format)
        _refuse_other_tenants(principal, document)
        plan = import_document(
            document,
            environ=payload.secrets,
            now=timezone.now(),
            prune=payload.prune,
            dry_run=payload.dry_run,
            admit=None if principal.tenant_ids is None else _keeps_tenants,
            actor=principal.actor,
        )
    except ConfigError as exc:
        raise InvalidInput({"text": list(exc.problems)}) from None
    return _answer(plan, dry_run=payload.dry_run)


def _refuse_other_tenants(principal: Principal, document: Any) -> None:
    """Before any planning, which would read (and describe) the named tenants."""
    if principal.tenant_ids is None or not isinstance(document, dict):
        return
    mine = set(tenants_of(principal).values_list("name", flat=True))
    tenants = document.get("tenants")
    for entry in tenants if isinstance(tenants, list) else []:
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name not in mine:
            raise HttpError(
                404,
                f"No tenant named {name!r} (or not in your tenant); a key imports into "
                f"its own tenant: {', '.join(sorted(mine))}.",
            )


def _keeps_tenants(plan: ImportPlan) -> list[str]:
    return [
        f"tenants[{change.label}]: a tenant's settings, members and signing secret are "
        "changed in the admin, not with an API key; leave them out of the file or as they are"
        for change in plan.changes
        if change.kind == "tenant" and change.action != "unchanged"
    ]


def _answer(plan: ImportPlan, *, dry_run: bool) -> ConfigImportOut:
    return ConfigImportOut.model_validate(
        {
            "dry_run": dry_run,
            "counts": {action: plan.count(action) for action in ACTIONS},
            "changes": [
                {
                    "kind": change.kind,
                    "name": change.label,
                    "action": change.action,
                    "fields": [{"name": f.name, "old": f.old, "new": f.new} for f in change.fields],
                }
                for change in plan.changes
            ],
            "warnings": plan.warnings,
        }
    )
