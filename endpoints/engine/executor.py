"""The one HTTP executor: every call to a user's endpoint goes through `perform_request`.

Guarantees (DESIGN.md, "HTTP executor"; Traps 10 and 11):

- **One total deadline** (`timeout_ms`) covers DNS, connect, TLS, sending, the response
  headers and the whole body (one `asyncio.timeout` around all of it), so a server
  dripping one byte at a time is cut off on time.
- **Bounded body**: read as a stream and cut at `max_response_size_kb` (decompressed
  size for gzip/deflate, so a gzip bomb is cut too); the connection is then closed.
  A truncated response is still judged by its status code: a truncated 200 is a success
  flagged `truncated`, because the endpoint did answer and the run did happen.
- **SSRF guard**: only http and https; each host is resolved once, every address is
  checked, and the connection is made to a checked address (no second lookup to
  rebind). The check is aiohttp's resolver, so redirects and every new connection go
  through it; IP literals, which aiohttp connects to without a resolver, are checked
  before each hop. Redirects are followed by hand, at most `max_redirects`, and secret
  headers (declared in `secret_header_names` in any letter case, or named like a
  credential: `endpoints.secrets`) are not sent to another origin.
- **Never raises** for anything the remote side does: every problem becomes a failed or
  timed-out `HttpResult` whose `error` says what happened.

Every request of a run says which slot it is (``SLOT_HEADERS``: the slot's scheduled
time, the run's id, the attempt, the trigger), so a target can make its work idempotent
per slot. Receivers verify HMAC-signed requests by computing
`hex(HMAC-SHA256(secret, timestamp + "." + raw_body))` where `timestamp` is the
`X-Cronicorn-Timestamp` header (Unix seconds) and comparing it with
`X-Cronicorn-Signature`; `X-Cronicorn-Slot-Signature` signs the slot's headers too:
`timestamp + "." + scheduled_for + "." + run_id + "." + attempt + "." + trigger + "." +
raw_body` (README, "Slot identity").

Requests run on asyncio event loops, each on its own thread, with aiohttp: an HTTP
request costs a fraction of the CPU it cost on a pool of threads
(bench/http_client_cost.py). A process has CRONICORN_HTTP_LANES loops ("lanes") and
a tenant's requests all go to one of them (``lane``: the tenant's id), so one tenant's
burst (fifty endpoints in phase, sent or answered together) is a batch of callbacks on
its lane that another tenant's request on another lane does not wait behind: that
thread is given the interpreter within its switch interval (5 ms), where behind the
batch on one loop it waited 7-22 ms (bench/README.md, issue 32). `perform_request`
blocks its caller until the result; `submit_request` returns a future at once, so a
caller can start many. Connections are pooled (keep-alive) in one aiohttp session per
lane and distinct `NetworkPolicy` (in practice one policy per process, built from
settings): a connection opened under a lax policy must never serve a request made under
a strict one. Sessions keep no cookies. httpx provides
URL parsing and joining and the certificate store. Everything here is thread-safe.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import hmac
import json
import logging
import os
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import aiohttp.abc
import httpx
import yarl
from aiohttp.helpers import is_ip_address
from django.conf import settings

from endpoints.engine.bodies import decode_body
from endpoints.engine.guard import (
    AddressGuard,
    BlockedAddressError,
    ExecutorError,
    NetworkPolicy,
    ip_literal,
)
from endpoints.jsonb import storable
from endpoints.secrets import is_secret_header, redact_url
from endpoints.validation import FRAMING_HEADERS, HEADER_NAME, HEADER_VALUE_FORBIDDEN

logger = logging.getLogger("cronicorn.executor")

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

# "skipped": never called (later than its catch-up window; endpoints.engine.running).
ResultStatus = Literal["success", "failure", "timeout", "skipped"]
# How long a blocked caller waits beyond a request's deadline before giving up on the loop.
LOOP_GRACE_SECONDS = 10


@dataclass(frozen=True)
class HttpRequest:
    url: str
    method: str = "GET"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None  # JSON-serialisable value sent as JSON, or None for no body
    timeout_ms: int = 30_000  # total deadline: DNS + connect + headers + body
    max_response_size_kb: int = 100
    hmac_secret: str = ""  # when set, requests carry X-Cronicorn-Timestamp/-Signature
    hmac_previous_secret: str = ""  # during a rotation's grace: a second signature
    # Declared secret headers: with those that look secret, never sent to another origin.
    secret_header_names: tuple[str, ...] = ()
    # The run's slot, sent as SLOT_HEADERS (in their order) and signed with the body.
    slot: tuple[str, str, str, str] | None = None  # scheduled for, run id, attempt, trigger


# The slot identity headers, in the order X-Cronicorn-Slot-Signature signs them.
SLOT_HEADERS = (
    "X-Cronicorn-Scheduled-For",
    "X-Cronicorn-Run-Id",
    "X-Cronicorn-Attempt",
    "X-Cronicorn-Trigger",
)


# The response headers a Run keeps: what a planner can act on (a rate limit's wait and
# budget) and the body's type. Never cookies, credentials or anything else.
KEPT_RESPONSE_HEADERS = (
    "retry-after",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "content-type",
)
KEPT_HEADER_CHARS = 200


@dataclass(frozen=True)
class HttpResult:
    status: ResultStatus  # a RunStatus value
    status_code: int | None
    body: Any  # parsed JSON, else decoded text, None when there was no body
    truncated: bool  # body was cut at max_response_size_kb
    size_bytes: int  # bytes of (decoded) body kept, at most the cap
    duration_ms: int
    error: str  # "" on success, otherwise a message naming the failure kind
    final_url: str
    headers: dict[str, str] = field(default_factory=dict)  # KEPT_RESPONSE_HEADERS found
    sent_at: float | None = None  # when the request started (epoch seconds), if it did


class NotSent(Exception):
    """The request was not sent: the loop reached it after the caller's deadline (a stalled
    process: the run's lease may have passed to another worker meanwhile)."""


_dns_lock = threading.Lock()
_dns_executor: concurrent.futures.ThreadPoolExecutor | None = None


async def _resolve(host: str, port: int) -> list[tuple[str, int, int]]:
    """The host's (address, family, proto) in resolver order. The lookup runs in a
    helper thread; the request's deadline stops waiting for a slow resolver."""
    loop = asyncio.get_running_loop()
    lookup = functools.partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    try:
        infos = await loop.run_in_executor(_dns_pool(), lookup)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ExecutorError(f"could not resolve host '{host}' ({reason})") from exc
    found = {str(info[4][0]): (info[0], info[2]) for info in infos}
    return [(address, family, proto) for address, (family, proto) in found.items()]


def _dns_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _dns_executor
    with _dns_lock:
        if _dns_executor is None:
            _dns_executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=16, thread_name_prefix="cronicorn-dns"
            )
        return _dns_executor


# --- The connection layer, on aiohttp ---


class _GuardedResolver(aiohttp.abc.AbstractResolver):
    """aiohttp asks it for a host's addresses, then connects only to what it returns: each
    name is resolved once and every address checked before any connection is made. (IP
    literals never reach a resolver; `_check_host` checks those.)"""

    def __init__(self, guard: AddressGuard) -> None:
        self._guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        found = await _resolve(host, port)
        self._guard.check(host, [address for address, _family, _proto in found], port)
        flags = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": family,
                "proto": proto,
                "flags": flags,
            }
            for address, family, proto in found
        ]

    async def close(self) -> None:
        pass


class _GuardedConnector(aiohttp.TCPConnector):
    """Notes when the connection is ready, so that a timeout can say what it interrupted,
    and refuses to send a request past its deadline (``_Progress.send_by``)."""

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        connection = await super().connect(req, traces, timeout)
        progress = _progress.get()
        # The last moment before the request's bytes are written: a process stopped
        # (SIGSTOP) between an earlier check and here would send a run whose lease, and
        # slot, may belong to another worker by now (the stalled-worker fault case).
        if progress.send_by is not None and (late := time.time() - progress.send_by) > 0:
            connection.close()
            raise NotSent(f"connected {late:.1f} s after its deadline")
        progress.phase = "waiting for the response headers"
        return connection


class _Client:
    """One of the process's HTTP event loops (a lane), on its own daemon thread, and one
    aiohttp session per policy on it (sessions are only touched from the loop's thread)."""

    def __init__(self, lane: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.sessions: dict[NetworkPolicy, aiohttp.ClientSession] = {}
        name = f"cronicorn-http-{lane}"
        threading.Thread(target=self.loop.run_forever, name=name, daemon=True).start()

    def session(self, policy: NetworkPolicy) -> aiohttp.ClientSession:
        session = self.sessions.get(policy)
        if session is None:
            connector = _GuardedConnector(
                resolver=_GuardedResolver(_guard(policy)),
                ssl=_ssl_context(),
                limit=0,  # concurrency is bounded by the callers
                keepalive_timeout=30.0,
            )
            session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),  # cookies must never cross requests
                auto_decompress=False,  # we decompress, under the size cap
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=None),  # ours: one deadline
                skip_auto_headers=("Content-Type",),
                trust_env=False,  # no proxies or .netrc from the environment
            )
            self.sessions[policy] = session
        return session

    def close(self) -> None:
        """Close every session (and its connections), then stop the loop."""

        async def close_sessions() -> None:
            for session in self.sessions.values():
                await session.close()

        future = asyncio.run_coroutine_threadsafe(close_sessions(), self.loop)
        with contextlib.suppress(Exception):
            future.result(timeout=2)
        self.loop.call_soon_threadsafe(self.loop.stop)


_client_lock = threading.Lock()
_clients: dict[int, _Client] = {}  # by lane, each started at its first request


def _shared_client(lane: int) -> _Client:
    """The event loop of ``lane`` (any integer: a tenant's id)."""
    lane %= settings.CRONICORN_HTTP_LANES
    client = _clients.get(lane)
    if client is None:
        with _client_lock:
            client = _clients.get(lane)
            if client is None:
                client = _clients[lane] = _Client(lane)
    return client


@functools.cache
def _guard(policy: NetworkPolicy) -> AddressGuard:
    return AddressGuard(policy)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def prepare() -> None:
    """Load the TLS trust store now rather than in the process's first request, where
    it held up the event loop, and so the fleet's first slots (py-spy: 0.4 to 0.6 s of a
    starting worker under load, in ``ssl.create_default_context``)."""
    _ssl_context()


def _forget_client_after_fork() -> None:
    # A forked child has no loop thread and must not share its parent's sockets or locks.
    global _client_lock, _dns_lock, _dns_executor
    _clients.clear()
    _client_lock = threading.Lock()
    _dns_lock = threading.Lock()
    _dns_executor = None


def _close_client_at_exit() -> None:
    for client in list(_clients.values()):
        client.close()


os.register_at_fork(after_in_child=_forget_client_after_fork)
atexit.register(_close_client_at_exit)


def _describe_os_error(error: BaseException | None) -> str:
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return str(error)


# --- Performing a request ---


@dataclass
class _Progress:
    """What a failure message needs to know: where we were and how far we got."""

    url: str
    phase: str = "connecting"
    body_bytes: int = 0
    send_by: float | None = None  # the first hop is not sent after this (epoch seconds)


_progress: contextvars.ContextVar[_Progress] = contextvars.ContextVar("cronicorn_progress")


def perform_request(
    request: HttpRequest, *, policy: NetworkPolicy | None = None, lane: int = 0
) -> HttpResult:
    """Call the endpoint described by `request`; never raises for network problems.

    Blocks the calling thread; the request itself runs on the event loop of ``lane``.
    """
    future = submit_request(request, policy=policy, lane=lane)
    try:
        return future.result(timeout=request.timeout_ms / 1000 + LOOP_GRACE_SECONDS)
    except concurrent.futures.TimeoutError:
        future.cancel()
        logger.error("the HTTP event loop did not answer for %s", _loggable_url(request.url))
        return not_called(
            "timeout",
            f"timed out after {request.timeout_ms} ms (the HTTP client did not answer)",
            request.url,
        )


def submit_request(
    request: HttpRequest,
    *,
    policy: NetworkPolicy | None = None,
    at: float | None = None,
    deadline: float | None = None,
    lane: int = 0,
) -> concurrent.futures.Future[HttpResult]:
    """Start the request on the event loop of ``lane`` (the tenant's id: one tenant's
    requests share a loop) and return at once; the future
    resolves with its `HttpResult` (never with a network exception). With ``at`` (epoch
    seconds) the request starts then, never before, timed by the loop itself (the
    dispatcher records a run a little ahead of its slot); past ``deadline`` it is not sent
    at all and the future raises `NotSent`. Log lines of the request carry the caller's
    log context."""
    client = _shared_client(lane)
    future: concurrent.futures.Future[HttpResult] = concurrent.futures.Future()
    policy = policy or NetworkPolicy.from_settings()
    # Runs in a copy of the caller's context (its log context).
    client.loop.call_soon_threadsafe(_start, client, future, request, policy, at, deadline)
    return future


def _start(
    client: _Client,
    future: concurrent.futures.Future[HttpResult],
    request: HttpRequest,
    policy: NetworkPolicy,
    at: float | None,
    deadline: float | None,
) -> None:
    """On the event loop: send ``request`` at ``at``, never before (the loop's timer may
    fire a hair early: it waits again), unless ``deadline`` has passed.

    A module function with its arguments, not a closure that schedules itself: such a
    closure is a reference cycle holding the run's request, future and result, so every
    run became garbage only a full collection frees. At 833 runs/s that was a full
    collection every 1.7 s, 110-150 ms long, during which no request was sent (issue 23).
    """
    if at is not None and (wait := at - time.time()) > 0:
        client.loop.call_later(wait, _start, client, future, request, policy, at, deadline)
        return
    if not future.set_running_or_notify_cancel():
        return
    if deadline is not None and (late := time.time() - deadline) > 0:
        future.set_exception(NotSent(f"reached {late:.1f} s after its deadline"))
        return
    try:
        session = client.session(policy)
    except Exception as exc:  # the caller must hear of it, not wait forever
        future.set_exception(exc)
        return
    task = client.loop.create_task(_perform_on_loop(request, session, policy, deadline))
    task.add_done_callback(functools.partial(_settle, future))


def _settle(future: concurrent.futures.Future[HttpResult], task: asyncio.Task[HttpResult]) -> None:
    if task.cancelled():
        future.set_exception(concurrent.futures.CancelledError())
    elif (exc := task.exception()) is not None:
        future.set_exception(exc)
    else:
        future.set_result(task.result())


async def _perform_on_loop(
    request: HttpRequest,
    session: aiohttp.ClientSession,
    policy: NetworkPolicy,
    deadline: float | None = None,
) -> HttpResult:
    """The request, on the event loop; never raises for network problems (`NotSent`
    when its connection is ready only after ``deadline``)."""
    sent_at = time.time()
    started = time.monotonic()
    progress = _Progress(url=request.url, send_by=deadline)
    _progress.set(progress)
    try:
        async with asyncio.timeout(request.timeout_ms / 1000):
            result = await _perform(request, session, policy, progress)
    except NotSent:
        raise
    except Exception as exc:
        result = _failure_result(exc, request, progress)
    duration_ms = round((time.monotonic() - started) * 1000)
    if logger.isEnabledFor(logging.DEBUG):
        _log_outcome(request, result, progress.url, duration_ms)
    return dataclasses.replace(result, duration_ms=duration_ms, sent_at=sent_at)


def _log_outcome(request: HttpRequest, result: HttpResult, url: str, duration_ms: int) -> None:
    logger.debug(
        "%s %s -> %s %s in %d ms%s",
        request.method.upper(),
        _loggable_url(url),
        result.status,
        result.status_code,
        duration_ms,
        f": {result.error}" if result.error else "",
    )


async def _perform(
    request: HttpRequest,
    session: aiohttp.ClientSession,
    policy: NetworkPolicy,
    progress: _Progress,
) -> HttpResult:
    origin = _target(request.url, "URL")
    progress.url = origin.shown
    _check_request(request)
    method = request.method.upper()
    body = None if request.body is None else _encode_json(request.body)
    timestamp = str(int(time.time()))
    hop = origin
    for _hop in range(policy.max_redirects + 1):
        url = hop.url
        progress.url = hop.shown
        progress.phase = "connecting"
        await _check_host(url, policy)
        foreign = (url.scheme, url.host, url.port) != (
            origin.url.scheme,
            origin.url.host,
            origin.url.port,
        )
        headers = _hop_headers(request, policy, url, body, timestamp=timestamp, foreign=foreign)
        response = await session.request(
            method, hop.wire, headers=headers, data=body, allow_redirects=False
        )
        progress.send_by = None  # sent: the redirects it asks for are the same run
        location = _redirect_location(response)
        if location is None:
            return await _read_result(response, request, progress)
        response.close()
        hop = _target(str(url.join(location)), "redirect Location")
        if response.status in (301, 302, 303) and method != "HEAD":
            method, body = "GET", None
    raise ExecutorError(f"too many redirects (limit {policy.max_redirects})")


@dataclass(frozen=True)
class _Target:
    url: httpx.URL
    shown: str  # without credentials or fragment: what results and logs show
    wire: yarl.URL  # what aiohttp is given (credentials travel as our own header)


@functools.lru_cache(maxsize=4096)
def _target(raw: str, what: str) -> _Target:
    """A URL parsed and checked once: endpoints call the same URLs again and again, and
    parsing was the largest share of the executor's own CPU per request."""
    url = _parse_url(raw, what=what)
    shown = _without_credentials(url)
    return _Target(url, shown, yarl.URL(shown, encoded=True))


async def _check_host(url: httpx.URL, policy: NetworkPolicy) -> None:
    """IP literals are checked here: aiohttp connects to them without asking a resolver.
    Legacy numeric forms (``2130706433``) are resolved to say where they lead, then
    refused by aiohttp if allowed."""
    host = url.host
    port = url.port or (443 if url.scheme == "https" else 80)
    if ip_literal(host) is not None:
        _guard(policy).check(host, [host], port)
    elif is_ip_address(host):
        found = await _resolve(host, port)
        _guard(policy).check(host, [address for address, _family, _proto in found], port)
        raise ExecutorError(f"invalid URL host {host!r}: write IPv4 addresses as a.b.c.d")


def _parse_url(raw: str, *, what: str) -> httpx.URL:
    try:
        url = httpx.URL(raw)
        url.host  # noqa: B018 - decodes xn-- labels: a malformed one (IDNAError) raises here
    except (httpx.InvalidURL, TypeError, UnicodeError) as exc:
        raise ExecutorError(f"invalid {what} {redact_url(raw)!r}: {exc}") from exc
    if url.scheme not in ("http", "https"):
        raise ExecutorError(
            f"unsupported {what} scheme {url.scheme!r} in {redact_url(raw)!r}: only http:// and "
            "https:// URLs can be called"
        )
    if not url.host:
        raise ExecutorError(f"{what} {redact_url(raw)!r} has no host")
    return url


def _check_request(request: HttpRequest) -> None:
    if request.timeout_ms <= 0:
        raise ExecutorError(f"timeout_ms must be positive, got {request.timeout_ms}")
    if request.max_response_size_kb <= 0:
        raise ExecutorError(
            f"max_response_size_kb must be positive, got {request.max_response_size_kb}"
        )
    if not HEADER_NAME.match(request.method):
        raise ExecutorError(f"invalid HTTP method {request.method!r}")
    for name, value in request.headers.items():
        # Messages name the header, never its value: values may be secrets.
        if not HEADER_NAME.match(name):
            raise ExecutorError(f"invalid header name {name!r}: use letters, digits and -")
        if HEADER_VALUE_FORBIDDEN.search(value):
            raise ExecutorError(f"header {name!r} has a control character (e.g. a newline)")


def _encode_json(body: Any) -> bytes:
    try:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        raise ExecutorError(f"request body is not JSON-serialisable: {exc}") from exc


def _hop_headers(
    request: HttpRequest,
    policy: NetworkPolicy,
    url: httpx.URL,
    body: bytes | None,
    *,
    timestamp: str,
    foreign: bool,
) -> dict[str, str]:
    """Headers for one hop. Secret headers (declared or secret-looking) and the
    signature stay with the original origin: a redirect must not hand credentials to
    another host."""
    secret = request.secret_header_names
    headers = {
        name: value
        for name, value in request.headers.items()
        if name.lower() not in FRAMING_HEADERS and not (foreign and is_secret_header(name, secret))
    }
    given = {name.lower() for name in headers}
    defaults = {
        "User-Agent": policy.user_agent,
        "Accept": "*/*",
        "Accept-Encoding": "gzip, deflate",
    }
    if body is not None:
        defaults["Content-Type"] = "application/json"
    if url.username and "authorization" not in given:
        credentials = f"{url.username}:{url.password}".encode()
        defaults["Authorization"] = "Basic " + base64.b64encode(credentials).decode()
    headers.update({k: v for k, v in defaults.items() if k.lower() not in given})
    if request.slot is not None:  # ours, whatever the endpoint's own headers say
        for name in SLOT_HEADERS:
            headers.pop(next((key for key in headers if key.lower() == name.lower()), ""), None)
        headers.update(zip(SLOT_HEADERS, request.slot, strict=True))
    if request.hmac_secret and not foreign:
        secrets = (request.hmac_secret, request.hmac_previous_secret)
        headers.update(_signature_headers(secrets, timestamp, body or b"", request.slot))
    return headers  # aiohttp adds Host and Content-Length


def _signature_headers(
    secrets: Sequence[str],
    timestamp: str,
    body: bytes,
    slot: tuple[str, ...] | None = None,
) -> dict[str, str]:
    """One HMAC-SHA256 per secret, comma-separated, the current secret's first: during a
    rotation's grace period receivers holding either secret find their signature. With a
    slot, a second signature covers its headers too."""

    def signed(message: bytes) -> str:
        return ",".join(
            hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
            for secret in secrets
            if secret
        )

    headers = {
        "X-Cronicorn-Timestamp": timestamp,
        "X-Cronicorn-Signature": signed(timestamp.encode() + b"." + body),
    }
    if slot is not None:
        identity = ".".join((timestamp, *slot)).encode()
        headers["X-Cronicorn-Slot-Signature"] = signed(identity + b"." + body)
    return headers


def _redirect_location(response: aiohttp.ClientResponse) -> str | None:
    if response.status not in REDIRECT_STATUSES:
        return None
    return response.headers.get("location") or None


async def _read_result(
    response: aiohttp.ClientResponse, request: HttpRequest, progress: _Progress
) -> HttpResult:
    headers = response.headers
    progress.phase = "reading the body"
    limit = request.max_response_size_kb * 1024
    complete = False
    try:
        encoding = headers.get("content-encoding", "")
        raw, truncated = await _read_capped(response, encoding, limit, progress)
        complete = not truncated
    finally:
        # An unfinished response loses its connection instead of draining it.
        response.release() if complete else response.close()
    ok = 200 <= response.status < 300
    return HttpResult(
        status="success" if ok else "failure",
        status_code=response.status,
        body=decode_body(raw, headers.get("content-type", ""), truncated),
        truncated=truncated,
        size_bytes=len(raw),
        duration_ms=0,
        error="" if ok else _http_error(response.status),
        final_url=progress.url,
        headers={  # bytes that are not UTF-8 arrive as lone surrogates, which jsonb refuses
            name: storable(headers[name][:KEPT_HEADER_CHARS])
            for name in KEPT_RESPONSE_HEADERS
            if name in headers
        },
    )


async def _read_capped(
    response: aiohttp.ClientResponse, encoding: str, limit: int, progress: _Progress
) -> tuple[bytes, bool]:
    """At most `limit` body bytes (after decompression) and whether more existed.

    Compressed bodies are inflated never more than the room left per chunk read, so a
    small compressed body cannot inflate past the cap in memory."""
    kept = bytearray()
    encoding = encoding.strip().lower()
    decompressor = None
    if encoding in ("gzip", "x-gzip", "deflate"):
        decompressor = zlib.decompressobj(wbits=zlib.MAX_WBITS | 32)  # zlib or gzip header
    content = response.content
    while chunk := await _read_chunk(content, progress):
        if decompressor is not None:
            try:
                chunk = decompressor.decompress(chunk, limit + 1 - len(kept))
            except zlib.error as exc:
                raise ExecutorError(
                    f"could not decode the {encoding} response body: {exc}"
                ) from exc
        kept.extend(chunk)
        if len(kept) > limit:
            return bytes(kept[:limit]), True
    return bytes(kept), False


async def _read_chunk(content: aiohttp.StreamReader, progress: _Progress) -> bytes:
    try:
        chunk = await content.readany()
    finally:
        progress.body_bytes = content.total_bytes  # bytes received, even if the read failed
    return chunk


def _http_error(status_code: int) -> str:
    reason = httpx.codes.get_reason_phrase(status_code)
    return f"HTTP {status_code} {reason}".rstrip()


def _failure_result(exc: Exception, request: HttpRequest, progress: _Progress) -> HttpResult:
    if isinstance(exc, ExecutorError):
        if isinstance(exc, BlockedAddressError):
            logger.warning("refused %s: %s", _loggable_url(progress.url), exc)
        return not_called("failure", str(exc), progress.url)
    if isinstance(exc, TimeoutError):
        phase = progress.phase
        error = f"timed out after {request.timeout_ms} ms (while {phase})"
        return not_called("timeout", error, progress.url)
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        error = f"TLS error with {exc.host}: {exc.certificate_error}"
    elif isinstance(exc, aiohttp.ClientSSLError):
        error = f"TLS error with {exc.host}: {exc.os_error}"
    elif isinstance(exc, aiohttp.ClientConnectorError):
        error = f"could not connect to {exc.host}:{exc.port}: {_describe_os_error(exc.os_error)}"
    elif isinstance(exc, aiohttp.ClientError):
        error = _connection_error(exc, progress)
    else:
        logger.exception("unexpected executor error for %s", _loggable_url(progress.url))
        error = f"unexpected error: {type(exc).__name__}: {exc}"
    return not_called("failure", error, progress.url)


def not_called(status: ResultStatus, error: str, url: str = "") -> HttpResult:
    """A result without a response (refused, failed to connect, timed out; or never
    called at all: given up, skipped), saying why."""
    return HttpResult(
        status=status,
        status_code=None,
        body=None,
        truncated=False,
        size_bytes=0,
        duration_ms=0,
        error=error,
        final_url=url,
    )


def _connection_error(exc: aiohttp.ClientError, progress: _Progress) -> str:
    if progress.phase == "reading the body":
        return f"connection closed while reading the body after {progress.body_bytes} bytes"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientResponseError):
        return f"the server closed the connection or sent an invalid response: {exc}"
    return f"connection error before the response arrived: {exc}"


def _without_credentials(url: httpx.URL) -> str:
    if url.userinfo or url.fragment:
        url = url.copy_with(username=None, password=None, fragment=None)
    return str(url)


def _loggable_url(raw: str) -> str:
    """The URL without credentials or a query string, either of which may hold secrets."""
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, TypeError):
        return "<invalid URL>"
    return str(url.copy_with(username=None, password=None, query=None, fragment=None))
