"""The SSRF guard: which addresses a tenant's request may reach.

Private, loopback, link-local, CGNAT, metadata and other non-public addresses are
refused unless ``CRONICORN_ALLOW_PRIVATE_ADDRESSES`` or ``CRONICORN_SSRF_ALLOWLIST`` allow
them; IPv6 forms that embed an IPv4 address (mapped, 6to4, NAT64) are judged by that
address. The executor applies it to every address a host resolves to, at connect time
(its resolver), so redirects and DNS rebinding pass through it too.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

ALLOW_HINT = "set CRONICORN_ALLOW_PRIVATE_ADDRESSES or CRONICORN_SSRF_ALLOWLIST to allow it"


@dataclass(frozen=True)
class NetworkPolicy:
    allow_private: bool
    # Hosts, addresses or CIDRs allowed even if private; `host:port` (`[v6]:port`) allows
    # that port only, e.g. the local set-up's own demo origin, not all of loopback.
    allowlist: tuple[str, ...] = ()
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


class ExecutorError(Exception):
    """A request failure already worded for a person; it becomes the result's error."""


class BlockedAddressError(ExecutorError):
    """The SSRF guard refused an address before any connection was made."""


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
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
    """Checks the addresses a host resolved to: all must be allowed by the policy, so a
    name that mixes public and private addresses is refused rather than half-trusted."""

    def __init__(self, policy: NetworkPolicy) -> None:
        self.allow_private = policy.allow_private
        self.networks: list[tuple[IPNetwork, int | None]] = []
        self.hostnames: set[str] = set()  # allowed on any port
        self.host_ports: set[tuple[str, int]] = set()
        for entry in policy.allowlist:
            host, port = split_port(entry.strip())
            try:
                self.networks.append((ipaddress.ip_network(host, strict=False), port))
            except ValueError:
                name = host.lower().rstrip(".")
                if port is None:
                    self.hostnames.add(name)
                else:
                    self.host_ports.add((name, port))

    def check(self, host: str, addresses: Iterable[str], port: int | None = None) -> None:
        """Raise BlockedAddressError unless every address of `host` may be called on
        `port` (None: an entry naming a port does not apply)."""
        name = host.lower().rstrip(".")
        if self.allow_private or name in self.hostnames or (name, port) in self.host_ports:
            return
        for address in addresses:
            self._check(host, ipaddress.ip_address(address.split("%")[0]), port)

    def _check(self, host: str, ip: IPAddress, port: int | None) -> None:
        kind = blocked_kind(ip)
        if kind is None or self._allowlisted(ip, port):
            return
        if ip_literal(host) is not None:
            raise BlockedAddressError(f"blocked: {host} is {kind} address; {ALLOW_HINT}")
        raise BlockedAddressError(f"blocked: {host} resolves to {ip}, {kind} address; {ALLOW_HINT}")

    def _allowlisted(self, ip: IPAddress, port: int | None) -> bool:
        candidates = [ip] + [e for e in [_embedded_ipv4(ip)] if e is not None]
        return any(
            c in network and allowed in (None, port)
            for c in candidates
            for network, allowed in self.networks
        )


def split_port(entry: str) -> tuple[str, int | None]:
    """``host:port`` or ``[v6]:port`` into its parts; anything else (a host, an address,
    a CIDR, a bare IPv6 address) has no port."""
    match = re.fullmatch(r"\[([^\]]+)\]:(\d{1,5})|([^:\[\]]+):(\d{1,5})", entry)
    if match is None:
        return entry.strip("[]"), None
    host = match.group(1) or match.group(3)
    return host, int(match.group(2) or match.group(4))


@functools.lru_cache(maxsize=4096)
def ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None
