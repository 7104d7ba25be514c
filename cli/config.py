"""Where the command line finds its server and key.

With ``--profile NAME`` (or ``CRONICORN_PROFILE``): that profile of the config file. Without:
``CRONICORN_URL`` and ``CRONICORN_API_KEY`` from the environment, each falling back to the
profile named ``default``. ``--url`` overrides the URL either way. The file is
``$CRONICORN_CONFIG``, else ``$XDG_CONFIG_HOME/cronicorn/config.toml``, else
``~/.config/cronicorn/config.toml``::

    [profiles.default]
    url = "https://cron.example.com"
    api_key = "cc_..."
    timeout = 60          # seconds to wait for an answer (optional)

    [profiles.staging]
    url = "https://cron.staging.example.com"
    api_key_env = "STAGING_CRONICORN_KEY"   # or read the key from this variable
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_TIMEOUT = 60.0


class ConfigProblem(Exception):
    """The server or key cannot be found, or the config file is wrong: a usage error."""


@dataclass(frozen=True)
class Settings:
    url: str
    key: str
    timeout: float
    warnings: tuple[str, ...] = ()


def config_path(environ: Mapping[str, str]) -> Path:
    if environ.get("CRONICORN_CONFIG"):
        return Path(environ["CRONICORN_CONFIG"])
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "cronicorn" / "config.toml"


def load_settings(
    environ: Mapping[str, str], *, profile: str | None = None, url: str | None = None
) -> Settings:
    path = config_path(environ)
    chosen = profile or environ.get("CRONICORN_PROFILE") or None
    profiles, warnings = _read_profiles(path)
    if chosen is not None and chosen not in profiles:
        known = ", ".join(sorted(profiles)) or "none"
        raise ConfigProblem(f"No profile {chosen!r} in {path} (profiles there: {known}).")
    entry = profiles.get(chosen or "default", {})
    where = f"profile {chosen or 'default'!r} of {path}"
    if chosen is None:
        found_url = url or environ.get("CRONICORN_URL") or entry.get("url")
        key = environ.get("CRONICORN_API_KEY") or _profile_key(entry, environ, where)
    else:
        found_url = url or entry.get("url")
        key = _profile_key(entry, environ, where)
    if not found_url:
        raise ConfigProblem(
            "No server URL: set CRONICORN_URL (e.g. https://cron.example.com), pass --url, "
            f"or give url in {where}."
        )
    if not str(found_url).startswith(("http://", "https://")):
        raise ConfigProblem(f"The server URL {found_url!r} must start with http:// or https://.")
    if not key:
        raise ConfigProblem(
            "No API key: set CRONICORN_API_KEY (create a key in the admin or with manage.py "
            f"create_api_key), or give api_key or api_key_env in {where}."
        )
    timeout = entry.get("timeout", DEFAULT_TIMEOUT)
    if not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigProblem(f"timeout in {where} must be a number of seconds above 0.")
    return Settings(str(found_url), str(key), float(timeout), tuple(warnings))


def _read_profiles(path: Path) -> tuple[dict[str, dict[str, Any]], list[str]]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}, []
    except OSError as exc:
        raise ConfigProblem(f"{path} cannot be read ({exc}).") from None
    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigProblem(f"{path} is not valid TOML: {exc}.") from None
    profiles = document.get("profiles", {})
    if not isinstance(profiles, dict) or not all(isinstance(p, dict) for p in profiles.values()):
        raise ConfigProblem(f"{path}: profiles are tables, e.g. [profiles.default].")
    warnings = []
    if os.name == "posix" and path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        warnings.append(f"{path} holds API keys and others may read it; chmod 600 {path}")
    return profiles, warnings


def _profile_key(entry: dict[str, Any], environ: Mapping[str, str], where: str) -> str | None:
    if entry.get("api_key_env"):
        name = str(entry["api_key_env"])
        if not environ.get(name):
            raise ConfigProblem(f"{where} reads its key from ${name}, which is not set.")
        return environ[name]
    value = entry.get("api_key")
    return str(value) if value else None
