"""The file's keys, their types and conversions, read into specs; every problem is
reported with its location (``tenants[0].jobs[2].endpoints[0].baseline_cron: ...``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, time
from typing import Any

from django.conf import settings
from django.db import models

from endpoints.config_io.documents import ConfigError
from endpoints.models import HttpMethod
from endpoints.policies import policy_problems
from endpoints.schedules import ScheduleError, format_interval, parse_interval
from endpoints.secrets import (
    SECRET_REFERENCE_PREFIX,
    is_secret_header,
)
from endpoints.validation import json_shape_problem, line_problem

FORMAT_VERSION = 1
_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# --- Schema: keys, types and conversions ----------------------------------------------


class _Invalid(ValueError):
    """A value of the wrong shape; the message says what was expected."""


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"expected text, got {_type_name(value)}")
    return value


def _name(value: Any) -> str:
    text = _text(value).strip()
    if not text:
        raise _Invalid("a name cannot be empty")
    if problem := line_problem(text):  # names are looked up before the models check them
        raise _Invalid(problem)
    if "/" in text:
        raise _Invalid(f"{text!r}: names cannot contain '/' (it separates job/endpoint)")
    return text


def _duration(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _Invalid(f"expected a duration like 30s, 5m or 1h, got {_type_name(value)}")
    try:
        return parse_interval(value)
    except ScheduleError as exc:
        raise _Invalid(str(exc)) from None


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"expected a whole number, got {_type_name(value)}")
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"expected true or false, got {_type_name(value)}")
    return value


def _method(value: Any) -> str:
    method = _text(value).strip().upper()
    if method not in HttpMethod.values:
        raise _Invalid(f"unknown method {value!r}; use one of {', '.join(HttpMethod.values)}")
    return method


def _names(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _Invalid(f"expected a list of names, got {_type_name(value)}")
    for item in value:
        if problem := line_problem(item):
            raise _Invalid(f"{item[:40]!r}: {problem}")
    return sorted(set(value))


def _json_value(value: Any) -> Any:
    if problem := json_shape_problem(value, max_depth=settings.CRONICORN_MAX_JSON_DEPTH):
        raise _Invalid(problem)
    return value


def _run_policy(value: Any) -> dict[str, Any]:
    """A run policy mapping (``endpoints.policies``); null or {} for the defaults."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Invalid(f"expected a mapping of policy keys, got {_type_name(value)}")
    # YAML reads an unquoted 2026-12-01T09:00:00+01:00 as a date-time: kept as its text.
    value = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in value.items()}
    if problems := policy_problems(value):
        raise _Invalid(" ".join(problems))
    return value


def _type_name(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "text", bool: "true/false"}
    if value is None:
        return "nothing (null)"
    return names.get(type(value), f"{type(value).__name__} {value!r}")


@dataclass(frozen=True)
class Key:
    model_field: str
    convert: Callable[[Any], Any]
    to_file: Callable[[Any], Any] = lambda value: value


def _interval_to_file(value: int | None) -> str | None:
    return format_interval(value) if value else None


def _clock(value: Any) -> time:
    """A UTC clock time, ``22:00`` or ``22:00:30`` (quiet hours)."""
    text = _text(value).strip()
    try:
        parsed = time.fromisoformat(text)
    except ValueError:
        raise _Invalid(f"expected a UTC clock time like 22:00, got {text!r}") from None
    if parsed.tzinfo is not None:
        raise _Invalid("quiet hours are in UTC: write the time without an offset, e.g. 22:00")
    return parsed


def _clock_to_file(value: time | None) -> str | None:
    return value.strftime("%H:%M" if not value.second else "%H:%M:%S") if value else None


TENANT_KEYS = {
    "max_endpoints": Key("max_endpoints", _whole),
    "min_interval": Key("min_interval_ms", _duration, _interval_to_file),
    "monthly_token_budget": Key("monthly_token_budget", _whole),
    # Checked by the model's validation (host names, whole requests per second).
    "host_rate_limits": Key("host_rate_limits", lambda value: value),
}
JOB_KEYS = {
    "description": Key("description", _text),
    "max_concurrent": Key("max_concurrent", _whole),
    "run_policy": Key("run_policy", _run_policy),
}
ENDPOINT_KEYS = {
    "description": Key("description", _text),
    "url": Key("url", _text),
    "method": Key("method", _method),
    "headers": Key("headers", lambda value: value),  # checked with its references
    "secret_headers": Key("secret_header_names", _names),
    "body": Key("body", _json_value),
    "timeout": Key("timeout_ms", _duration, _interval_to_file),
    "max_response_size_kb": Key("max_response_size_kb", _whole),
    "baseline_cron": Key("baseline_cron", _text),
    "timezone": Key("timezone", _text),
    "baseline_interval": Key("baseline_interval_ms", _duration, _interval_to_file),
    "min_interval": Key("min_interval_ms", _duration, _interval_to_file),
    "max_interval": Key("max_interval_ms", _duration, _interval_to_file),
    "run_policy": Key("run_policy", _run_policy),
}
CHANNEL_KEYS = {
    "kind": Key("kind", _text),
    "target": Key("target", lambda value: value),  # resolved with its references
    "enabled": Key("enabled", _flag),
    "escalation_only": Key("escalation_only", _flag),
}
ALERT_KEYS = {
    "enabled": Key("enabled", _flag),
    "after_failures": Key("after_failures", _whole),
    "on_recovery": Key("on_recovery", _flag),
    "on_pause": Key("on_pause", _flag),
    "stale_factor": Key("stale_factor", _whole),
    "quiet_from": Key("quiet_from", _clock, _clock_to_file),
    "quiet_until": Key("quiet_until", _clock, _clock_to_file),
    "remind_every_minutes": Key("remind_every_minutes", _whole),
    "escalate_after_minutes": Key("escalate_after_minutes", _whole),
    # A channel of the same tenant, by name (the import finds it: ``ESCALATE_TO``).
    "escalate_to": Key("escalate_to", _name, lambda channel: channel.name if channel else None),
}
ESCALATE_TO = "escalate_to"
SCHEDULE_CHOICE = frozenset({"baseline_cron", "baseline_interval_ms"})
DEFINITION_FIELDS = tuple(key.model_field for key in ENDPOINT_KEYS.values())


# ``failed`` names the model fields whose keys already had problems: the model's
# full_clean leaves them out, since it would only add noise about the same keys.


@dataclass
class AlertSpec:
    """A job's alert rule, or an endpoint's override of it (the notifications app)."""

    where: str
    values: dict[str, Any]
    failed: frozenset[str]


@dataclass
class EndpointSpec:
    where: str
    name: str
    values: dict[str, Any]
    failed: frozenset[str]
    alerts: AlertSpec | None = None


@dataclass
class JobSpec:
    where: str
    name: str
    values: dict[str, Any]
    failed: frozenset[str]
    endpoints: list[EndpointSpec]
    alerts: AlertSpec | None = None


@dataclass
class ChannelSpec:
    where: str
    name: str
    values: dict[str, Any]
    failed: frozenset[str]


@dataclass
class TenantSpec:
    where: str
    name: str
    values: dict[str, Any]
    members: list[str] | None
    failed: frozenset[str]
    jobs: list[JobSpec]
    channels: list[ChannelSpec] = field(default_factory=list)


@dataclass
class _Reader:
    """Walks a parsed document, collecting every problem instead of stopping at the first."""

    environ: Mapping[str, str]
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def add(self, where: str, message: str) -> None:
        self.problems.append(f"{where or '(top level)'}: {message}")

    def mapping(self, value: Any, where: str, allowed: Iterable[str]) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.add(where, f"expected a mapping of keys to values, got {_type_name(value)}")
            return None
        allowed = list(allowed)
        for key in value:
            if key not in allowed:
                self.add(
                    _at(where, key),
                    f"unknown key; allowed here: {', '.join(allowed)}",
                )
        return value

    def items(self, parent: dict[str, Any], key: str, where: str) -> list[tuple[str, Any]]:
        value = parent.get(key, [])
        if not isinstance(value, list):
            self.add(_at(where, key), f"expected a list, got {_type_name(value)}")
            return []
        return [(f"{_at(where, key)}[{index}]", item) for index, item in enumerate(value)]

    def values(self, raw: dict[str, Any], where: str, keys: dict[str, Key]) -> dict[str, Any]:
        converted = {}
        for key, spec in keys.items():
            if key in raw:
                try:
                    converted[spec.model_field] = spec.convert(raw[key])
                except _Invalid as exc:
                    self.add(_at(where, key), str(exc))
        return converted

    def name(self, raw: dict[str, Any], where: str, seen: dict[str, str], kind: str) -> str:
        if "name" not in raw:
            self.add(where, f"every {kind} needs a name")
            return ""
        try:
            name = _name(raw["name"])
        except _Invalid as exc:
            self.add(f"{where}.name", str(exc))
            return ""
        if name in seen:
            self.add(f"{where}.name", f"duplicate {kind} name {name!r} (also at {seen[name]})")
        seen.setdefault(name, where)
        return name

    def failed_fields(self, start: int, where: str, keys: dict[str, Key]) -> frozenset[str]:
        """Model fields of the entry at ``where`` with problems reported since ``start``."""
        prefix = f"{where}."
        failed = set()
        for problem in self.problems[start:]:
            if problem.startswith(prefix):
                key = re.split(r"[.\[:]", problem[len(prefix) :], maxsplit=1)[0]
                failed.add(keys[key].model_field if key in keys else key)
        return frozenset(failed)

    def resolve(self, value: Any, where: str) -> str:
        """Replace each ``${CRONICORN_SECRET_NAME}`` in ``value`` by that environment
        variable; a reference to any other variable is a problem, never read."""
        text = _text(value)

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if not _ENV_NAME.match(name) or not name.startswith(SECRET_REFERENCE_PREFIX):
                self.add(
                    where,
                    f"${{{name}}} is not a secret reference: only environment variables "
                    f"named {SECRET_REFERENCE_PREFIX}* are read; write "
                    f"${{{SECRET_REFERENCE_PREFIX}NAME}} and export that variable",
                )
                return ""
            if name not in self.environ:
                self.add(where, f"environment variable {name} is not set; export it first")
                return ""
            return self.environ[name]

        return _REFERENCE.sub(substitute, text)


@dataclass
class Config:
    tenants: list[TenantSpec]
    warnings: list[str]
    problems: list[str]


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def read_config(document: Any, *, environ: Mapping[str, str]) -> Config:
    """Check the document's keys and types and convert its values.

    Problems in entries are collected in ``Config.problems`` (``plan_import`` adds the
    model's and raises them all); only a document that is not a mapping raises here.
    """
    reader = _Reader(environ)
    root = reader.mapping(document, "", ["version", "tenants"])
    if root is None:
        raise ConfigError(reader.problems)
    if root.get("version", FORMAT_VERSION) != FORMAT_VERSION:
        reader.add("version", f"unsupported version {root['version']!r}; this reads version 1")
    if "tenants" not in root:
        reader.add("", "the file needs a 'tenants' list")
    seen: dict[str, str] = {}
    tenants = [
        spec
        for where, raw in reader.items(root, "tenants", "")
        if (spec := _read_tenant(reader, raw, where, seen)) is not None
    ]
    return Config(tenants, reader.warnings, reader.problems)


def _read_tenant(reader: _Reader, raw: Any, where: str, seen: dict[str, str]) -> TenantSpec | None:
    allowed = ["name", "members", "hmac_secret", "channels", "jobs", *TENANT_KEYS]
    start = len(reader.problems)
    if (mapping := reader.mapping(raw, where, allowed)) is None:
        return None
    values = reader.values(mapping, where, TENANT_KEYS)
    if "hmac_secret" in mapping:
        try:
            values["hmac_secret"] = reader.resolve(mapping["hmac_secret"], f"{where}.hmac_secret")
        except _Invalid as exc:
            reader.add(f"{where}.hmac_secret", str(exc))
    members = None
    if "members" in mapping:
        try:
            members = _names(mapping["members"])
        except _Invalid as exc:
            reader.add(f"{where}.members", str(exc))
    name = reader.name(mapping, where, seen, "tenant")
    failed = reader.failed_fields(start, where, TENANT_KEYS)
    job_names: dict[str, str] = {}
    jobs = [
        spec
        for job_where, job_raw in reader.items(mapping, "jobs", where)
        if (spec := _read_job(reader, job_raw, job_where, job_names)) is not None
    ]
    channel_names: dict[str, str] = {}
    channels = [
        channel
        for channel_where, channel_raw in reader.items(mapping, "channels", where)
        if (channel := _read_channel(reader, channel_raw, channel_where, channel_names)) is not None
    ]
    return TenantSpec(where, name, values, members, failed, jobs, channels)


def _read_channel(
    reader: _Reader, raw: Any, where: str, seen: dict[str, str]
) -> ChannelSpec | None:
    start = len(reader.problems)
    if (mapping := reader.mapping(raw, where, ["name", *CHANNEL_KEYS])) is None:
        return None
    values = reader.values(mapping, where, CHANNEL_KEYS)
    if "target" in mapping:
        try:
            values["target"] = reader.resolve(mapping["target"], f"{where}.target")
        except _Invalid as exc:
            reader.add(f"{where}.target", str(exc))
    name = reader.name(mapping, where, seen, "channel")
    return ChannelSpec(where, name, values, reader.failed_fields(start, where, CHANNEL_KEYS))


def _read_job(reader: _Reader, raw: Any, where: str, seen: dict[str, str]) -> JobSpec | None:
    start = len(reader.problems)
    if (mapping := reader.mapping(raw, where, ["name", "endpoints", "alerts", *JOB_KEYS])) is None:
        return None
    name = reader.name(mapping, where, seen, "job")
    values = reader.values(mapping, where, JOB_KEYS)
    failed = reader.failed_fields(start, where, JOB_KEYS)
    endpoint_names: dict[str, str] = {}
    endpoints = [
        spec
        for ep_where, ep_raw in reader.items(mapping, "endpoints", where)
        if (spec := _read_endpoint(reader, ep_raw, ep_where, endpoint_names)) is not None
    ]
    return JobSpec(where, name, values, failed, endpoints, _read_alerts(reader, mapping, where))


def _read_alerts(reader: _Reader, mapping: dict[str, Any], where: str) -> AlertSpec | None:
    if "alerts" not in mapping:
        return None
    at = _at(where, "alerts")
    start = len(reader.problems)
    if (raw := reader.mapping(mapping["alerts"], at, ALERT_KEYS)) is None:
        return None
    values = reader.values(raw, at, ALERT_KEYS)
    return AlertSpec(at, values, reader.failed_fields(start, at, ALERT_KEYS))


def _read_endpoint(
    reader: _Reader, raw: Any, where: str, seen: dict[str, str]
) -> EndpointSpec | None:
    start = len(reader.problems)
    if (mapping := reader.mapping(raw, where, ["name", "alerts", *ENDPOINT_KEYS])) is None:
        return None
    name = reader.name(mapping, where, seen, "endpoint")
    values = reader.values(mapping, where, ENDPOINT_KEYS)
    if "headers" in mapping:
        values["headers"] = _read_headers(reader, mapping["headers"], f"{where}.headers")
    if isinstance(values.get("url"), str):
        values["url"] = reader.resolve(values["url"], f"{where}.url")
    secret = set(values.get("secret_header_names", []))
    given = {header.lower() for header in values.get("headers", {})}
    unknown = {name for name in secret if name.lower() not in given}
    if unknown:
        reader.add(
            f"{where}.secret_headers",
            f"{', '.join(sorted(unknown))} not among the headers; list only headers you set",
        )
    for header, text in _raw_headers(mapping).items():
        if _REFERENCE.search(text) and not is_secret_header(header, secret):
            reader.warnings.append(
                f"{where}.headers.{header}: comes from the environment but is not listed in "
                "secret_headers, so it is shown in the admin and written by export"
            )
    alerts = _read_alerts(reader, mapping, where)
    failed = reader.failed_fields(start, where, ENDPOINT_KEYS)
    return EndpointSpec(where, name, values, failed - {"alerts"}, alerts)


def _raw_headers(mapping: dict[str, Any]) -> dict[str, str]:
    headers = mapping.get("headers")
    if not isinstance(headers, dict):
        return {}
    return {k: v for k, v in headers.items() if isinstance(k, str) and isinstance(v, str)}


def _read_headers(reader: _Reader, raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, dict):
        reader.add(where, f"expected a mapping of header names to text, got {_type_name(raw)}")
        return {}
    headers = {}
    for header, value in raw.items():
        if not isinstance(header, str):
            # YAML reads `200:` or `true:` as a number or a boolean: the name is wrong.
            reader.add(
                f"{where}.{header}",
                f"header names must be text, got {_type_name(header)}; quote it",
            )
            continue
        if not isinstance(value, str):
            reader.add(
                f"{where}.{header}",
                f"header values must be text, got {_type_name(value)}; quote it",
            )
            continue
        headers[header] = reader.resolve(value, f"{where}.{header}")
    return headers


def field_default(model: type[models.Model], name: str) -> Any:
    return model._meta.get_field(name).get_default()  # type: ignore[union-attr]


def same_value(name: str, old: Any, new: Any) -> bool:
    if name in ("min_interval_ms", "max_interval_ms"):
        return (old or None) == (new or None)  # zero and empty both mean "no bound"
    if name in ("headers", "body", "secret_header_names", "run_policy"):
        # JSON equality: in Python True == 1, but in a request body they differ.
        return json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True)
    return bool(old == new)
