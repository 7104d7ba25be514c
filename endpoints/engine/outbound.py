"""The SSRF guard at the socket, for code that makes its own connections (Apprise).

The executor guards its own requests in aiohttp's resolver. Libraries such as Apprise
open sockets themselves (``requests``, ``smtplib``, plugin-specific clients), follow
redirects themselves and pick hosts from URL parameters (``mailto://…?smtp=host``). So
inside ``guarded_connections(policy)`` every ``connect`` made *by this thread* is checked
by the same ``AddressGuard`` the executor uses, on the address actually connected to,
whatever spelling produced it: a name, a bracketed IPv6 literal, an IPv4-mapped IPv6
address, a redirect's Location. Non-IP sockets (Unix domain sockets) are refused.

The check runs before the connection is made (nothing reaches the refused host). A
refused connect raises ``ConnectionRefusedByGuard`` (a ``PermissionError``, so libraries
treat it as a failed connection and stop); the refusals are also collected, so the
caller can report the guard's message even when a library swallowed the error.

Host names in ``CRONICORN_SSRF_ALLOWLIST`` work here too: the addresses such a name
resolves to through ``socket.getaddrinfo`` during the guarded call are allowed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from collections.abc import Iterator
from typing import Any

from endpoints.engine.guard import AddressGuard, BlockedAddressError, NetworkPolicy


class ConnectionRefusedByGuard(PermissionError):
    """The guard refused a connection before it was made."""


class _Guarded(threading.local):
    guard: AddressGuard | None = None
    allowed: set[str]
    refusals: list[str]

    def __init__(self) -> None:
        self.allowed = set()
        self.refusals = []


_state = _Guarded()
_install_lock = threading.Lock()
_installed = False
_original_connect = socket.socket.connect
_original_connect_ex = socket.socket.connect_ex
_original_sendto = socket.socket.sendto
_original_getaddrinfo = socket.getaddrinfo


@contextlib.contextmanager
def guarded_connections(policy: NetworkPolicy) -> Iterator[list[str]]:
    """Check every connection this thread makes until the block ends; yields the list
    of refusals (messages), filled as they happen."""
    _install()
    previous = (_state.guard, _state.allowed, _state.refusals)
    _state.guard, _state.allowed, _state.refusals = AddressGuard(policy), set(), []
    try:
        yield _state.refusals
    finally:
        _state.guard, _state.allowed, _state.refusals = previous


def _install() -> None:
    """Wrap the socket methods once per process. Outside a guarded block (no guard on
    the thread) the wrappers only add one attribute lookup."""
    global _installed
    with _install_lock:
        if _installed:
            return
        socket.socket.connect = _connect  # type: ignore[method-assign,assignment]
        socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign,assignment]
        socket.socket.sendto = _sendto  # type: ignore[method-assign,assignment]
        socket.getaddrinfo = _getaddrinfo
        _installed = True


def _connect(sock: socket.socket, address: Any) -> None:
    _original_connect(sock, _checked(sock, address))


def _connect_ex(sock: socket.socket, address: Any) -> int:
    return _original_connect_ex(sock, _checked(sock, address))


def _sendto(sock: socket.socket, data: Any, *args: Any) -> int:
    # sendto(data, address) or sendto(data, flags, address): UDP needs no connect.
    if _state.guard is not None and args:
        args = (*args[:-1], _checked(sock, args[-1]))
    return _original_sendto(sock, data, *args)  # type: ignore[arg-type]


def _getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    infos = _original_getaddrinfo(host, *args, **kwargs)
    guard = _state.guard
    if guard is not None and isinstance(host, str | bytes):
        name = host.decode() if isinstance(host, bytes) else host
        if name.lower().rstrip(".") in guard.hostnames:
            _state.allowed.update(str(info[4][0]) for info in infos)
    return infos


def _checked(sock: socket.socket, address: Any) -> Any:
    """``address`` if the guard allows it; raises ConnectionRefusedByGuard otherwise. A
    host name (not an address) is resolved here and the first checked address used, so
    the name cannot resolve differently between the check and the connection."""
    guard = _state.guard
    if guard is None:
        return address
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        _refuse("blocked: only network (IP) connections may be made for a channel")
    host, port, *rest = address
    host = host.decode() if isinstance(host, bytes) else str(host)
    try:
        ipaddress.ip_address(host.split("%")[0])
        addresses = [host]
    except ValueError:
        family = sock.family
        infos = _original_getaddrinfo(host, port, family, sock.type)
        addresses = [str(info[4][0]) for info in infos]
        if host.lower().rstrip(".") in guard.hostnames:
            _state.allowed.update(addresses)
    for found in addresses:
        if found in _state.allowed:
            continue
        try:
            guard.check(host, [found], port)
        except BlockedAddressError as exc:
            _refuse(str(exc))
    return (addresses[0], port, *rest)


def _refuse(message: str) -> None:
    _state.refusals.append(message)
    raise ConnectionRefusedByGuard(message)
