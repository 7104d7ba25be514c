"""The web process's gunicorn worker (cronicorn_site/gunicorn.conf.py): gunicorn's sync
worker, except that a request over the server's own limits (the request line, a header's
size, the number of headers: settings.CRONICORN_WEB_*) is refused with an RFC 9457 problem
like every other API error, as the OpenAPI document says, not with gunicorn's HTML page.

Loaded by gunicorn's arbiter before Django is set up, so it imports none of the project.
"""

from __future__ import annotations

import json
import socket
from http import HTTPStatus
from typing import Any

from gunicorn.config import Config
from gunicorn.http.errors import LimitRequestHeaders, LimitRequestLine
from gunicorn.workers.sync import SyncWorker


def limit_problem(exc: Exception, cfg: Config) -> tuple[int, str] | None:
    """The status and words for a refusal at one of the server's limits; None for any
    other error (gunicorn answers those itself)."""
    if isinstance(exc, LimitRequestLine):
        return 414, (
            f"The request line (method, path and query) is over the {cfg.limit_request_line} "
            "bytes this server reads; shorten the query (a search, a cursor) or the path."
        )
    if isinstance(exc, LimitRequestHeaders):
        return 431, (
            f"The request's headers are over this server's limits (at most "
            f"{cfg.limit_request_fields} headers of at most {cfg.limit_request_field_size} "
            "bytes each); send fewer or shorter ones."
        )
    return None


def problem_response(status: int, detail: str) -> bytes:
    """A complete HTTP response carrying the problem; the connection closes after it."""
    body = json.dumps(
        {
            "type": "about:blank",
            "title": HTTPStatus(status).phrase,
            "status": status,
            "detail": detail,
            "errors": {},
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/problem+json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class ProblemWorker(SyncWorker):
    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: Exception) -> None:
        problem = limit_problem(exc, self.cfg)
        if problem is None:
            super().handle_error(req, client, addr, exc)
            return
        self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
        try:
            client.sendall(problem_response(*problem))
        except OSError:
            self.log.debug("Failed to send error message.")
