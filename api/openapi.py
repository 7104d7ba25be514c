"""The OpenAPI document as the contract: what ninja generates from the operations and
schemas, completed with what it cannot know.

- Errors are served as ``application/problem+json``; each operation lists the statuses it
  can answer (400 "Cannot parse request body" where it takes a body, 403 on writes, 409
  where an operation can be refused, 413, 414 and 431 at the web server's limits...),
  each with a description and an example.
- Path and query parameters carry their description and bounds (api/parameters.py, the
  table the MCP tools read too); ``Idempotency-Key`` is documented where it is honoured.
- Every operation has an example answer (built from its schema) and every body an
  example request (the schemas' own ``examples``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from api.errors import PROBLEM_TYPE
from api.operations import MAX_IDEMPOTENCY_KEY, OPERATIONS, Operation
from api.parameters import json_schema_bounds, parameter_info

DESCRIPTION = """\
Manage Cronicorn's jobs, endpoints, hints, runs and alerts: the same operations as the
admin, the management commands and the MCP tools, through the same validation.

**Authentication.** Send `Authorization: Bearer <API key>` (create one in the admin or with
`manage.py create_api_key`). A key belongs to one tenant and sees only its objects;
another tenant's answer 404. A read-only key may only GET (writes answer 403).

**Conventions.** Durations are milliseconds, times ISO 8601 (UTC when no offset is given).
Lists are paginated by cursor: pass `next_cursor` back as `?cursor=` until it is null.
Unknown query parameters and unknown body fields are refused (422), so a typo never passes
for a filter. Every error is an RFC 9457 problem (`application/problem+json`) whose
`errors` name each wrong field with what to do.
"""

TAGS = [
    {"name": "jobs", "description": "Groups of endpoints that pause and archive together."},
    {"name": "endpoints", "description": "The HTTP calls, their schedules and hints."},
    {"name": "runs", "description": "What happened at each call, newest first."},
    {"name": "history", "description": "Hint history and the planner's analysis sessions."},
    {"name": "health", "description": "The scheduler's status, an endpoint's health, stats."},
    {"name": "tenant", "description": "Limits, usage and the request-signing secret."},
    {"name": "alert channels", "description": "Where alerts go (email, webhook, Apprise)."},
    {"name": "alert rules", "description": "When a job's or an endpoint's alerts go out."},
    {"name": "config", "description": "Configuration as code: export and import the file."},
]

ERROR_DESCRIPTIONS = {
    400: "The body is not JSON (Cannot parse request body).",
    401: "No usable API key: missing, unknown, expired or revoked.",
    403: "The key is read-only (or an admin session's CSRF token is missing).",
    404: "No such object among the caller's tenants (or no such route).",
    409: "Refused in the object's current state (e.g. run now on an archived endpoint), "
    "or a request with the same Idempotency-Key is still running.",
    413: f"The body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.",
    414: f"The request line (method, path and query) is over "
    f"{settings.CRONICORN_WEB_MAX_REQUEST_LINE} bytes.",
    422: "A field or parameter is invalid; errors names each one.",
    429: "Too many requests for this key; retry after Retry-After seconds.",
    431: f"More than {settings.CRONICORN_WEB_MAX_HEADERS} headers, or one over "
    f"{settings.CRONICORN_WEB_MAX_HEADER_BYTES} bytes.",
}
ERROR_EXAMPLES: dict[int, dict[str, Any]] = {
    400: {"detail": "Cannot parse request body"},
    401: {
        "detail": "Send 'Authorization: Bearer <API key>' (create one in the admin or with "
        "manage.py create_api_key), or log in to the admin; the key may be expired or revoked."
    },
    403: {"detail": "This API key is read-only; use a key with the write scope."},
    404: {"detail": "No endpoint with id 42 (or not in your tenant)."},
    409: {"detail": "Endpoint shop/health is archived; archived endpoints cannot run."},
    413: {
        "detail": f"The request body is over the {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes "
        "the API reads; send less."
    },
    414: {
        "detail": "The request line (method, path and query) is over the "
        f"{settings.CRONICORN_WEB_MAX_REQUEST_LINE} bytes this server reads; shorten the "
        "query (a search, a cursor) or the path."
    },
    422: {
        "detail": "The input is invalid; fix the fields listed.",
        "errors": {
            "name": ["Names cannot contain '/': it separates job and endpoint in job/endpoint."]
        },
    },
    429: {"detail": "Too many requests for this key; retry in 12 s."},
    431: {
        "detail": "The request's headers are over this server's limits (at most "
        f"{settings.CRONICORN_WEB_MAX_HEADERS} headers of at most "
        f"{settings.CRONICORN_WEB_MAX_HEADER_BYTES} bytes each); send fewer or shorter ones."
    },
}


def complete(document: dict[str, Any]) -> dict[str, Any]:
    """The document ninja generated (fresh at each call), completed in place."""
    document["info"]["description"] = DESCRIPTION
    document["tags"] = TAGS
    by_id = {op.name: op for op in OPERATIONS}
    schemas = document.get("components", {}).get("schemas", {})
    for item in document["paths"].values():
        for method, operation in item.items():
            op = by_id.get(operation.get("operationId", ""))
            if op is None or method not in ("get", "post", "patch", "put", "delete"):
                continue
            _parameters(op, operation)
            _responses(op, operation, schemas)
            # The MCP tool's hints, for a client that builds tools from this document
            # (``cronicorn mcp``, cli/mcp_proxy.py), as the in-process server has them.
            operation["x-mcp-hints"] = {k: v for k, v in op.annotations.items() if k != "title"}
            _request_example(operation, schemas)
    return document


def _parameters(op: Operation, operation: dict[str, Any]) -> None:
    for parameter in operation.get("parameters", []):
        info = parameter_info(parameter["name"], op)
        if "description" in info:
            parameter["description"] = info["description"]
        bounds = json_schema_bounds(parameter["name"], op)
        schema = parameter["schema"]
        if bounds:
            for branch in schema.get("anyOf", [schema]):
                numeric = {k: v for k, v in bounds.items() if k in ("minimum", "maximum")}
                if branch.get("type") == "integer":
                    branch.update(numeric)
                if branch.get("type") == "string" and "maxLength" in bounds:
                    branch["maxLength"] = bounds["maxLength"]
        if parameter["in"] == "query" and "example" not in parameter:
            example = _parameter_example(parameter["name"], schema)
            if example is not None:
                parameter["example"] = example
    if op.idempotent:
        operation.setdefault("parameters", []).append(
            {
                "in": "header",
                "name": "Idempotency-Key",
                "required": False,
                "description": "Makes a retry safe: a second request with the same key (from "
                "the same API key, within 24 h) does nothing again and gets the first answer, "
                "marked Idempotent-Replayed: true. The same key with a different request is a "
                "422. Ignored for an admin session.",
                "schema": {"type": "string", "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY},
                "example": "orders-health-2026-03-01",
            }
        )


def _parameter_example(name: str, schema: dict[str, Any]) -> Any:
    examples = {"limit": 20, "status": None, "since": "2026-03-01T00:00:00Z"}
    if name in examples:
        value = examples[name]
        if value is None:
            enum = next((b["enum"] for b in schema.get("anyOf", [schema]) if "enum" in b), None)
            return enum[0] if enum else None
        return value
    return None


def _statuses(op: Operation) -> list[int]:
    # 414 and 431: the web server's own limits (settings.CRONICORN_WEB_*), on any request.
    statuses = [401, 414, 422, 429, 431]
    if op.body is not None or op.query_names & {"cursor", "search"}:
        statuses.append(400)
    if op.body is not None:
        statuses.append(413)
    if op.write:
        statuses += [403, 409]
    elif op.method != "get":
        statuses.append(403)  # a POST that only reads: a session's CSRF check
    names_object = "{" in op.path or op.body is not None or op.query_names & {"job_id"}
    if names_object:
        statuses.append(404)
    if op.idempotent:
        statuses.append(409)
    return sorted(set(statuses))


def _responses(op: Operation, operation: dict[str, Any], schemas: dict[str, Any]) -> None:
    # ninja's keys are ints; the document's are strings (as JSON writes them anyway).
    success = {str(code): value for code, value in operation["responses"].items()}.get(
        str(op.status)
    )
    responses: dict[str, Any] = {str(op.status): success} if success is not None else {}
    operation["responses"] = responses
    if success is not None:
        content = success.get("content", {}).get("application/json")
        if content is not None:
            content["example"] = example_of(content["schema"], schemas)
        if op.idempotent:
            success["headers"] = {
                "Idempotent-Replayed": {
                    "description": "true when this is the stored answer to an earlier "
                    "request with the same Idempotency-Key.",
                    "schema": {"type": "string", "enum": ["true"]},
                }
            }
    for status in _statuses(op):
        description = ERROR_DESCRIPTIONS[status]
        if status == 400:
            description = " ".join(
                reason
                for reason, applies in (
                    ("The body is not JSON (Cannot parse request body).", op.body is not None),
                    ("The cursor is not one this API gave out.", "cursor" in op.query_names),
                    ("The search text is too long.", "search" in op.query_names),
                )
                if applies
            )
        response: dict[str, Any] = {
            "description": description,
            "content": {
                PROBLEM_TYPE: {
                    "schema": {"$ref": "#/components/schemas/Problem"},
                    "example": {
                        "type": "about:blank",
                        "title": _phrase(status),
                        "status": status,
                        "errors": {},
                        **ERROR_EXAMPLES[status],
                    },
                }
            },
        }
        if status == 429:
            response["headers"] = {
                "Retry-After": {"description": "Seconds to wait.", "schema": {"type": "string"}}
            }
        if status == 401:
            response["headers"] = {
                "WWW-Authenticate": {
                    "description": 'Bearer realm="cronicorn"',
                    "schema": {"type": "string"},
                }
            }
        responses[str(status)] = response


def _phrase(status: int) -> str:
    from http import HTTPStatus

    return HTTPStatus(status).phrase


def _request_example(operation: dict[str, Any], schemas: dict[str, Any]) -> None:
    body = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if body is None:
        return
    schema = _resolve(body["schema"], schemas)
    examples = schema.get("examples")
    body["example"] = examples[0] if examples else example_of(body["schema"], schemas)


def _resolve(schema: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = schemas[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def example_of(schema: dict[str, Any], schemas: dict[str, Any], depth: int = 0) -> Any:
    """A value valid for ``schema``: its own example if it has one, else one built from
    its type, enum and bounds (nullable values left null, lists with one item)."""
    schema = _resolve(schema, schemas)
    if schema.get("examples"):
        return schema["examples"][0]
    if "example" in schema:
        return schema["example"]
    if "enum" in schema:
        return schema["enum"][-1] if schema["enum"][0] == "" else schema["enum"][0]
    if "anyOf" in schema:
        branches = [b for b in schema["anyOf"] if _resolve(b, schemas).get("type") != "null"]
        return example_of(branches[0], schemas, depth) if branches else None
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        if depth > 4:
            return {}
        return {
            name: example_of(sub, schemas, depth + 1)
            for name, sub in schema.get("properties", {}).items()
        }
    if kind == "array":
        return [example_of(schema.get("items", {}), schemas, depth + 1)] if depth < 4 else []
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 0.5))
    if kind == "boolean":
        return True
    if kind == "string":
        if schema.get("format") == "date-time":
            return "2026-03-01T12:00:00Z"
        return "example"
    return None
