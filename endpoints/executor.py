"""The one HTTP executor: every call to a user's endpoint goes through `perform_request`.

Guarantees (DESIGN.md, "HTTP executor"; Traps 10 and 11):

- **One total deadline** (`timeout_ms`) covers DNS, connect, TLS, sending, the response
  headers and the whole body. Each socket wait is capped at the time left before the
  deadline, so a server dripping one byte at a time is cut off on time.
- **Bounded body**: read as a stream and cut at `max_response_size_kb` (decompressed
  size for gzip/deflate, so a gzip bomb is cut too); the connection is then closed.
  A truncated response is still judged by its status code: a truncated 200 is a success
  flagged `truncated`, because the endpoint did answer and the run did happen.
- **SSRF guard**: only http and https; each host is resolved once, every address is
  checked, and the socket connects to a checked address (no second lookup to rebind).
  The check runs inside the connection pool's network backend, so redirects and every
  new connection go through it. Redirects are followed by hand, at most
  `max_redirects`, and headers that look secret are not sent to another origin.
- **Never raises** for anything the remote side does: every problem becomes a failed or
  timed-out `HttpResult` whose `error` says what happened.

Receivers verify HMAC-signed requests by computing
`hex(HMAC-SHA256(secret, timestamp + "." + raw_body))` where `timestamp` is the
`X-Cronicorn-Timestamp` header (Unix seconds) and comparing it with
`X-Cronicorn-Signature`.

Connections are pooled (keep-alive) in one httpcore pool per distinct `NetworkPolicy`
(in practice one per process, built from settings): a connection opened under a lax
policy must never serve a request made under a strict one. httpx provides URL parsing
and joining; its transport layer, httpcore, provides the pool, which we give our own
guarded network backend. Everything here is thread-safe.
"""

from __future__ import annotations

import base64
import codecs
import concurrent.futures
import dataclasses
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpcore
import httpx

logger = logging.getLogger("cronicorn.executor")

MASK = "••••"
SECRET_HEADER_WORDS = ("authorization", "cookie", "token", "secret", "key", "password", "signature")
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
ALLOW_HINT = "set CRONICORN_ALLOW_PRIVATE_ADDRESSES or CRONICORN_SSRF_ALLOWLIST to allow it"
# The executor owns message framing; user-supplied copies would contradict what we send.
FRAMING_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
HEADER_VALUE_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

RunStatus = Literal["success", "failure", "timeout"]


@dataclass(frozen=True)
class HttpRequest:
    url: str
    method: str = "GET"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None  # JSON-serialisable value sent as JSON, or None for no body
    timeout_ms: int = 30_000  # total deadline: DNS + connect + headers + body
    max_response_size_kb: int = 100
    hmac_secret: str = ""  # when set, requests carry X-Cronicorn-Timestamp/-Signature


@dataclass(frozen=True)
class NetworkPolicy:
    allow_private: bool
    allowlist: tuple[str, ...] = ()  # hostnames or CIDRs allowed even if private
    max_redirects: int = 5
    user_agent: str = "Cronicorn-Django/0.1"

    @classmethod
    def from_settings(cls) -> NetworkPolicy:
        from django.conf import settings

        return cls(
            allow_private=settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES,
            allowlist=tuple(settings.CRONICORN_SSRF_ALLOWLIST),
            max_redirects=settings.CRONICORN_MAX_REDIRECTS,
            user_agent=settings.CRONICORN_USER_AGENT,
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
    status: RunStatus  # the Run.Status value
    status_code: int | None
    body: Any  # parsed JSON, else decoded text, None when there was no body
    truncated: bool  # body was cut at max_response_size_kb
    size_bytes: int  # bytes of (decoded) body kept, at most the cap
    duration_ms: int
    error: str  # "" on success, otherwise a message naming the failure kind
    final_url: str
    headers: dict[str, str] = field(default_factory=dict)  # KEPT_RESPONSE_HEADERS found


class ExecutorError(Exception):
    """A request failure already worded for a person; it becomes the result's error."""


class BlockedAddressError(ExecutorError):
    """The SSRF guard refused an address before any connection was made."""


def mask_headers(headers: Mapping[str, str], secret_names: Iterable[str] = ()) -> dict[str, str]:
    """Copy of `headers` safe to log or display: secret values replaced by MASK."""
    named = {name.lower() for name in secret_names}
    return {
        name: MASK if name.lower() in named or looks_secret(name) else value
        for name, value in headers.items()
    }


def looks_secret(header_name: str) -> bool:
    lowered = header_name.lower()
    return any(word in lowered for word in SECRET_HEADER_WORDS)


# --- Deadline ---


class _Deadline(threading.local):
    # The monotonic deadline of the request this thread is performing. A thread-local
    # because httpcore hands the network layer a fixed per-read timeout, not a deadline.
    at: float | None = None


_deadline = _Deadline()


def _time_left(on_expiry: type[Exception]) -> float | None:
    if _deadline.at is None:
        return None
    left = _deadline.at - time.monotonic()
    if left <= 0:
        raise on_expiry("deadline reached")
    return left


# --- SSRF guard ---

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
CGNAT = ipaddress.ip_network("100.64.0.0/10")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
ADDRESS_KINDS = (
    ("is_loopback", "a loopback"),
    ("is_link_local", "a link-local"),
    ("is_multicast", "a multicast"),
    ("is_unspecified", "an unspecified"),
    ("is_private", "a private"),
    ("is_reserved", "a reserved"),
)


def blocked_kind(ip: IPAddress) -> str | None:
    """Why `ip` must not be called by default ("a private", ...), or None if public."""
    embedded = _embedded_ipv4(ip)
    if embedded is not None:
        return blocked_kind(embedded)
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata"
    for attribute, kind in ADDRESS_KINDS:
        if getattr(ip, attribute):
            return kind
    if ip in CGNAT:
        return "a shared (CGNAT)"
    return None if ip.is_global else "a non-public"


def _embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    # IPv6 forms that carry an IPv4 address reach that IPv4 host on many networks.
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


class AddressGuard:
    """Resolves a host once and returns its addresses if the policy allows them all: a
    name that mixes public and private addresses is refused rather than half-trusted."""

    def __init__(self, policy: NetworkPolicy) -> None:
        self.allow_private = policy.allow_private
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        self.hostnames: set[str] = set()
        for entry in policy.allowlist:
            try:
                self.networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                self.hostnames.add(entry.strip().lower().rstrip("."))

    def allowed_addresses(self, host: str, port: int) -> list[str]:
        addresses = _resolve(host, port)
        if self.allow_private or host.lower().rstrip(".") in self.hostnames:
            return addresses
        for address in addresses:
            self._check(host, ipaddress.ip_address(address.split("%")[0]))
        return addresses

    def _check(self, host: str, ip: IPAddress) -> None:
        kind = blocked_kind(ip)
        if kind is None or self._allowlisted(ip):
            return
        if _ip_literal(host) is not None:
            raise BlockedAddressError(f"blocked: {host} is {kind} address; {ALLOW_HINT}")
        raise BlockedAddressError(f"blocked: {host} resolves to {ip}, {kind} address; {ALLOW_HINT}")

    def _allowlisted(self, ip: IPAddress) -> bool:
        candidates = [ip] + [e for e in [_embedded_ipv4(ip)] if e is not None]
        return any(c in network for c in candidates for network in self.networks)


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


_dns_lock = threading.Lock()
_dns_executor: concurrent.futures.ThreadPoolExecutor | None = None


def _resolve(host: str, port: int) -> list[str]:
    """The host's addresses in resolver order; the lookup runs in a helper thread so
    that a slow resolver cannot outlive the request deadline."""
    literal = _ip_literal(host)
    if literal is not None:
        return [str(literal)]
    future = _dns_pool().submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    try:
        infos = future.result(timeout=_time_left(httpcore.ConnectTimeout))
    except TimeoutError:
        future.cancel()
        raise httpcore.ConnectTimeout(f"resolving {host}") from None
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ExecutorError(f"could not resolve host '{host}' ({reason})") from exc
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _dns_pool() -> concurrent.futures.ThreadPoolExecutor:
    global _dns_executor
    with _dns_lock:
        if _dns_executor is None:
            _dns_executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=16, thread_name_prefix="cronicorn-dns"
            )
        return _dns_executor


# --- Network layer given to httpcore ---


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every wait ends at the request deadline, whatever per-read
    timeout httpcore asks for."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _time_left(httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _time_left(httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        try:
            tls = self._inner.start_tls(
                ssl_context, server_hostname, _time_left(httpcore.ConnectTimeout)
            )
        except httpcore.ConnectError as exc:
            reason = exc.__cause__ or exc
            raise ExecutorError(f"TLS error with {server_hostname}: {reason}") from exc
        return _DeadlineStream(tls)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _GuardedBackend(httpcore.NetworkBackend):
    """Connects only to addresses the SSRF guard checked, resolving each host once."""

    def __init__(self, policy: NetworkPolicy) -> None:
        self._guard = AddressGuard(policy)
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        failure: BaseException | None = None
        for address in self._guard.allowed_addresses(host, port):
            try:
                stream = self._inner.connect_tcp(
                    address,
                    port,
                    _time_left(httpcore.ConnectTimeout),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                failure = exc.__cause__ or exc
                continue
            return _DeadlineStream(stream)
        raise ExecutorError(f"could not connect to {host}:{port}: {_describe_os_error(failure)}")

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise ExecutorError("unix sockets are not supported")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def _describe_os_error(error: BaseException | None) -> str:
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return str(error)


_pools_lock = threading.Lock()
_pools: dict[NetworkPolicy, httpcore.ConnectionPool] = {}


def _pool_for(policy: NetworkPolicy) -> httpcore.ConnectionPool:
    pool = _pools.get(policy)
    if pool is not None:
        return pool
    with _pools_lock:
        if policy not in _pools:
            _pools[policy] = httpcore.ConnectionPool(
                ssl_context=httpx.create_ssl_context(),
                max_connections=None,  # concurrency is bounded by the callers' thread pools
                max_keepalive_connections=200,
                keepalive_expiry=30.0,
                network_backend=_GuardedBackend(policy),
            )
        return _pools[policy]


def _forget_pools_after_fork() -> None:
    # A forked child must not share its parent's sockets or lock states.
    global _pools_lock, _dns_lock, _dns_executor
    _pools.clear()
    _pools_lock = threading.Lock()
    _dns_lock = threading.Lock()
    _dns_executor = None


os.register_at_fork(after_in_child=_forget_pools_after_fork)


# --- Performing a request ---


@dataclass
class _Progress:
    """What a failure message needs to know: where we were and how far we got."""

    url: str
    phase: str = "connecting"
    body_bytes: int = 0


def perform_request(request: HttpRequest, *, policy: NetworkPolicy | None = None) -> HttpResult:
    """Call the endpoint described by `request`; never raises for network problems."""
    policy = policy or NetworkPolicy.from_settings()
    started = time.monotonic()
    progress = _Progress(url=request.url)
    _deadline.at = started + request.timeout_ms / 1000
    try:
        result = _perform(request, policy, progress)
    except Exception as exc:
        result = _failure_result(exc, request, progress)
    finally:
        _deadline.at = None
    duration_ms = round((time.monotonic() - started) * 1000)
    if logger.isEnabledFor(logging.DEBUG):
        _log_outcome(request, result, progress.url, duration_ms)
    return dataclasses.replace(result, duration_ms=duration_ms)


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


def _perform(request: HttpRequest, policy: NetworkPolicy, progress: _Progress) -> HttpResult:
    origin = _parse_url(request.url, what="URL")
    progress.url = _without_credentials(origin)
    _check_request(request)
    method = request.method.upper()
    body = None if request.body is None else _encode_json(request.body)
    timestamp = str(int(time.time()))
    url = origin
    for _hop in range(policy.max_redirects + 1):
        progress.url = _without_credentials(url)
        foreign = (url.scheme, url.host, url.port) != (origin.scheme, origin.host, origin.port)
        headers = _hop_headers(request, policy, url, body, timestamp=timestamp, foreign=foreign)
        response = _send(policy, method, url, headers, body, progress)
        location = _redirect_location(response)
        if location is None:
            return _read_result(response, request, progress)
        response.close()
        url = _parse_url(str(url.join(location)), what="redirect Location")
        if response.status in (301, 302, 303) and method != "HEAD":
            method, body = "GET", None
    raise ExecutorError(f"too many redirects (limit {policy.max_redirects})")


def _parse_url(raw: str, *, what: str) -> httpx.URL:
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ExecutorError(f"invalid {what} {raw!r}: {exc}") from exc
    if url.scheme not in ("http", "https"):
        raise ExecutorError(
            f"unsupported {what} scheme {url.scheme!r} in {raw!r}: only http:// and https:// "
            "URLs can be called"
        )
    if not url.host:
        raise ExecutorError(f"{what} {raw!r} has no host")
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
) -> list[tuple[bytes, bytes]]:
    """Headers for one hop. Secret-looking headers and the signature stay with the
    original origin: a redirect must not hand credentials to another host."""
    headers = {
        name: value
        for name, value in request.headers.items()
        if name.lower() not in FRAMING_HEADERS and not (foreign and looks_secret(name))
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
    if request.hmac_secret and not foreign:
        headers.update(_signature_headers(request.hmac_secret, timestamp, body or b""))
    framing = [(b"Host", url.netloc)]
    if body is not None or request.method.upper() in ("POST", "PUT", "PATCH"):
        framing.append((b"Content-Length", str(len(body or b"")).encode()))
    return framing + [(k.encode("ascii"), v.encode()) for k, v in headers.items()]


def _signature_headers(secret: str, timestamp: str, body: bytes) -> dict[str, str]:
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return {"X-Cronicorn-Timestamp": timestamp, "X-Cronicorn-Signature": digest.hexdigest()}


def _send(
    policy: NetworkPolicy,
    method: str,
    url: httpx.URL,
    headers: list[tuple[bytes, bytes]],
    body: bytes | None,
    progress: _Progress,
) -> httpcore.Response:
    progress.phase = "connecting or waiting for the response headers"
    left = _time_left(httpcore.PoolTimeout)
    core_url = httpcore.URL(
        scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
    )
    return _pool_for(policy).handle_request(
        httpcore.Request(
            method.encode("ascii"),
            core_url,
            headers=headers,
            content=body or b"",
            extensions={"timeout": {"connect": left, "read": left, "write": left, "pool": left}},
        )
    )


def _redirect_location(response: httpcore.Response) -> str | None:
    if response.status not in REDIRECT_STATUSES:
        return None
    location = httpx.Headers(response.headers).get("location")
    return location or None


def _read_result(
    response: httpcore.Response, request: HttpRequest, progress: _Progress
) -> HttpResult:
    headers = httpx.Headers(response.headers)
    progress.phase = "reading the body"
    limit = request.max_response_size_kb * 1024
    try:
        encoding = headers.get("content-encoding", "")
        raw, truncated = _read_capped(response, encoding, limit, progress)
    finally:
        # Closing an unfinished response drops its connection instead of draining it.
        response.close()
    ok = 200 <= response.status < 300
    return HttpResult(
        status="success" if ok else "failure",
        status_code=response.status,
        body=_decode_body(raw, headers.get("content-type", ""), truncated),
        truncated=truncated,
        size_bytes=len(raw),
        duration_ms=0,
        error="" if ok else _http_error(response.status),
        final_url=progress.url,
        headers={
            name: headers[name][:KEPT_HEADER_CHARS]
            for name in KEPT_RESPONSE_HEADERS
            if name in headers
        },
    )


def _read_capped(
    response: httpcore.Response, encoding: str, limit: int, progress: _Progress
) -> tuple[bytes, bool]:
    """At most `limit` body bytes (after decompression) and whether more existed."""
    kept = bytearray()
    chunks = _wire_chunks(response, progress)
    for piece in _decoded(chunks, encoding, room=lambda: limit + 1 - len(kept)):
        kept.extend(piece)
        if len(kept) > limit:
            return bytes(kept[:limit]), True
    return bytes(kept), False


def _wire_chunks(response: httpcore.Response, progress: _Progress) -> Iterator[bytes]:
    for chunk in response.iter_stream():
        progress.body_bytes += len(chunk)
        yield chunk


def _decoded(chunks: Iterator[bytes], encoding: str, room: Callable[[], int]) -> Iterator[bytes]:
    """Decompress gzip/deflate yielding never more than `room()` bytes per chunk of
    input, so a small compressed body cannot inflate past the cap in memory."""
    encoding = encoding.strip().lower()
    if encoding not in ("gzip", "x-gzip", "deflate"):
        yield from chunks
        return
    decompressor = zlib.decompressobj(wbits=zlib.MAX_WBITS | 32)  # zlib or gzip header
    try:
        for chunk in chunks:
            yield decompressor.decompress(chunk, room())
    except zlib.error as exc:
        raise ExecutorError(f"could not decode the {encoding} response body: {exc}") from exc


def _decode_body(raw: bytes, content_type: str, truncated: bool) -> Any:
    if not raw:
        return None
    text = raw.decode(_charset(content_type), errors="replace")
    if truncated:
        return text  # cut JSON would not parse; the text is still worth keeping
    if _is_json_type(content_type) or text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _charset(content_type: str) -> str:
    match = re.search(r"charset=\"?([\w.:-]+)", content_type, re.IGNORECASE)
    if match is None:
        return "utf-8"
    try:
        return codecs.lookup(match.group(1)).name
    except LookupError:
        return "utf-8"


def _is_json_type(content_type: str) -> bool:
    media_type = content_type.split(";")[0].strip().lower()
    return media_type in ("application/json", "text/json") or media_type.endswith("+json")


def _http_error(status_code: int) -> str:
    reason = httpx.codes.get_reason_phrase(status_code)
    return f"HTTP {status_code} {reason}".rstrip()


def _failure_result(exc: Exception, request: HttpRequest, progress: _Progress) -> HttpResult:
    status: RunStatus = "failure"
    if isinstance(exc, ExecutorError):
        error = str(exc)
        if isinstance(exc, BlockedAddressError):
            logger.warning("refused %s: %s", _loggable_url(progress.url), error)
    elif isinstance(exc, httpcore.TimeoutException):
        status = "timeout"
        error = f"timed out after {request.timeout_ms} ms (while {_timeout_phase(exc, progress)})"
    elif isinstance(exc, httpcore.NetworkError | httpcore.RemoteProtocolError):
        error = _connection_error(exc, progress)
    elif isinstance(exc, httpcore.LocalProtocolError):
        error = f"could not send the request: {exc}"
    else:
        logger.exception("unexpected executor error for %s", _loggable_url(progress.url))
        error = f"unexpected error: {type(exc).__name__}: {exc}"
    return HttpResult(
        status=status,
        status_code=None,
        body=None,
        truncated=False,
        size_bytes=0,
        duration_ms=0,
        error=error,
        final_url=progress.url,
    )


def _timeout_phase(exc: httpcore.TimeoutException, progress: _Progress) -> str:
    if isinstance(exc, httpcore.ConnectTimeout):
        return "connecting"
    if isinstance(exc, httpcore.PoolTimeout):
        return "waiting for a free connection"
    if isinstance(exc, httpcore.WriteTimeout):
        return "sending the request"
    if progress.phase == "reading the body":
        return progress.phase
    return "waiting for the response headers"


def _connection_error(exc: Exception, progress: _Progress) -> str:
    if progress.phase == "reading the body":
        return f"connection closed while reading the body after {progress.body_bytes} bytes"
    if isinstance(exc, httpcore.RemoteProtocolError):
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
