"""The REST API at /api/v1/: authentication, throttling, routers and problem+json errors."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, Throttled
from ninja.errors import ValidationError as NinjaValidationError

from api.auth import (
    AdminSessionAuth,
    ApiKeyAuth,
    KeyRateThrottle,
    bearer_key,
    principal_for_key,
    principal_for_user,
)
from api.errors import PROBLEM_TYPE, InvalidInput, problem_for
from api.openapi import complete
from api.routers import (
    alert_rules,
    audit,
    backfills,
    channels,
    config,
    endpoints,
    health,
    history,
    jobs,
    runs,
    tenants,
)
from endpoints.operations import OperationRefused
from endpoints.version import cronicorn_version

logger = logging.getLogger("cronicorn.api")

UNAUTHORIZED = (
    "Send 'Authorization: Bearer <API key>' (create one in the admin or with "
    "manage.py create_api_key), or log in to the admin; the key may be expired or revoked."
)


def signed_in(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The schema and the docs page, like every route, need a key or an admin session."""

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        raw = bearer_key(request.headers.get("Authorization"))
        principal = principal_for_key(raw) if raw else principal_for_user(request.user)
        if principal is None:
            return problem_response(request, AuthenticationError())
        return view(request, *args, **kwargs)

    return guarded


class CronicornAPI(NinjaAPI):
    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: dict[str, Any] | None = None
    ) -> Any:
        generated = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        return complete(generated)


api = CronicornAPI(
    title="Cronicorn API",
    version=cronicorn_version(),
    auth=[ApiKeyAuth(), AdminSessionAuth()],
    throttle=[KeyRateThrottle()],
    urls_namespace="api",
    docs_decorator=signed_in,
)
for module in (
    jobs,
    endpoints,
    runs,
    history,
    health,
    tenants,
    channels,
    alert_rules,
    config,
    audit,
    backfills,
):
    api.add_router("/", module.router)


def problem_response(request: HttpRequest, exc: Exception) -> HttpResponse:
    if isinstance(exc, AuthenticationError):
        exc = HttpError(401, UNAUTHORIZED)
    if isinstance(exc, Http404):
        exc = HttpError(404, "No such route; see /api/v1/docs.")
    problem = problem_for(exc)
    if problem is None:
        raise exc
    response = HttpResponse(
        json.dumps(problem.model_dump(mode="json")),
        status=problem.status,
        content_type=PROBLEM_TYPE,
    )
    if isinstance(exc, Throttled) and exc.wait:
        response["Retry-After"] = str(int(exc.wait))
    if problem.status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="cronicorn"'
    return response


def _handle(exc_class: type[Exception]) -> None:
    def handler(request: HttpRequest, exc: Any) -> HttpResponse:
        return problem_response(request, exc)

    api.add_exception_handler(exc_class, handler)


def unexpected_error(request: HttpRequest, exc: Any) -> HttpResponse:
    """A bug: logged with its traceback, answered as a problem (never Django's HTML page,
    never a traceback to the client, whatever DEBUG says)."""
    logger.error("API error on %s %s", request.method, request.path, exc_info=exc)
    body = {
        "type": "about:blank",
        "title": "Internal Server Error",
        "status": 500,
        "detail": "Something went wrong on our side; it has been logged. Retry later.",
        "errors": {},
    }
    return HttpResponse(json.dumps(body), status=500, content_type=PROBLEM_TYPE)


api.add_exception_handler(Exception, unexpected_error)

for _exc in (
    HttpError,
    Http404,
    NinjaValidationError,
    InvalidInput,
    DjangoValidationError,
    OperationRefused,
    RequestDataTooBig,
):
    _handle(_exc)
