"""Every failure as an RFC 9457 problem: one mapping for the REST API and the MCP tools."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from ninja.errors import HttpError, Throttled
from ninja.errors import ValidationError as NinjaValidationError

from api.schemas import Problem
from endpoints.operations import OperationRefused
from endpoints.wording import duration_words

PROBLEM_TYPE = "application/problem+json"


class InvalidInput(Exception):
    """Field-level messages from the models' validation (``full_clean`` through a form)."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def problem_for(exc: Exception) -> Problem | None:
    """The problem for an exception the API expects; None for a bug (a 500)."""
    if isinstance(exc, InvalidInput):
        return _problem(422, "The input is invalid; fix the fields listed.", exc.errors)
    if isinstance(exc, DjangoValidationError):
        errors = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
        return _problem(422, "The input is invalid; fix the fields listed.", errors)
    if isinstance(exc, NinjaValidationError):
        return _problem(
            422, "The input is invalid; fix the fields listed.", readable_errors(exc.errors)
        )
    if isinstance(exc, OperationRefused):
        return _problem(409, str(exc))
    if isinstance(exc, Throttled):
        detail = getattr(exc, "detail", f"Too many requests for this key; retry in {exc.wait} s.")
        return _problem(429, detail)
    if isinstance(exc, HttpError):
        return _problem(exc.status_code, str(exc))
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return _problem(
            413, f"The request body is over the {limit} bytes the API reads; send less."
        )
    return None


def _problem(status: int, detail: str, errors: dict[str, list[str]] | None = None) -> Problem:
    return Problem(
        title=HTTPStatus(status).phrase, status=status, detail=detail, errors=errors or {}
    )


def readable_errors(errors: Any) -> dict[str, list[str]]:
    """pydantic's errors as messages per field (dotted path), without the rejected value
    or pydantic's documentation links."""
    fields: dict[str, list[str]] = {}
    for error in errors:
        # ninja's locations start with where the value came from: body, query, path.
        loc = [str(part) for part in error.get("loc", ()) if part not in ("body", "query", "path")]
        if loc and loc[0] == "payload":
            loc = loc[1:]
        field = ".".join(loc) or "__all__"
        fields.setdefault(field, []).append(_message(error, field))
    return fields


# pydantic's range errors, said as the forms say them (a duration in words, its unit).
_BOUNDS = {
    "less_than_equal": ("le", "at most", "smaller"),
    "less_than": ("lt", "less than", "smaller"),
    "greater_than_equal": ("ge", "at least", "larger"),
    "greater_than": ("gt", "more than", "larger"),
}


def _message(error: Any, field: str) -> str:
    kind = error.get("type")
    if kind == "extra_forbidden":
        return "Unknown field; remove it (check its spelling)."
    if kind == "missing":
        return "Required; give a value."
    if kind in _BOUNDS and isinstance(bound := error.get("ctx", {}).get(_BOUNDS[kind][0]), int):
        _, relation, way = _BOUNDS[kind]
        return f"Must be {relation} {_bound_words(field, bound)}; give a {way} value."
    message = str(error.get("msg", "Invalid value.")).removeprefix("Value error, ")
    # The rejected value is left out: it may be a secret header.
    return message if message.endswith(".") else f"{message}."


def _bound_words(field: str, bound: int) -> str:
    if field.endswith("_ms") and bound >= 1000:
        return f"{duration_words(bound)} ({bound} ms)"
    unit = {"_ms": " ms", "_kb": " KB", "_minutes": " minutes"}
    return f"{bound}{next((u for end, u in unit.items() if field.endswith(end)), '')}"
