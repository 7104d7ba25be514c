"""The REST API over HTTP with the standard library: one call per documented operation
(``ROUTES``: operation id to method and path, checked against the served OpenAPI document
by tests/cli/test_openapi_routes.py), answers as JSON, failures as the API's problem
details."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

API_PREFIX = "/api/v1"
USER_AGENT = "cronicorn-cli"

# The operations the verbs call, as /api/v1/openapi.json documents them.
ROUTES: dict[str, tuple[str, str]] = {
    "list_endpoints": ("GET", "/endpoints"),
    "get_endpoint": ("GET", "/endpoints/{endpoint_id}"),
    "preview_runs": ("GET", "/endpoints/{endpoint_id}/preview"),
    "list_endpoint_runs": ("GET", "/endpoints/{endpoint_id}/runs"),
    "pause_endpoint": ("POST", "/endpoints/{endpoint_id}/pause"),
    "resume_endpoint": ("POST", "/endpoints/{endpoint_id}/resume"),
    "set_hint": ("POST", "/endpoints/{endpoint_id}/hint"),
    "clear_hints": ("POST", "/endpoints/{endpoint_id}/clear-hints"),
    "run_endpoint_now": ("POST", "/endpoints/{endpoint_id}/run"),
    "test_endpoint": ("POST", "/endpoints/{endpoint_id}/test"),
    "export_config": ("GET", "/config"),
    "import_config": ("POST", "/config/import"),
    "start_backfill": ("POST", "/backfills"),
    "get_backfill": ("GET", "/backfills/{backfill_id}"),
    "cancel_backfill": ("POST", "/backfills/{backfill_id}/cancel"),
}


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is refused, not followed: urllib would send the Authorization header
    (the key) on to wherever it points, another host included."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


class Unreachable(Exception):
    """No answer from the server: a wrong URL, a server down, a network in the way."""


class Refused(Exception):
    """The server answered with an error: its problem details (RFC 9457)."""

    def __init__(self, status: int, problem: dict[str, Any], retry_after: str | None) -> None:
        super().__init__(problem.get("detail") or problem.get("title") or f"HTTP {status}")
        self.status = status
        self.problem = problem
        self.retry_after = retry_after


@dataclass(frozen=True)
class Client:
    url: str  # the server's base URL, e.g. https://cron.example.com
    key: str
    timeout: float = 60.0

    @property
    def api_url(self) -> str:
        base = self.url.rstrip("/")
        return base if base.endswith(API_PREFIX) else base + API_PREFIX

    def call(
        self,
        operation: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        **path: Any,
    ) -> Any:
        """Call a documented operation; its JSON answer. Raises Refused or Unreachable."""
        method, template = ROUTES[operation]
        return self.request(method, template.format(**path), query=query, body=body)

    def request(
        self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None
    ) -> Any:
        params = {k: v for k, v in (query or {}).items() if v is not None}
        url = self.api_url + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - http(s) checked by config
        request.add_header("Authorization", f"Bearer {self.key}")
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", USER_AGENT)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with _OPENER.open(request, timeout=self.timeout) as response:
                return _json(response.read())
        except urllib.error.HTTPError as error:
            raise Refused(error.code, _problem(error), error.headers.get("Retry-After")) from None
        except urllib.error.URLError as error:
            raise Unreachable(f"{self.url}: {error.reason}") from None
        except TimeoutError:
            raise Unreachable(f"{self.url}: no answer within {self.timeout:g} s") from None
        except OSError as error:  # a connection reset mid-answer
            raise Unreachable(f"{self.url}: {error}") from None


def _json(raw: bytes) -> Any:
    return json.loads(raw) if raw else None


def _problem(error: urllib.error.HTTPError) -> dict[str, Any]:
    if 300 <= error.code < 400:
        where = error.headers.get("Location", "elsewhere")
        return {
            "title": error.reason,
            "status": error.code,
            "detail": f"The server redirects to {where}; set CRONICORN_URL (or the profile's "
            "url) to the address it names (the key is never sent on to a redirect).",
        }
    raw = error.read()
    try:
        problem = json.loads(raw)
    except ValueError:
        problem = None
    if isinstance(problem, dict):
        return problem
    # Not the API's answer (a proxy's page, a wrong URL): its first words.
    text = raw.decode("utf-8", "replace").strip()[:200]
    return {"title": error.reason, "status": error.code, "detail": text or str(error.reason)}
