"""What the path and query parameters mean and which values the server takes: one table
that gives both the OpenAPI document's parameters (api/openapi.py) and the MCP tools'
arguments (api/mcp_server.py), so the two never disagree."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from pydantic import Field
from pydantic.fields import FieldInfo

from api.pagination import DEFAULT_LIMIT, MAX_CURSOR_CHARS, MAX_LIMIT
from api.routers.endpoints import MAX_PREVIEW, MAX_SEARCH_CHARS

if TYPE_CHECKING:
    from api.operations import Operation

# An id is a positive integer (PostgreSQL's bigint); anything else names nothing.
ID_BOUNDS = {"ge": 1, "le": 2**63 - 1}

PARAMETERS: dict[str, dict[str, Any]] = {
    "job_id": {"description": "The job's id (see list_jobs).", **ID_BOUNDS},
    "endpoint_id": {"description": "The endpoint's id (see list_endpoints).", **ID_BOUNDS},
    "run_id": {"description": "The run's id (see list_endpoint_runs).", **ID_BOUNDS},
    "hint_id": {"description": "The hint history entry's id (see list_hints).", **ID_BOUNDS},
    "session_id": {"description": "The analysis session's id (see list_sessions).", **ID_BOUNDS},
    "tenant_id": {"description": "The tenant's id (see list_tenants).", **ID_BOUNDS},
    "channel_id": {"description": "The alert channel's id (see list_channels).", **ID_BOUNDS},
    "rule_id": {"description": "The alert rule's id (see list_alert_rules).", **ID_BOUNDS},
    "backfill_id": {"description": "The backfill's id (see start_backfill).", **ID_BOUNDS},
    "cursor": {
        "description": "next_cursor from the previous page, unchanged; omit for the first page.",
        "max_length": MAX_CURSOR_CHARS,
    },
    "count": {
        "description": f"How many run times to preview, 1..{MAX_PREVIEW} (default 10).",
        "ge": 1,
        "le": MAX_PREVIEW,
    },
    "limit": {
        "description": f"Items per page, 1..{MAX_LIMIT} (default {DEFAULT_LIMIT}).",
        "ge": 1,
        "le": MAX_LIMIT,
    },
    "search": {
        "description": "Only those with this text in their name or URL (any case), "
        f"at most {MAX_SEARCH_CHARS} characters.",
        "max_length": MAX_SEARCH_CHARS,
    },
    "object": {
        "description": "Only the entries of this object: its type and id, e.g. endpoint:12, "
        "job:3 or tenant:1.",
        "max_length": 40,
    },
    "at": {"description": "The past instant asked about (ISO 8601; UTC without an offset)."},
    "since": {"description": "Only runs started at or after this time (ISO 8601)."},
    "until": {"description": "Only runs started before this time (ISO 8601)."},
    # export_config's (api/routers/config.py).
    "format": {"description": "The file's format: yaml (the default) or json."},
    "job": {"description": "Only the job with this name (default: every job).", "max_length": 200},
}
STATUS_DESCRIPTIONS = {
    "list_jobs": "Only jobs in this state.",
    "list_endpoints": "Only endpoints in this state (failing: failed last run; hinted: a "
    "hint is active).",
    "list_endpoint_runs": "Only runs with this outcome.",
    "list_job_runs": "Only runs with this outcome.",
}

# The JSON schema keywords of the bounds above, for the OpenAPI document.
JSON_KEYWORDS = {"ge": "minimum", "le": "maximum", "max_length": "maxLength"}


def parameter_info(name: str, op: Operation) -> dict[str, Any]:
    info = dict(PARAMETERS.get(name, {}))
    if name == "status" and op.name in STATUS_DESCRIPTIONS:
        info["description"] = STATUS_DESCRIPTIONS[op.name]
    return info


def parameter_field(param: inspect.Parameter, op: Operation) -> FieldInfo:
    """The pydantic field of a path or query parameter: default, description, bounds."""
    info = parameter_info(param.name, op)
    default = ... if param.default is inspect.Parameter.empty else param.default
    field: FieldInfo = Field(default, **info)
    return field


def json_schema_bounds(name: str, op: Operation) -> dict[str, Any]:
    info = parameter_info(name, op)
    return {JSON_KEYWORDS[k]: v for k, v in info.items() if k in JSON_KEYWORDS}
