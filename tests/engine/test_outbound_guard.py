"""Every connection a tenant can cause passes the outbound guard at connect time, on the
address connected to: Apprise channels (any spelling of an internal host, redirects
Apprise follows, SMTP hosts named in a mailto URL, key files and URLs in parameters),
webhooks and endpoints. Real servers on 127.0.0.1 / ::1 stand in for internal hosts and
count the connections that reach them: a refusal means zero."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from endpoints.engine.executor import HttpRequest, perform_request
from endpoints.models import Tenant
from notifications.models import Channel, validate_target
from notifications.transports import DeliveryError, Message, send

MESSAGE = Message(subject="s", body="b", payload={"x": 1})


class CountingServer:
    """A TCP server that counts connections and answers each with one HTTP response
    (``redirect_to``: a 302 to that URL; otherwise 200 with an empty JSON body)."""

    def __init__(self, host: str = "127.0.0.1", *, redirect_to: str = "") -> None:
        counter = self
        self.connections = 0
        self._lock = threading.Lock()

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with counter._lock:
                    counter.connections += 1
                self.request.settimeout(2)
                try:
                    self.request.recv(65536)
                except OSError:
                    return
                if redirect_to:
                    head = f"HTTP/1.1 302 Found\r\nLocation: {redirect_to}\r\n"
                    body = b""
                else:
                    head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    body = b"{}"
                head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                self.request.sendall(head.encode() + body)

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        server_class = type(
            "Server",
            (socketserver.ThreadingTCPServer,),
            {"address_family": family, "daemon_threads": True, "allow_reuse_address": True},
        )
        self.server = server_class((host, 0), Handler)
        self.port = self.server.server_address[1]

    def __enter__(self) -> CountingServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def v4() -> Iterator[CountingServer]:
    with CountingServer("127.0.0.1") as server:
        yield server


@pytest.fixture
def v6() -> Iterator[CountingServer]:
    with CountingServer("::1") as server:
        yield server


@pytest.fixture
def strict(settings: Any) -> None:
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = False
    settings.CRONICORN_SSRF_ALLOWLIST = []


def stored_channel(tenant: Tenant, target: str, kind: str = "apprise") -> Channel:
    # Created without validation: a row from before the rules, or written by other code.
    return Channel.objects.create(tenant=tenant, name="c", kind=kind, target=target)


def apprise_targets(v4: CountingServer, v6: CountingServer) -> dict[str, str]:
    mapped = "::ffff:7f00:1"  # 127.0.0.1 as an IPv4-mapped IPv6 address
    return {
        "json to a name": f"json://localhost:{v4.port}/",
        "json to 127.0.0.1": f"json://127.0.0.1:{v4.port}/",
        "json to bracketed ::1": f"json://[::1]:{v6.port}/",
        "xml to IPv4-mapped": f"xml://[{mapped}]:{v4.port}/",
        "form to IPv4-mapped": f"form://[{mapped}]:{v4.port}/",
        "mailto with smtp=": (
            f"mailto://user:pass@example.com?smtp=127.0.0.1&port={v4.port}&to=a@example.com"
        ),
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    "case",
    [
        "json to a name",
        "json to 127.0.0.1",
        "json to bracketed ::1",
        "xml to IPv4-mapped",
        "form to IPv4-mapped",
        "mailto with smtp=",
    ],
)
def test_apprise_never_connects_to_an_internal_address_whatever_the_spelling(
    case: str, tenant: Tenant, v4: CountingServer, v6: CountingServer, settings: Any
) -> None:
    target = apprise_targets(v4, v6)[case]
    channel = stored_channel(tenant, target)
    # The stand-in is reachable: with the guard open the same URL connects.
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = True
    with contextlib.suppress(DeliveryError):  # the stand-in speaks no SMTP; it only counts
        send(channel, MESSAGE)
    reached = v4.connections + v6.connections
    assert reached >= 1
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = False
    with pytest.raises(DeliveryError, match="blocked"):
        send(channel, MESSAGE)
    assert v4.connections + v6.connections == reached  # nothing more arrived


@pytest.mark.django_db
def test_a_redirect_apprise_follows_to_an_internal_address_is_refused_at_connect(
    tenant: Tenant, settings: Any
) -> None:
    with (
        CountingServer("127.0.0.2") as internal,
        CountingServer("127.0.0.1", redirect_to=f"http://127.0.0.2:{internal.port}/") as allowed,
    ):
        # The first host is allowed by name; where it redirects is not.
        settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = False
        settings.CRONICORN_SSRF_ALLOWLIST = ["localhost"]
        channel = stored_channel(tenant, f"json://localhost:{allowed.port}/")
        with pytest.raises(DeliveryError, match=r"127\.0\.0\.2"):
            send(channel, MESSAGE)
        assert allowed.connections >= 1
        assert internal.connections == 0
        # With the guard open, Apprise does follow the redirect there.
        settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = True
        send(channel, MESSAGE)
        assert internal.connections >= 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("fcm://project@/device?keyfile=http://127.0.0.1:{port}/", "keyfile"),
        ("fcm://project@/device?keyfile=/proc/self/environ", "keyfile"),
        ("vapid://user@example.com/endpoint?subfile=/proc/self/environ", "subfile"),
        ("mailto://u:p@example.com?pgpkey=/etc/passwd&to=a@example.com", "pgpkey"),
        ("json://example.com/?rto=100000", "rto"),
        # Apprise reads parameters after a fragment too ("#channel?..."), so must we.
        ("json://example.com/#x?rto=100000", "rto"),
        ("mailto://u:p@example.com/#x?to=a@example.com&pgpkey=/etc/passwd", "pgpkey"),
    ],
)
def test_apprise_parameters_that_read_files_or_fetch_urls_are_refused(
    url: str, why: str, tenant: Tenant, v4: CountingServer, settings: Any
) -> None:
    target = url.format(port=v4.port)
    # Even when the operator allows those services, the parameters are refused.
    settings.CRONICORN_APPRISE_SCHEMES = [*settings.CRONICORN_APPRISE_SCHEMES, "fcm", "vapid"]
    with pytest.raises(ValidationError, match=why):
        validate_target("apprise", target)
    # (The send's error is scrubbed of pieces of the target, the parameter's name too.)
    with pytest.raises(DeliveryError, match="parameter: it"):
        send(stored_channel(tenant, target), MESSAGE)
    assert v4.connections == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url", ["fcm://project@/device", "syslog://", "dbus://", "mqtt://127.0.0.1/topic"]
)
def test_apprise_services_outside_the_allow_list_are_refused(url: str, tenant: Tenant) -> None:
    with pytest.raises(ValidationError, match="CRONICORN_APPRISE_SCHEMES"):
        validate_target("apprise", url)
    with pytest.raises(DeliveryError, match="not allowed"):
        send(stored_channel(tenant, url), MESSAGE)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "second",
    [
        "apprise://127.0.0.1:{port}/token",  # a service outside CRONICORN_APPRISE_SCHEMES
        "json://127.0.0.1:{port}/?rto=100000",  # a refused parameter
    ],
)
def test_an_apprise_target_holding_a_second_url_is_refused_before_anything_is_sent(
    second: str, tenant: Tenant, v4: CountingServer, settings: Any
) -> None:
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = True  # the guard is not what stops these
    with CountingServer("127.0.0.1") as other:
        # Apprise reads URLs separated by commas or spaces as several services: the
        # second one would escape the checks made on the first.
        target = f"json://127.0.0.1:{v4.port}/?a=b, {second.format(port=other.port)}"
        with pytest.raises(ValidationError, match="one Apprise URL per channel"):
            validate_target("apprise", target)
        with pytest.raises(DeliveryError, match="one Apprise URL per channel"):
            send(stored_channel(tenant, target), MESSAGE)
        assert (v4.connections, other.connections) == (0, 0)
    # One URL whose own parameters hold commas and spaces is still one URL.
    validate_target("apprise", "mailto://u:p@example.com?to=a@example.com, b@example.com")


@pytest.mark.django_db
@pytest.mark.usefixtures("strict")
def test_webhook_channels_are_refused_for_every_spelling_of_an_internal_host(
    tenant: Tenant, v4: CountingServer, v6: CountingServer
) -> None:
    for url in (
        f"http://127.0.0.1:{v4.port}/hook",
        f"http://localhost:{v4.port}/hook",
        f"http://[::1]:{v6.port}/hook",
        f"http://[::ffff:7f00:1]:{v4.port}/hook",
        f"http://[::ffff:127.0.0.1]:{v4.port}/hook",
    ):
        with pytest.raises(DeliveryError, match="blocked"):
            send(stored_channel(tenant, url, kind="webhook"), MESSAGE)
        Channel.objects.all().delete()
    assert v4.connections == 0
    assert v6.connections == 0


@pytest.mark.usefixtures("strict")
def test_endpoint_calls_are_refused_for_a_redirect_to_an_internal_host(settings: Any) -> None:
    with (
        CountingServer("127.0.0.2") as internal,
        CountingServer(
            "127.0.0.1", redirect_to=f"http://[::ffff:127.0.0.2]:{internal.port}/"
        ) as first,
    ):
        settings.CRONICORN_SSRF_ALLOWLIST = ["127.0.0.1/32"]
        result = perform_request(HttpRequest(url=f"http://127.0.0.1:{first.port}/"))
    assert result.status == "failure"
    assert "blocked" in result.error
    assert first.connections == 1
    assert internal.connections == 0


def test_guarded_connections_refuse_unix_sockets_and_leave_other_threads_alone(
    tmp_path: Any,
) -> None:
    from endpoints.engine.guard import NetworkPolicy
    from endpoints.engine.outbound import ConnectionRefusedByGuard, guarded_connections

    path = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    try:
        with guarded_connections(NetworkPolicy(allow_private=False)) as refusals:
            with socket.socket(socket.AF_UNIX) as client, pytest.raises(ConnectionRefusedByGuard):
                client.connect(path)
            # Another thread (the executor's loop, the database) is not guarded.
            outcome: list[str] = []

            def other() -> None:
                with socket.socket(socket.AF_UNIX) as c:
                    c.connect(path)
                    outcome.append("connected")

            thread = threading.Thread(target=other)
            thread.start()
            thread.join(5)
        assert outcome == ["connected"]
        assert len(refusals) == 1
    finally:
        listener.close()
