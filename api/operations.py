"""One definition per API operation gives both its REST route and its MCP tool.

``@operation(router, "post", "/endpoints/{endpoint_id}/pause", name="pause_endpoint", ...)``
on ``def pause(principal, endpoint_id: int, payload: PauseIn) -> EndpointOut`` registers a
ninja route (the principal comes from ``request.auth``) and records the operation for
the MCP server (api/mcp_server.py), which exposes it as a tool with the same parameters
and schemas. Both call ``invoke``, so the write check is made in one place.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, get_type_hints

from django.db import IntegrityError
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Router, Status
from ninja.errors import HttpError
from pydantic import BaseModel

from api.auth import Principal
from api.errors import InvalidInput
from api.fair_share import cpu_budget, in_flight
from api.models import IdempotentRequest
from api.schemas import Problem

IDEMPOTENCY_WINDOW = timedelta(hours=24)
MAX_IDEMPOTENCY_KEY = 200  # IdempotentRequest.key's max_length
ERRORS = {code: Problem for code in (401, 403, 404, 409, 422, 429)}


@dataclass(frozen=True)
class Operation:
    name: str
    method: str
    path: str
    fn: Callable[..., Any]
    params: tuple[inspect.Parameter, ...]
    response: Any
    status: int
    idempotent: bool  # takes an Idempotency-Key (a create or a run)
    destructive: bool = False  # a POST that loses data or access with no way back
    repeatable: bool = False  # the same call again changes nothing more (MCP idempotentHint)
    calls_out: bool = False  # reaches the tenant's own URLs (MCP openWorldHint)
    reads_only: bool = False  # a POST that saves nothing (a preview of a change)

    @property
    def write(self) -> bool:
        """Every method but GET changes something, and needs a write key; but a POST that
        only reads (its body is too large or structured for a query)."""
        return self.method != "get" and not self.reads_only

    @property
    def annotations(self) -> dict[str, Any]:
        """The MCP tool's hints, from the HTTP method and the operation's kind alone: a GET
        only reads; a DELETE destroys, as does a POST marked destructive."""
        return {
            "title": self.summary,
            "read_only_hint": not self.write,
            "destructive_hint": self.method == "delete" or self.destructive,
            "idempotent_hint": self.repeatable,
            "open_world_hint": self.calls_out,
        }

    @property
    def description(self) -> str:
        return inspect.cleandoc(self.fn.__doc__ or self.name)

    @property
    def summary(self) -> str:
        return self.description.split("\n\n")[0].replace("\n", " ")

    @property
    def body(self) -> type[BaseModel] | None:
        """The request body's schema, if the operation takes one."""
        for p in self.params:
            if isinstance(p.annotation, type) and issubclass(p.annotation, BaseModel):
                return p.annotation
        return None

    @property
    def query_names(self) -> frozenset[str]:
        """The query parameters: neither in the path nor the body."""
        return frozenset(
            p.name
            for p in self.params
            if "{" + p.name + "}" not in self.path
            and not (isinstance(p.annotation, type) and issubclass(p.annotation, BaseModel))
        )


OPERATIONS: list[Operation] = []


def operation(
    router: Router,
    method: str,
    path: str,
    *,
    name: str,
    response: Any,
    status: int = 200,
    idempotent: bool = False,
    destructive: bool = False,
    repeatable: bool | None = None,
    calls_out: bool = False,
    reads_only: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        hints = get_type_hints(fn, include_extras=True)
        params = tuple(
            p.replace(annotation=hints[p.name])
            for p in list(inspect.signature(fn).parameters.values())[1:]
        )
        op = Operation(
            name,
            method,
            path,
            fn,
            params,
            response,
            status,
            idempotent,
            destructive,
            # Reads, changes to given values and deletes: the same call twice is the same.
            reads_only or method in ("get", "patch", "delete")
            if repeatable is None
            else repeatable,
            calls_out,
            reads_only,
        )
        OPERATIONS.append(op)
        router.add_api_operation(
            path,
            [method.upper()],
            _view(op),
            response={status: response, **ERRORS},
            operation_id=name,
            summary=op.summary,
            description=op.description,
        )
        return fn

    return register


def invoke(op: Operation, principal: Principal, arguments: dict[str, Any]) -> Any:
    if op.write:
        principal.require_write()
    principal.require_allowed(op.name)
    return op.fn(principal, **arguments)


def _view(op: Operation) -> Callable[..., Any]:
    def view(request: HttpRequest, **arguments: Any) -> Any:
        principal: Principal = request.auth  # type: ignore[attr-defined]
        refuse_unknown_query(op, request)
        with in_flight(principal), cpu_budget(principal):
            return _answer(op, request, principal, arguments)

    request_param = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    view.__signature__ = inspect.Signature([request_param, *op.params])  # type: ignore[attr-defined]
    view.__name__ = op.name
    return view


def _answer(
    op: Operation, request: HttpRequest, principal: Principal, arguments: dict[str, Any]
) -> Any:
    key = request.headers.get("Idempotency-Key")
    if op.idempotent and key is not None:
        if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
            raise HttpError(
                422,
                f"An Idempotency-Key has 1 to {MAX_IDEMPOTENCY_KEY} characters (at most "
                f"{MAX_IDEMPOTENCY_KEY}): a new one per request, the same one on its "
                "retries; or leave the header out.",
            )
        if principal.api_key_id is not None:
            return _once(op, request, principal, key, arguments)
    return Status(op.status, invoke(op, principal, arguments))


def refuse_unknown_query(op: Operation, request: HttpRequest) -> None:
    """A misspelt or unsupported filter (``?stauts=paused``) would otherwise be ignored and
    the caller would read an unfiltered answer as a filtered one."""
    unknown = sorted(set(request.GET) - op.query_names)
    if unknown:
        takes = ", ".join(sorted(op.query_names)) or "no query parameters"
        raise InvalidInput(
            {name: [f"Unknown query parameter; {op.name} takes {takes}."] for name in unknown}
        )


def _once(
    op: Operation, request: HttpRequest, principal: Principal, key: str, arguments: dict[str, Any]
) -> HttpResponse:
    """Run the operation once per (API key, Idempotency-Key); replay its answer after."""
    assert principal.api_key_id is not None
    now = timezone.now()
    fingerprint = hashlib.sha256(f"{request.method} {request.path} ".encode() + request.body)
    IdempotentRequest.objects.filter(
        api_key_id=principal.api_key_id, key=key, created_at__lt=now - IDEMPOTENCY_WINDOW
    ).delete()
    try:
        record = IdempotentRequest.objects.create(
            api_key_id=principal.api_key_id,
            key=key,
            fingerprint=fingerprint.hexdigest(),
            created_at=now,
        )
    except IntegrityError:
        return _replay(principal, key, fingerprint.hexdigest())
    try:
        result = invoke(op, principal, arguments)
    except Exception:
        record.delete()  # a failed request did nothing: the same key may be retried
        raise
    body = json.dumps(op.response.model_validate(result).model_dump(mode="json")).encode()
    IdempotentRequest.objects.filter(pk=record.pk).update(status_code=op.status, body=body)
    return HttpResponse(body, status=op.status, content_type="application/json")


def _replay(principal: Principal, key: str, fingerprint: str) -> HttpResponse:
    record = IdempotentRequest.objects.get(api_key_id=principal.api_key_id, key=key)
    if record.fingerprint != fingerprint:
        raise HttpError(
            422,
            "This Idempotency-Key was used for a different request; use a new key per request.",
        )
    if record.status_code is None:
        raise HttpError(409, "A request with this Idempotency-Key is still running; retry soon.")
    response = HttpResponse(bytes(record.body or b""), status=record.status_code)
    response["Content-Type"] = "application/json"
    response["Idempotent-Replayed"] = "true"
    return response
