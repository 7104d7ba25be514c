"""The one HTTP executor against real servers on 127.0.0.1.

Polite servers come from pytest-httpserver; hostile ones (dripping, stalling, huge,
compressed bombs, hanging up mid-body) are small raw-socket servers defined here.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import hmac
import json
import socket
import ssl
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from endpoints.engine.executor import (
    HttpRequest,
    HttpResult,
    NetworkPolicy,
    perform_request,
)

ALLOW_PRIVATE = NetworkPolicy(allow_private=True)
STRICT = NetworkPolicy(allow_private=False)
ALLOW_HINT = "set CRONICORN_ALLOW_PRIVATE_ADDRESSES or CRONICORN_SSRF_ALLOWLIST to allow it"


def call(url: str, policy: NetworkPolicy = ALLOW_PRIVATE, **fields: Any) -> HttpResult:
    return perform_request(HttpRequest(url=url, **fields), policy=policy)


# --- Servers ---


@pytest.fixture(scope="module")
def module_server() -> Iterator[HTTPServer]:
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    server.start()
    yield server
    server.clear()
    server.stop()


@pytest.fixture
def server(module_server: HTTPServer) -> Iterator[HTTPServer]:
    yield module_server
    module_server.clear()


Responder = Callable[[socket.socket, threading.Event], None]


class RawServer:
    """A TCP server that reads one request head, then lets `respond` misbehave."""

    def __init__(self, respond: Responder, host: str = "127.0.0.1") -> None:
        self.respond = respond
        self.stopping = threading.Event()
        self.connections = 0
        self.listener = socket.create_server((host, 0))
        self.listener.settimeout(0.1)  # lets the accept loop notice `stopping`
        self.url = f"http://{host}:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
        self.listener.close()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                head = b""
                while b"\r\n\r\n" not in head:
                    data = conn.recv(4096)
                    if not data:
                        return
                    head += data
                self.respond(conn, self.stopping)
            except OSError:
                pass  # the executor hung up on us, as it should


@pytest.fixture
def raw_server() -> Iterator[Callable[..., RawServer]]:
    started: list[RawServer] = []

    def start(respond: Responder, host: str = "127.0.0.1") -> RawServer:
        started.append(RawServer(respond, host))
        return started[-1]

    yield start
    for server in started:
        server.stopping.set()


def head(status: str = "200 OK", **headers: str | int) -> bytes:
    lines = [f"HTTP/1.1 {status}"] + [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def peak_rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/self/status")


def reset_peak_rss() -> None:
    # Linux resets the peak (VmHWM) to the current RSS when "5" is written here.
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


# --- Success and failure by status ---


@pytest.mark.parametrize(
    ("content_type", "payload", "expected"),
    [
        ("application/json", '{"queue_depth": 7}', {"queue_depth": 7}),
        ("application/problem+json; charset=utf-8", "[1, 2]", [1, 2]),
        ("text/plain", '{"looks": "like json"}', {"looks": "like json"}),
        ("text/plain; charset=utf-8", "all good ✓", "all good ✓"),
    ],
)
def test_a_2xx_response_is_a_success_with_json_parsed_and_text_kept(
    server: HTTPServer, content_type: str, payload: str, expected: Any
) -> None:
    server.expect_request("/health").respond_with_data(payload, content_type=content_type)

    result = call(server.url_for("/health"))

    assert result.status == "success"
    assert result.status_code == 200
    assert result.body == expected
    assert result.error == ""
    assert result.truncated is False
    assert result.size_bytes == len(payload.encode())
    assert result.final_url == server.url_for("/health")


def test_an_empty_body_is_none(server: HTTPServer) -> None:
    server.expect_request("/empty").respond_with_data("", status=204)

    result = call(server.url_for("/empty"))

    assert (result.status, result.status_code, result.body, result.size_bytes) == (
        "success",
        204,
        None,
        0,
    )


def test_a_non_2xx_status_is_a_failure_naming_the_status_and_keeping_the_body(
    server: HTTPServer,
) -> None:
    server.expect_request("/down").respond_with_json({"status": "critical"}, status=503)

    result = call(server.url_for("/down"))

    assert result.status == "failure"
    assert result.status_code == 503
    assert result.error == "HTTP 503 Service Unavailable"
    assert result.body == {"status": "critical"}


def test_only_the_rate_limit_headers_and_content_type_are_kept(server: HTTPServer) -> None:
    headers = {
        "Retry-After": "120",
        "RateLimit-Remaining": "0",
        "X-RateLimit-Reset": "9" * 500,
        "Set-Cookie": "session=secret",
        "Authorization": "Bearer leaked",
        "X-Other": "1",
    }
    server.expect_request("/limited").respond_with_json({}, status=429, headers=headers)

    result = call(server.url_for("/limited"))

    assert result.headers == {
        "retry-after": "120",
        "ratelimit-remaining": "0",
        "x-ratelimit-reset": "9" * 200,
        "content-type": "application/json",
    }
    assert call("http://127.0.0.1:9/").headers == {}  # no answer, no headers


def test_invalid_json_with_a_json_content_type_is_kept_as_text_without_failing(
    server: HTTPServer,
) -> None:
    server.expect_request("/bad").respond_with_data("{not json", content_type="application/json")

    result = call(server.url_for("/bad"))

    assert (result.status, result.body, result.error) == ("success", "{not json", "")


# --- What the server receives ---


def recording(server: HTTPServer, path: str, status: int = 200) -> list[Request]:
    seen: list[Request] = []

    def handler(request: Request) -> Response:
        request.get_data()  # read the body while the connection is still open
        seen.append(request)
        return Response("{}", status=status, content_type="application/json")

    server.expect_request(path).respond_with_handler(handler)
    return seen


def test_method_headers_json_body_and_user_agent_reach_the_server(server: HTTPServer) -> None:
    seen = recording(server, "/hook")

    result = call(
        server.url_for("/hook"),
        method="post",
        headers={"X-Trace": "abc-123"},
        body={"action": "refresh", "note": "déjà vu"},
    )

    assert result.status == "success"
    [received] = seen
    assert received.method == "POST"
    assert received.headers["X-Trace"] == "abc-123"
    assert received.headers["User-Agent"] == "Cronicorn-Django/0.1"
    assert received.headers["Content-Type"] == "application/json"
    assert json.loads(received.get_data()) == {"action": "refresh", "note": "déjà vu"}


def test_a_user_agent_and_content_type_set_by_the_user_win(server: HTTPServer) -> None:
    seen = recording(server, "/hook")

    call(
        server.url_for("/hook"),
        method="PUT",
        headers={"user-agent": "acme-probe/2", "Content-Type": "application/vnd.acme+json"},
        body=[1],
    )

    assert seen[0].headers["User-Agent"] == "acme-probe/2"
    assert seen[0].headers["Content-Type"] == "application/vnd.acme+json"


def test_a_cookie_set_by_one_endpoint_is_never_sent_with_a_later_request(
    server: HTTPServer,
) -> None:
    # Connections are shared by every tenant's endpoints: a cookie jar would leak sessions.
    server.expect_request("/login").respond_with_data(
        "ok", headers={"Set-Cookie": "session=tenant-a; Path=/"}
    )
    seen = recording(server, "/other")

    by_name = server.url_for("/").replace("127.0.0.1", "localhost")  # jars skip IP hosts
    call(by_name + "login")
    call(by_name + "other")

    assert "Cookie" not in seen[0].headers


def test_hmac_headers_let_the_receiver_verify_timestamp_and_body(server: HTTPServer) -> None:
    seen = recording(server, "/signed")

    call(server.url_for("/signed"), method="POST", body={"n": 1}, hmac_secret="s3cret")

    received = seen[0]
    timestamp = received.headers["X-Cronicorn-Timestamp"]
    expected = hmac.new(
        b"s3cret", timestamp.encode() + b"." + received.get_data(), hashlib.sha256
    ).hexdigest()
    assert hmac.compare_digest(received.headers["X-Cronicorn-Signature"], expected)
    assert abs(int(timestamp) - time.time()) < 60


# --- Deadline (Trap 10) ---


@pytest.mark.parametrize("seconds_between_bytes", [0.2, 1.0])
def test_a_server_dripping_the_body_is_cut_off_at_the_total_deadline(
    raw_server: Callable[..., RawServer], seconds_between_bytes: float
) -> None:
    def drip(conn: socket.socket, stopping: threading.Event) -> None:
        conn.sendall(head(Content_Length=100, Content_Type="text/plain"))
        for _ in range(100):
            if stopping.wait(seconds_between_bytes):
                return
            conn.sendall(b"x")

    dripper = raw_server(drip)
    started = time.monotonic()

    result = call(dripper.url, timeout_ms=1000)

    elapsed = time.monotonic() - started
    assert result.status == "timeout"
    assert result.error == "timed out after 1000 ms (while reading the body)"
    assert result.status_code is None
    assert 0.95 < elapsed < 1.5


def test_a_server_that_stalls_before_the_headers_times_out(
    raw_server: Callable[..., RawServer],
) -> None:
    def stall(conn: socket.socket, stopping: threading.Event) -> None:
        if not stopping.wait(10):
            conn.sendall(head(Content_Length=0))

    staller = raw_server(stall)
    started = time.monotonic()

    result = call(staller.url, timeout_ms=1000)

    assert result.status == "timeout"
    assert result.error == "timed out after 1000 ms (while waiting for the response headers)"
    assert time.monotonic() - started < 1.5


# --- Size cap ---


@pytest.mark.parametrize(("size", "truncated"), [(1024, False), (1025, True)])
def test_the_cap_keeps_at_most_max_response_size_kb_and_flags_the_cut(
    server: HTTPServer, size: int, truncated: bool
) -> None:
    server.expect_request("/exact").respond_with_data("a" * size)

    result = call(server.url_for("/exact"), max_response_size_kb=1)

    assert (result.status, result.truncated, result.size_bytes) == ("success", truncated, 1024)
    assert result.body == "a" * 1024


def test_truncated_json_is_kept_as_text(server: HTTPServer) -> None:
    payload = json.dumps({"items": ["x" * 100] * 50})
    server.expect_request("/big").respond_with_data(payload, content_type="application/json")

    result = call(server.url_for("/big"), max_response_size_kb=1)

    assert result.truncated is True
    assert isinstance(result.body, str)
    assert result.body.startswith('{"items"')


def test_a_50_mb_body_is_cut_at_the_cap_without_being_held_in_memory(
    raw_server: Callable[..., RawServer],
) -> None:
    total = 50 * 1024 * 1024
    chunk = b"z" * 65536

    def huge(conn: socket.socket, stopping: threading.Event) -> None:
        conn.sendall(head(Content_Length=total, Content_Type="text/plain"))
        for _ in range(total // len(chunk)):
            if stopping.is_set():
                return
            conn.sendall(chunk)

    big = raw_server(huge)
    reset_peak_rss()
    before = peak_rss_kb()

    result = call(big.url, max_response_size_kb=100)

    assert peak_rss_kb() - before < 30 * 1024
    assert result.status == "success"
    assert result.truncated is True
    assert result.size_bytes == 100 * 1024


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """200 MB of zeros, gzipped to about 200 KB."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1024 * 1024)
    return b"".join(compressor.compress(zeros) for _ in range(200)) + compressor.flush()


def test_a_gzip_bomb_is_cut_at_the_cap_without_inflating_in_memory(
    raw_server: Callable[..., RawServer], gzip_bomb: bytes
) -> None:
    def bomb(conn: socket.socket, stopping: threading.Event) -> None:
        conn.sendall(head(Content_Length=len(gzip_bomb), Content_Encoding="gzip"))
        conn.sendall(gzip_bomb)

    bomber = raw_server(bomb)
    reset_peak_rss()
    before = peak_rss_kb()

    result = call(bomber.url, max_response_size_kb=100)

    assert peak_rss_kb() - before < 30 * 1024
    assert (result.status, result.truncated, result.size_bytes) == ("success", True, 100 * 1024)


def test_a_gzipped_json_body_is_decompressed_and_parsed(
    raw_server: Callable[..., RawServer],
) -> None:
    payload = gzip.compress(json.dumps({"status": "healthy"}).encode())

    def gzipped(conn: socket.socket, stopping: threading.Event) -> None:
        conn.sendall(
            head(
                Content_Length=len(payload),
                Content_Encoding="gzip",
                Content_Type="application/json",
            )
            + payload
        )

    result = call(raw_server(gzipped).url)

    assert result.body == {"status": "healthy"}


# --- Connection-level failures ---


def test_a_server_closing_mid_body_is_a_failure_naming_the_bytes_read(
    raw_server: Callable[..., RawServer],
) -> None:
    def hang_up(conn: socket.socket, stopping: threading.Event) -> None:
        conn.sendall(head(Content_Length=1000) + b"y" * 300)

    result = call(raw_server(hang_up).url)

    assert result.status == "failure"
    assert result.error == "connection closed while reading the body after 300 bytes"


def test_a_refused_connection_is_a_clear_failure() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed below, so nothing listens there

    result = call(f"http://127.0.0.1:{port}/")

    assert result.status == "failure"
    assert result.error == f"could not connect to 127.0.0.1:{port}: connection refused"


def test_an_unknown_host_is_a_clear_failure() -> None:
    result = call("http://no-such-host.invalid/health", timeout_ms=10_000)

    assert result.status == "failure"
    assert result.error.startswith("could not resolve host 'no-such-host.invalid'")


def test_https_to_a_plain_http_server_is_a_tls_failure(server: HTTPServer) -> None:
    server.expect_request("/").respond_with_data("plain")

    result = call(server.url_for("/").replace("http://", "https://"))

    assert result.status == "failure"
    assert result.error.startswith("TLS error with 127.0.0.1:")


@pytest.fixture(scope="module")
def self_signed_certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=DNS:localhost"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_https_verifies_the_certificate_for_the_hostname_sent_as_sni(
    self_signed_certificate: tuple[Path, Path],
) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*self_signed_certificate)
    server_names: list[str | None] = []
    context.sni_callback = lambda _sock, name, _context: server_names.append(name)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)

    def handshake_once() -> None:
        conn, _ = listener.accept()
        with conn, contextlib.suppress(OSError):
            context.wrap_socket(conn, server_side=True)

    handshaker = threading.Thread(target=handshake_once, daemon=True)
    handshaker.start()

    result = call(f"https://localhost:{listener.getsockname()[1]}/")

    handshaker.join(timeout=5)
    listener.close()
    assert result.status == "failure"
    assert result.error.startswith("TLS error with localhost: ")
    assert "certificate verify failed" in result.error
    assert server_names == ["localhost"]  # connected to the checked IP, verified the name


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/file", "unsupported URL scheme 'ftp'"),
        ("file:///etc/passwd", "unsupported URL scheme 'file'"),
        ("example.com/health", "unsupported URL scheme ''"),
        ("http:///nohost", "has no host"),
    ],
)
def test_a_url_that_is_not_http_or_https_is_refused_with_a_clear_message(
    url: str, message: str
) -> None:
    result = call(url)

    assert result.status == "failure"
    assert message in result.error


def test_a_header_value_with_a_newline_is_refused_without_echoing_the_value() -> None:
    result = call("http://127.0.0.1:9/", headers={"Authorization": "Bearer abc\r\nX-Evil: 1"})

    assert result.error == "header 'Authorization' has a control character (e.g. a newline)"
    assert "abc" not in result.error


# --- Redirects (Trap 11) ---


def redirect_chain(server: HTTPServer, hops: int) -> str:
    for index in range(hops):
        server.expect_request(f"/hop/{index}").respond_with_data(
            "", status=302, headers={"Location": f"/hop/{index + 1}"}
        )
    server.expect_request(f"/hop/{hops}").respond_with_json({"arrived": True})
    return server.url_for("/hop/0")


def test_five_redirects_are_followed(server: HTTPServer) -> None:
    result = call(redirect_chain(server, 5))

    assert (result.status, result.body) == ("success", {"arrived": True})
    assert result.final_url == server.url_for("/hop/5")


def test_a_sixth_redirect_is_refused(server: HTTPServer) -> None:
    result = call(redirect_chain(server, 6))

    assert result.status == "failure"
    assert result.error == "too many redirects (limit 5)"


def test_a_redirect_loop_fails_with_too_many_redirects(server: HTTPServer) -> None:
    server.expect_request("/loop").respond_with_data("", status=301, headers={"Location": "/loop"})

    result = call(server.url_for("/loop"))

    assert result.error == "too many redirects (limit 5)"


def test_a_303_turns_a_post_into_a_get_without_body_and_a_307_keeps_both(
    server: HTTPServer,
) -> None:
    landed = recording(server, "/landing")
    for status in (303, 307):
        server.expect_request(f"/moved/{status}").respond_with_data(
            "", status=status, headers={"Location": "/landing"}
        )
        call(server.url_for(f"/moved/{status}"), method="POST", body={"n": status})

    assert [(r.method, r.get_data()) for r in landed] == [("GET", b""), ("POST", b'{"n":307}')]


def test_a_redirect_to_another_origin_drops_secret_looking_headers(server: HTTPServer) -> None:
    landed = recording(server, "/elsewhere")
    elsewhere = server.url_for("/elsewhere").replace("127.0.0.1", "localhost")
    server.expect_request("/start").respond_with_data(
        "", status=302, headers={"Location": elsewhere}
    )

    result = call(
        server.url_for("/start"),
        headers={"Authorization": "Bearer t", "X-Api-Key": "k", "X-Trace": "keep"},
        hmac_secret="s3cret",
    )

    assert result.final_url == elsewhere
    received = landed[0].headers
    assert received["X-Trace"] == "keep"
    for secret in ("Authorization", "X-Api-Key", "X-Cronicorn-Signature"):
        assert secret not in received


# --- SSRF guard ---


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://10.0.0.1/", "10.0.0.1 is a private address"),
        ("http://192.168.1.10:8080/", "192.168.1.10 is a private address"),
        ("http://127.0.0.1/", "127.0.0.1 is a loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a cloud metadata address"),
        ("http://100.64.0.1/", "100.64.0.1 is a shared (CGNAT) address"),
        ("http://0.0.0.0/", "0.0.0.0 is an unspecified address"),
        ("http://[::1]/", "::1 is a loopback address"),
        ("http://[fd00:ec2::254]/", "fd00:ec2::254 is a cloud metadata address"),
        ("http://[fe80::1]/", "fe80::1 is a link-local address"),
        ("http://[::ffff:10.0.0.1]/", "::ffff:10.0.0.1 is a private address"),
        ("http://2130706433/", "2130706433 resolves to 127.0.0.1, a loopback address"),
    ],
)
def test_private_loopback_metadata_and_ipv6_literals_are_blocked(url: str, kind: str) -> None:
    result = call(url, policy=STRICT, timeout_ms=3000)

    assert result.status == "failure"
    assert result.error == f"blocked: {kind}; {ALLOW_HINT}"
    assert result.duration_ms < 1000  # refused before any connection attempt


def test_a_hostname_resolving_to_loopback_is_blocked(server: HTTPServer) -> None:
    server.expect_request("/").respond_with_data("should not be reached")

    result = call(server.url_for("/").replace("127.0.0.1", "localhost"), policy=STRICT)

    assert result.status == "failure"
    assert result.error.startswith("blocked: localhost resolves to ")
    assert "a loopback address" in result.error
    assert server.log == []


@pytest.mark.parametrize("allowlist", [("localhost",), ("127.0.0.0/8",), ("127.0.0.1",)])
def test_the_allowlist_lets_a_named_host_or_network_through(
    server: HTTPServer, allowlist: tuple[str, ...]
) -> None:
    server.expect_request("/").respond_with_data("ok")
    policy = NetworkPolicy(allow_private=False, allowlist=allowlist)

    result = call(server.url_for("/").replace("127.0.0.1", "localhost"), policy=policy)

    assert (result.status, result.body) == ("success", "ok")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_an_allowlisted_origin_lets_that_port_through_and_no_other(
    server: HTTPServer, raw_server: Callable[..., RawServer], host: str
) -> None:
    # The local set-up allows exactly the demo's own origin, not every loopback service.
    def answer(conn: socket.socket, stopping: threading.Event) -> None:
        conn.sendall(head(Content_Length=7) + b"reached")

    other = raw_server(answer)  # 127.0.0.1 too, on another port
    server.expect_request("/").respond_with_data("ok")
    policy = NetworkPolicy(allow_private=False, allowlist=(f"{host}:{server.port}",))

    allowed = call(server.url_for("/").replace("127.0.0.1", host), policy=policy)
    refused = call(other.url.replace("127.0.0.1", host) + "/", policy=policy)

    assert (allowed.status, allowed.body) == ("success", "ok")
    assert refused.status == "failure"
    assert refused.error.startswith(f"blocked: {host} ")
    assert other.connections == 0


def test_a_redirect_to_a_blocked_address_is_refused_without_connecting(
    server: HTTPServer, raw_server: Callable[..., RawServer]
) -> None:
    def answer(conn: socket.socket, stopping: threading.Event) -> None:
        conn.sendall(head(Content_Length=7) + b"reached")

    victim = raw_server(answer, host="127.0.0.2")  # loopback, but not on the allowlist
    server.expect_request("/go").respond_with_data(
        "", status=302, headers={"Location": victim.url + "/admin"}
    )
    policy = NetworkPolicy(allow_private=False, allowlist=("127.0.0.1",))

    result = call(server.url_for("/go"), policy=policy)

    assert result.status == "failure"
    assert result.error == f"blocked: 127.0.0.2 is a loopback address; {ALLOW_HINT}"
    assert result.final_url == victim.url + "/admin"
    assert victim.connections == 0


@pytest.mark.parametrize("target", ["http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/"])
def test_a_redirect_to_a_private_or_metadata_address_is_refused_at_once(
    server: HTTPServer, target: str
) -> None:
    server.expect_request("/go").respond_with_data("", status=307, headers={"Location": target})
    policy = NetworkPolicy(allow_private=False, allowlist=("127.0.0.1",))

    result = call(server.url_for("/go"), policy=policy, timeout_ms=5000)

    assert result.status == "failure"
    assert result.error.startswith("blocked: ")
    assert result.duration_ms < 1000  # a real connection attempt would hang until the deadline


# --- Shared client health and concurrency ---


def test_the_shared_client_still_serves_concurrent_requests_after_hostile_servers(
    server: HTTPServer, raw_server: Callable[..., RawServer]
) -> None:
    def hang_up(conn: socket.socket, stopping: threading.Event) -> None:
        conn.sendall(head(Content_Length=1000) + b"y" * 10)

    def stall(conn: socket.socket, stopping: threading.Event) -> None:
        stopping.wait(10)

    assert call(raw_server(hang_up).url).status == "failure"
    assert call(raw_server(stall).url, timeout_ms=300).status == "timeout"
    server.expect_request("/n").respond_with_handler(
        lambda request: Response(request.args["i"], content_type="text/plain")
    )

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda i: call(server.url_for(f"/n?i={i}")), range(200)))

    assert [r.body for r in results] == [str(i) for i in range(200)]


def test_the_policy_is_read_from_settings(settings: Any) -> None:
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = False
    settings.CRONICORN_SSRF_ALLOWLIST = ["10.0.0.0/8", "intranet.example"]
    settings.CRONICORN_MAX_REDIRECTS = 2
    settings.CRONICORN_USER_AGENT = "probe/1"

    assert NetworkPolicy.from_settings() == NetworkPolicy(
        allow_private=False,
        allowlist=("10.0.0.0/8", "intranet.example"),
        max_redirects=2,
        user_agent="probe/1",
    )


# --- hostile responses and URLs: a clean outcome, never "unexpected error" ---


def test_json_nested_1000_deep_is_kept_as_text(server: HTTPServer) -> None:
    deep = "[" * 1_000 + "]" * 1_000
    server.expect_request("/deep").respond_with_data(deep, content_type="application/json")

    result = call(server.url_for("/deep"))

    assert (result.status, result.error) == ("success", "")
    assert result.body == deep


@pytest.mark.parametrize("charset", ["rot13", "base64", "no-such-charset", "idna"])
def test_an_unknown_or_non_text_charset_falls_back_to_utf8(
    server: HTTPServer, charset: str
) -> None:
    server.expect_request("/odd").respond_with_data(
        "café".encode(),
        content_type=f"text/plain; charset={charset}",
    )

    result = call(server.url_for("/odd"))

    assert (result.status, result.error) == ("success", "")
    assert result.body == "café"


@pytest.mark.parametrize(
    "url", ["http://xn--/", "http://xn--a.xn--b/", "http://xn--ls8h.la/", "http://xn--zz-0ba.com/"]
)
def test_a_malformed_idna_host_is_an_invalid_url_outcome(url: str) -> None:
    result = call(url, policy=STRICT)

    assert result.status == "failure"
    assert result.error.startswith(f"invalid URL {url!r}: ")
    assert "unexpected error" not in result.error


def test_an_invalid_url_error_never_shows_the_password() -> None:
    result = call("http://ops:hunter2@xn--/", policy=STRICT)

    assert result.error.startswith("invalid URL 'http://ops:••••@xn--/'")
    assert "hunter2" not in result.error
