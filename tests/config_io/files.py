"""Configuration files for the import/export tests: entries and documents as a person
writes them, the two commands run in-process, and a snapshot of what the database holds."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from django.core.management import call_command

from endpoints.models import Endpoint, Job, Tenant


def endpoint_entry(name: str = "health", **fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "url": "https://example.com/health",
        "baseline_interval": "5m",
    }
    entry.update(fields)
    return {key: value for key, value in entry.items() if value is not None}


def document(*endpoints: dict[str, Any], job: str = "ops", tenant: str = "Acme") -> dict[str, Any]:
    return {
        "version": 1,
        "tenants": [{"name": tenant, "jobs": [{"name": job, "endpoints": list(endpoints)}]}],
    }


def run_import(path: Path | str, *args: str) -> str:
    out = io.StringIO()
    call_command("import_endpoints", str(path), *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def run_export(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("export_endpoints", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def snapshot() -> list[dict[str, Any]]:
    return [
        {k: v for k, v in row.items() if k != "updated_at"}
        for model in (Tenant, Job, Endpoint)
        for row in model.objects.order_by("pk").values()
    ]
