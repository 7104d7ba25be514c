"""A real HTTP server on 127.0.0.1 for the engine's tests: it records every request's
arrival and finish times and answers each path as told (status, JSON body, delay, or hold
until released)."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now (for a server a test starts)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON; None means {"ok": true, "path": ..., "n": ...}
    raw: bytes | None = None  # sent as text/plain instead of JSON
    delay: float = 0.0
    hold: threading.Event | None = None  # block until set (bounded by 60 s)
    headers: dict[str, str] = field(default_factory=dict)
    drip: float = 0.0  # send the body one byte at a time, this many seconds apart
    action: Callable[[], object] | None = None  # called on arrival (e.g. move a test clock)


@dataclass(frozen=True)
class Hit:
    path: str
    method: str
    at: float  # time.time() on arrival
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    # time.time() once the answer was written (or the client gave up); None while open.
    finished: float | None = None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = (
        512  # listen() backlog: a burst of connections must not wait on SYN retries
    )

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (a killed worker, a timeout) is what the fault tests do
        # on purpose; socketserver would print a traceback for each one.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class TargetServer:
    def __init__(self, port: int = 0) -> None:
        """On a free port, or on ``port`` (the fault suite's endpoints keep their URLs)."""
        self._lock = threading.Lock()
        self._hits: list[Hit] = []
        self._replies: dict[str, Reply] = {}
        self._server = _Server(("127.0.0.1", port), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def __enter__(self) -> TargetServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for reply in self._replies.values():
            if reply.hold is not None:
                reply.hold.set()
        self._server.shutdown()
        self._server.server_close()

    def url(self, path: str = "/") -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{path}"

    def reply(self, path: str, **kwargs: Any) -> Reply:
        reply = Reply(**kwargs)
        self._replies[path] = reply
        return reply

    def hits(self, path: str | None = None) -> list[Hit]:
        with self._lock:
            return [hit for hit in self._hits if path is None or hit.path == path]

    def wait_for(self, condition: Callable[[], bool], *, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.01)
        return condition()

    def _record(self, hit: Hit) -> tuple[int, int]:
        """Keep the hit; returns its index and how many hits its path has had."""
        with self._lock:
            self._hits.append(hit)
            return len(self._hits) - 1, sum(1 for h in self._hits if h.path == hit.path)

    def _finish(self, index: int) -> None:
        with self._lock:
            self._hits[index] = replace(self._hits[index], finished=time.time())

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out as two writes; with Nagle's algorithm the second
            # waits for the client's delayed ACK (~40 ms) on a kept-alive connection.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                arrived = time.time()
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?")[0]
                hit = Hit(path, self.command, arrived, body, dict(self.headers))
                index, count = server._record(hit)
                try:
                    self._answer(path, count)
                finally:
                    server._finish(index)

            def _answer(self, path: str, count: int) -> None:
                reply = server._replies.get(path, Reply())
                if reply.action is not None:
                    reply.action()
                if reply.hold is not None:
                    reply.hold.wait(timeout=60)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.raw is not None:
                    payload, kind = reply.raw, "text/plain; charset=utf-8"
                else:
                    data = reply.body if reply.body is not None else {"ok": True, "n": count}
                    payload, kind = json.dumps(data).encode(), "application/json"
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self._write(payload, reply.drip)
                except OSError:
                    pass  # the client gave up (timeout, size cap); nothing to tell it

            def _write(self, payload: bytes, drip: float) -> None:
                if not drip:
                    self.wfile.write(payload)
                    return
                for index in range(len(payload)):
                    self.wfile.write(payload[index : index + 1])
                    self.wfile.flush()
                    time.sleep(drip)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        return Handler
