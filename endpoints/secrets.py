"""What counts as a secret, decided in one place for every interface.

Secrets are: the values of headers an endpoint declares secret (``secret_header_names``,
compared case-insensitively, as HTTP compares header names) or whose names look secret
(``SECRET_HEADER_WORDS``); the password in a URL's userinfo (``https://user:pw@host``);
and the tenant's HMAC secret. Masking, export, redirects and logs all ask this module,
so a name written ``x-partner`` in one place and ``X-Partner`` in another is one secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

MASK = "••••"
SECRET_HEADER_WORDS = ("authorization", "cookie", "token", "secret", "key", "password", "signature")
# ``${...}`` references an import may read from the environment: only these, so a file
# cannot send the server's own settings (DJANGO_SECRET_KEY, the LLM key) to any URL.
SECRET_REFERENCE_PREFIX = "CRONICORN_SECRET_"  # noqa: S105 - a name prefix, not a secret
# scheme://userinfo@ — the userinfo runs to the netloc's last "@" (RFC 3986 3.2.1).
_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#]*)@")
# The same test for the database (``url__regex``; PostgreSQL and SQLite both take it).
USERINFO_REGEX = r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@"


def looks_secret(header_name: str) -> bool:
    lowered = header_name.lower()
    return any(word in lowered for word in SECRET_HEADER_WORDS)


def is_secret_header(header_name: str, declared: Iterable[str] = ()) -> bool:
    """Declared secret (in any letter case) or named like a credential."""
    lowered = header_name.lower()
    return looks_secret(header_name) or any(lowered == name.lower() for name in declared)


def mask_headers(headers: Mapping[str, str], secret_names: Iterable[str] = ()) -> dict[str, str]:
    """Copy of ``headers`` safe to log or display: secret values replaced by MASK."""
    declared = tuple(secret_names)
    return {
        name: MASK if is_secret_header(name, declared) else value for name, value in headers.items()
    }


def url_password(url: str) -> str:
    """The password in the URL's userinfo, or "" when it has none."""
    match = _USERINFO.match(url)
    if match is None:
        return ""
    _user, _sep, password = match["userinfo"].partition(":")
    return password


def replace_url_password(url: str, password: str) -> str:
    """The URL with its userinfo password replaced by ``password`` (a mask, a reference
    or the stored value); a URL without a password comes back unchanged."""
    match = _USERINFO.match(url)
    if match is None or ":" not in match["userinfo"]:
        return url
    user = match["userinfo"].partition(":")[0]
    return f"{match['scheme']}{user}:{password}@{url[match.end() :]}"


def redact_url(url: str) -> str:
    """The URL to show a person: its password, if any, replaced by MASK."""
    return replace_url_password(url, MASK)


def strip_userinfo(url: str) -> str:
    """The URL without ``user:password@``: what a run records and logs may show."""
    match = _USERINFO.match(url)
    return url if match is None else match["scheme"] + url[match.end() :]
