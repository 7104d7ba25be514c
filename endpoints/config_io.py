"""Configuration as code: tenants, jobs and endpoints in a YAML or JSON file.

The format (``export_config`` writes it, ``plan_import`` reads it)::

    version: 1
    tenants:
      - name: Acme
        members: [alice]              # usernames; omit to leave members as they are
        max_endpoints: 100            # tenant settings: omit to leave them as they are
        min_interval: 1s
        monthly_token_budget: 500000
        hmac_secret: ${CRONICORN_SECRET_ACME_HMAC}
        channels:                     # alert channels (the notifications app)
          - name: oncall
            kind: webhook             # email | webhook | apprise
            target: ${CRONICORN_SECRET_ACME_ONCALL_URL}
            enabled: true
        jobs:
          - name: billing
            description: Nightly billing and its health checks.
            max_concurrent: 1
            endpoints:
              - name: queue
                url: https://billing.example.com/queue
                method: GET
                headers: {Authorization: "${CRONICORN_SECRET_BILLING_TOKEN}"}
                secret_headers: [Authorization]
                body: {"probe": true}
                timeout: 10s
                max_response_size_kb: 100
                baseline_interval: 5m         # or baseline_cron + timezone
                min_interval: 30s
                max_interval: 1h
                description: Tighten while the queue is deep.

Jobs and endpoints are declarative: a key left out takes its default, so the file is the
whole definition. Runtime state (next run, hints, pauses, failures, job status) is never
touched. Durations accept ``90s``/``5m``/``1h30m``/``1d`` or plain milliseconds.

Secrets: ``${CRONICORN_SECRET_NAME}`` in a header value, the URL, ``hmac_secret`` or a
channel's ``target`` is replaced by that environment variable (unset is an error). Only
names starting with ``CRONICORN_SECRET_`` are read: any other ``${...}`` is refused, so a
file cannot send the server's own settings (``DJANGO_SECRET_KEY``, the LLM key) to a URL
of its choice. Export never writes a secret: every secret header (listed in
``secret_headers`` in any letter case, or named like a credential), a URL's password, the
HMAC secret and every channel target are written as a ``${CRONICORN_SECRET_...}``
reference named after tenant, job, endpoint and header (or channel), which must be set in
the environment when the file is imported again. Channels, like jobs, are declarative;
ones the file leaves out are kept.

Import is all or nothing: every entry is checked (schema, then the model's ``full_clean``,
the single home of the rules) before anything is written, every problem is reported with
its location (``tenants[0].jobs[2].endpoints[0].baseline_cron: ...``), and the writes
happen in one transaction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import yaml
from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import IntegrityError, models, transaction
from yaml._yaml import CParser

from endpoints.models import Endpoint, HttpMethod, Job, Tenant
from endpoints.schedules import ScheduleError, format_interval, parse_interval
from endpoints.scheduling import archive_endpoint, replan_after_edit
from endpoints.secrets import (
    MASK,
    SECRET_REFERENCE_PREFIX,
    is_secret_header,
    replace_url_password,
    url_password,
)
from endpoints.validation import json_shape_problem, json_text_depth_problem, line_problem

FORMAT_VERSION = 1
_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class ConfigError(Exception):
    """The file cannot be imported; ``problems`` lists each one as ``location: message``."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


# --- Reading and writing documents ----------------------------------------------------


# A file is untrusted: its size, nesting and alias expansion are bounded before its
# content is read, so a hostile file costs a message, never the process's memory, time
# or stack. A document nests ``FILE_NESTING`` levels above an endpoint's body.
FILE_NESTING = 16
MAX_ALIASES = 100
MAX_FILE_VALUES = 500_000
MERGE_TAG = "tag:yaml.org,2002:merge"
# Keys one YAML mapping may hold, written or gathered through merge keys (<<): far more
# than any mapping of the format needs (headers are capped far lower). PyYAML builds
# mappings in Python at ≈ 20 µs a key, so 100 000 keys cost two seconds; refused at this
# size they cost a tenth of that. JSON objects are read in C, in one linear pass.
MAX_MAPPING_KEYS = 10_000


def _max_depth() -> int:
    return settings.CRONICORN_MAX_JSON_DEPTH + FILE_NESTING


class _BoundedLoader(
    CParser,
    yaml.composer.Composer,
    yaml.constructor.SafeConstructor,
    yaml.resolver.Resolver,
):
    """PyYAML's safe loading with limits: at most ``MAX_ALIASES`` aliases, nesting at most
    ``_max_depth()`` (the composer recurses), merge keys that cannot multiply a mapping
    (``<<: [*a, *a]`` nested doubles it each level), and no duplicate keys (PyYAML
    silently keeps the last of two; a config file must not).

    Events come from libyaml (C), several times faster than PyYAML's Python scanner; the
    nodes are built by PyYAML's Python composer, where the limits can be kept (libyaml's
    own composer, as in ``CSafeLoader``, offers no hook)."""

    check_node = yaml.composer.Composer.check_node
    get_node = yaml.composer.Composer.get_node
    get_single_node = yaml.composer.Composer.get_single_node

    def __init__(self, stream: str) -> None:
        CParser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)  # type: ignore[no-untyped-call]
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)  # type: ignore[no-untyped-call]
        self.aliases = 0
        self.depth = 0
        self.max_depth = _max_depth()  # read once: settings are slow to read per node

    def compose_node(self, parent: Any, index: Any) -> Any:
        event: Any = self.peek_event()
        mark = event.start_mark
        composing_a_key = index is None and isinstance(parent, yaml.MappingNode)
        if composing_a_key and len(parent.value) >= MAX_MAPPING_KEYS:
            raise yaml.composer.ComposerError(
                None, None, f"a mapping with more than {MAX_MAPPING_KEYS} keys", mark
            )
        if isinstance(event, yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise yaml.composer.ComposerError(
                    None, None, f"more than {MAX_ALIASES} aliases (*name); repeat the values", mark
                )
        self.depth += 1
        try:
            if self.depth > self.max_depth:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {self.max_depth} levels deep; flatten it", mark
                )
            return super().compose_node(parent, index)  # type: ignore[no-untyped-call]
        finally:
            self.depth -= 1

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        written = len(node.value)
        super().flatten_mapping(node)  # type: ignore[no-untyped-call]
        if len(node.value) > max(written, MAX_MAPPING_KEYS):
            raise yaml.constructor.ConstructorError(
                None, None, "merge keys (<<) expand this mapping too far", node.start_mark
            )

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue  # keys a merge brings in may be overridden here: that is the point
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if not isinstance(key, Hashable):
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    "a key must be text, not a list, set or mapping",
                    key_node.start_mark,
                )
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} appears twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):  # linear: 100 000 keys cost no more than reading them
        raise ConfigError(
            [f"(file): the key {_first_repeated(pairs)!r} appears twice in one object"]
        )
    return result


def _first_repeated(pairs: list[tuple[str, Any]]) -> str:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    return ""


def load_document(text: str, *, fmt: str) -> Any:
    """Parse ``text`` as ``json`` or ``yaml``; malformed, oversized, too deeply nested or
    too expansive input raises ConfigError with its location, never another exception."""
    if not text.strip():
        raise ConfigError(["(file): the file is empty; it needs a 'tenants' list"])
    cap = settings.CRONICORN_MAX_CONFIG_BYTES
    if len(text) > cap or len(text.encode("utf-8", "surrogatepass")) > cap:
        raise ConfigError(
            [f"(file): the file is larger than {cap} bytes (CRONICORN_MAX_CONFIG_BYTES); split it"]
        )
    document = _load_json(text) if fmt == "json" else _load_yaml(text)
    if problem := json_shape_problem(
        document, max_depth=_max_depth(), max_nodes=MAX_FILE_VALUES, json_scalars=False
    ):
        raise ConfigError([f"(file): the document {problem}"])
    return document


def _load_json(text: str) -> Any:
    if problem := json_text_depth_problem(text, max_depth=_max_depth()):
        raise ConfigError([f"(file): the document {problem}"])
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ConfigError([f"{where}: malformed JSON: {exc.msg}"]) from None
    except (RecursionError, ValueError) as exc:  # belt and braces: the scan above bounds it
        raise ConfigError([f"(file): malformed JSON: {exc}"]) from None


def _load_yaml(text: str) -> Any:
    try:
        loader = _BoundedLoader(text)  # as yaml.safe_load does, with its limits
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        raise ConfigError([f"{where}: malformed YAML: {exc.problem or exc}"]) from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise ConfigError([f"(file): malformed YAML: {exc}"]) from None


def dump_document(document: Mapping[str, Any], *, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(
        dict(document), sort_keys=False, allow_unicode=True, default_flow_style=False, width=100
    )


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


def _type_name(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "text", bool: "true/false"}
    if value is None:
        return "nothing (null)"
    return names.get(type(value), f"{type(value).__name__} {value!r}")


@dataclass(frozen=True)
class _Key:
    model_field: str
    convert: Callable[[Any], Any]
    to_file: Callable[[Any], Any] = lambda value: value


def _interval_to_file(value: int | None) -> str | None:
    return format_interval(value) if value else None


_TENANT_KEYS = {
    "max_endpoints": _Key("max_endpoints", _whole),
    "min_interval": _Key("min_interval_ms", _duration, _interval_to_file),
    "monthly_token_budget": _Key("monthly_token_budget", _whole),
}
_JOB_KEYS = {
    "description": _Key("description", _text),
    "max_concurrent": _Key("max_concurrent", _whole),
}
_ENDPOINT_KEYS = {
    "description": _Key("description", _text),
    "url": _Key("url", _text),
    "method": _Key("method", _method),
    "headers": _Key("headers", lambda value: value),  # checked with its references
    "secret_headers": _Key("secret_header_names", _names),
    "body": _Key("body", _json_value),
    "timeout": _Key("timeout_ms", _duration, _interval_to_file),
    "max_response_size_kb": _Key("max_response_size_kb", _whole),
    "baseline_cron": _Key("baseline_cron", _text),
    "timezone": _Key("timezone", _text),
    "baseline_interval": _Key("baseline_interval_ms", _duration, _interval_to_file),
    "min_interval": _Key("min_interval_ms", _duration, _interval_to_file),
    "max_interval": _Key("max_interval_ms", _duration, _interval_to_file),
}
_CHANNEL_KEYS = {
    "kind": _Key("kind", _text),
    "target": _Key("target", lambda value: value),  # resolved with its references
    "enabled": _Key("enabled", _flag),
}
_SCHEDULE_CHOICE = frozenset({"baseline_cron", "baseline_interval_ms"})
DEFINITION_FIELDS = tuple(key.model_field for key in _ENDPOINT_KEYS.values())
# Changing any of these moves the next run, so it is recomputed through the governor.
SCHEDULE_FIELDS = frozenset(
    {"baseline_cron", "timezone", "baseline_interval_ms", "min_interval_ms", "max_interval_ms"}
)


# ``failed`` names the model fields whose keys already had problems: the model's
# full_clean leaves them out, since it would only add noise about the same keys.


@dataclass
class EndpointSpec:
    where: str
    name: str
    values: dict[str, Any]
    failed: frozenset[str]


@dataclass
class JobSpec:
    where: str
    name: str
    values: dict[str, Any]
    failed: frozenset[str]
    endpoints: list[EndpointSpec]


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

    def values(self, raw: dict[str, Any], where: str, keys: dict[str, _Key]) -> dict[str, Any]:
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

    def failed_fields(self, start: int, where: str, keys: dict[str, _Key]) -> frozenset[str]:
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
    allowed = ["name", "members", "hmac_secret", "channels", "jobs", *_TENANT_KEYS]
    start = len(reader.problems)
    if (mapping := reader.mapping(raw, where, allowed)) is None:
        return None
    values = reader.values(mapping, where, _TENANT_KEYS)
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
    failed = reader.failed_fields(start, where, _TENANT_KEYS)
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
    if (mapping := reader.mapping(raw, where, ["name", *_CHANNEL_KEYS])) is None:
        return None
    values = reader.values(mapping, where, _CHANNEL_KEYS)
    if "target" in mapping:
        try:
            values["target"] = reader.resolve(mapping["target"], f"{where}.target")
        except _Invalid as exc:
            reader.add(f"{where}.target", str(exc))
    name = reader.name(mapping, where, seen, "channel")
    return ChannelSpec(where, name, values, reader.failed_fields(start, where, _CHANNEL_KEYS))


def _read_job(reader: _Reader, raw: Any, where: str, seen: dict[str, str]) -> JobSpec | None:
    start = len(reader.problems)
    if (mapping := reader.mapping(raw, where, ["name", "endpoints", *_JOB_KEYS])) is None:
        return None
    name = reader.name(mapping, where, seen, "job")
    values = reader.values(mapping, where, _JOB_KEYS)
    failed = reader.failed_fields(start, where, _JOB_KEYS)
    endpoint_names: dict[str, str] = {}
    endpoints = [
        spec
        for ep_where, ep_raw in reader.items(mapping, "endpoints", where)
        if (spec := _read_endpoint(reader, ep_raw, ep_where, endpoint_names)) is not None
    ]
    return JobSpec(where, name, values, failed, endpoints)


def _read_endpoint(
    reader: _Reader, raw: Any, where: str, seen: dict[str, str]
) -> EndpointSpec | None:
    start = len(reader.problems)
    if (mapping := reader.mapping(raw, where, ["name", *_ENDPOINT_KEYS])) is None:
        return None
    name = reader.name(mapping, where, seen, "endpoint")
    values = reader.values(mapping, where, _ENDPOINT_KEYS)
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
    return EndpointSpec(where, name, values, reader.failed_fields(start, where, _ENDPOINT_KEYS))


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
        if not isinstance(header, str) or not isinstance(value, str):
            reader.add(
                f"{where}.{header}",
                f"header values must be text, got {_type_name(value)}; quote it",
            )
            continue
        headers[header] = reader.resolve(value, f"{where}.{header}")
    return headers


# --- Planning: compare with the database, validate with full_clean --------------------


@dataclass(frozen=True)
class FieldChange:
    name: str
    old: str
    new: str


@dataclass
class Change:
    kind: str  # tenant | job | endpoint
    label: str
    action: str  # created | updated | unchanged | archived
    fields: list[FieldChange] = field(default_factory=list)


@dataclass
class _Write:
    change: Change
    instance: models.Model
    update_fields: list[str]
    members: list[Any] | None = None
    reschedule: bool = False


@dataclass
class ImportPlan:
    changes: list[Change]
    warnings: list[str]
    writes: list[_Write]
    prune: list[Endpoint]

    def count(self, action: str) -> int:
        return sum(1 for change in self.changes if change.action == action)

    @property
    def has_changes(self) -> bool:
        return any(change.action != "unchanged" for change in self.changes)


@dataclass
class _Planner:
    prune: bool
    problems: list[str] = field(default_factory=list)
    writes: list[_Write] = field(default_factory=list)
    pruned: list[Endpoint] = field(default_factory=list)

    def invalid(
        self, where: str, error: ValidationError, keys: dict[str, str], skip: set[str]
    ) -> None:
        for model_field, messages in error.message_dict.items():
            if model_field in skip:
                continue
            key = keys.get(model_field, model_field)
            location = where if model_field == NON_FIELD_ERRORS else f"{where}.{key}"
            for message in messages:
                self.problems.append(f"{location}: {message}")


def plan_import(config: Config, *, prune: bool = False) -> ImportPlan:
    """What importing ``config`` would change; raises ConfigError listing every problem
    (the reader's and the models') if anything is invalid."""
    planner = _Planner(prune, problems=list(config.problems))
    for spec in config.tenants:
        if spec.name:
            _plan_tenant(planner, spec)
    if planner.problems:
        raise ConfigError(planner.problems)
    changes = [write.change for write in planner.writes]
    changes += [Change("endpoint", e.ref, "archived") for e in planner.pruned]
    return ImportPlan(changes, config.warnings, planner.writes, planner.pruned)


def _validate(
    planner: _Planner, instance: models.Model, spec: Any, keys: dict[str, _Key], exclude: list[str]
) -> None:
    skip = set(spec.failed)
    if skip & _SCHEDULE_CHOICE:
        skip |= _SCHEDULE_CHOICE  # "give a cron or an interval" would blame the other one
    try:
        # clean() mirrors every named CHECK with a message that names the field, and
        # Django checks each constraint with its own query (12 per endpoint: most of an
        # import's time), so the constraints are left to the database at write time.
        instance.full_clean(exclude=[*exclude, *skip], validate_constraints=False)
    except ValidationError as exc:
        planner.invalid(spec.where, exc, _file_keys(keys), skip)


def _plan_tenant(planner: _Planner, spec: TenantSpec) -> None:
    tenant = Tenant.objects.filter(name=spec.name).first() or Tenant(name=spec.name)
    old = _snapshot(tenant, spec.values)
    for model_field, value in spec.values.items():
        setattr(tenant, model_field, value)
    _validate(planner, tenant, spec, _TENANT_KEYS, exclude=[])
    write = _record(planner, "tenant", spec.name, tenant, old, _TENANT_KEYS)
    if spec.members is not None:
        _plan_members(planner, spec, tenant, write)
    for channel_spec in spec.channels:
        if channel_spec.name:
            _plan_channel(planner, tenant, channel_spec)
    live_after = 0
    for job_spec in spec.jobs:
        live_after += _plan_job(planner, tenant, job_spec) if job_spec.name else 0
    if tenant.pk:
        named = {job.name for job in spec.jobs}
        live_after += (
            Endpoint.objects.live().filter(job__tenant=tenant).exclude(job__name__in=named).count()
        )
    if live_after > tenant.max_endpoints:
        planner.problems.append(
            f"{spec.where}: the tenant would have {live_after} endpoints but max_endpoints is "
            f"{tenant.max_endpoints}; raise max_endpoints or declare fewer endpoints"
        )


def _plan_channel(planner: _Planner, tenant: Tenant, spec: ChannelSpec) -> None:
    """An alert channel of the notifications app, checked by its model like the rest."""
    if not apps.is_installed("notifications"):
        planner.problems.append(f"{spec.where}: alert channels need the notifications app")
        return
    model = apps.get_model("notifications", "Channel")
    existing = model.objects.filter(tenant=tenant, name=spec.name).first() if tenant.pk else None
    channel = existing or model(tenant=tenant, name=spec.name)
    channel.tenant = tenant
    desired = {"kind": "", "target": "", "enabled": True, **spec.values}
    old = _snapshot(channel, desired)
    for model_field, value in desired.items():
        setattr(channel, model_field, value)
    _validate(planner, channel, spec, _CHANNEL_KEYS, exclude=["tenant"])
    _record(planner, "channel", f"{tenant.name}/{spec.name}", channel, old, _CHANNEL_KEYS)


def _plan_members(planner: _Planner, spec: TenantSpec, tenant: Tenant, write: _Write) -> None:
    users = list(get_user_model().objects.filter(username__in=spec.members or []))
    missing = set(spec.members or []) - {user.get_username() for user in users}
    if missing:
        planner.problems.append(
            f"{spec.where}.members: no user named {', '.join(sorted(missing))}; create them "
            "first (manage.py createsuperuser or the admin)"
        )
    current = sorted(tenant.members.values_list("username", flat=True)) if tenant.pk else []
    wanted = sorted(spec.members or [])
    write.members = users
    if current != wanted:
        write.change.fields.append(FieldChange("members", _render(current), _render(wanted)))
        if write.change.action == "unchanged":
            write.change.action = "updated"


def _plan_job(planner: _Planner, tenant: Tenant, spec: JobSpec) -> int:
    """Plan one job and its endpoints; return how many live endpoints it will have."""
    existing = Job.objects.filter(tenant=tenant, name=spec.name).first() if tenant.pk else None
    job = existing or Job(tenant=tenant, name=spec.name)
    job.tenant = tenant  # the planned tenant, so new quotas apply to the checks below
    desired = {k.model_field: _default(Job, k.model_field) for k in _JOB_KEYS.values()}
    desired.update(spec.values)
    old = _snapshot(job, desired)
    for model_field, value in desired.items():
        setattr(job, model_field, value)
    _validate(planner, job, spec, _JOB_KEYS, exclude=["tenant"])
    _record(planner, "job", f"{tenant.name}/{spec.name}", job, old, _JOB_KEYS)
    current = {e.name: e for e in job.endpoints.all()} if job.pk else {}
    for endpoint_spec in spec.endpoints:
        if endpoint_spec.name:
            _plan_endpoint(planner, job, current.get(endpoint_spec.name), endpoint_spec)
    declared = {endpoint_spec.name for endpoint_spec in spec.endpoints}
    others = [e for e in current.values() if e.name not in declared and e.archived_at is None]
    if planner.prune:
        planner.pruned.extend(others)
        return len(spec.endpoints)
    return len(spec.endpoints) + len(others)


def _plan_endpoint(
    planner: _Planner, job: Job, existing: Endpoint | None, spec: EndpointSpec
) -> None:
    endpoint = existing or Endpoint(job=job, name=spec.name)
    endpoint.job = job
    desired = {name: _default(Endpoint, name) for name in DEFINITION_FIELDS}
    desired.update(spec.values)
    old = _snapshot(endpoint, [*desired, "archived_at"])
    for model_field, value in desired.items():
        setattr(endpoint, model_field, value)
    endpoint.archived_at = None  # a declared endpoint is live, even if it was archived
    _validate(planner, endpoint, spec, _ENDPOINT_KEYS, exclude=["job"])
    write = _record(planner, "endpoint", f"{job.name}/{spec.name}", endpoint, old, _ENDPOINT_KEYS)
    moved = set(write.update_fields) & (SCHEDULE_FIELDS | {"archived_at"})
    write.reschedule = write.change.action == "created" or bool(moved)


def _default(model: type[models.Model], name: str) -> Any:
    return model._meta.get_field(name).get_default()  # type: ignore[union-attr]


def _file_keys(keys: dict[str, _Key]) -> dict[str, str]:
    return {spec.model_field: key for key, spec in keys.items()}


def _snapshot(instance: models.Model, names: Iterable[str]) -> dict[str, Any]:
    return {name: getattr(instance, name) for name in names}


def _same(name: str, old: Any, new: Any) -> bool:
    if name in ("min_interval_ms", "max_interval_ms"):
        return (old or None) == (new or None)  # zero and empty both mean "no bound"
    if name in ("headers", "body", "secret_header_names"):
        # JSON equality: in Python True == 1, but in a request body they differ.
        return json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True)
    return bool(old == new)


def _record(
    planner: _Planner,
    kind: str,
    label: str,
    instance: models.Model,
    old: dict[str, Any],
    keys: dict[str, _Key],
) -> _Write:
    if instance.pk is None:
        write = _Write(Change(kind, label, "created"), instance, [])
    else:
        changed = [
            name for name, value in old.items() if not _same(name, value, getattr(instance, name))
        ]
        fields = [change for name in changed for change in _describe(name, old, instance, keys)]
        write = _Write(
            Change(kind, label, "updated" if changed else "unchanged", fields), instance, changed
        )
    planner.writes.append(write)
    return write


def _describe(
    name: str, old: dict[str, Any], instance: models.Model, keys: dict[str, _Key]
) -> list[FieldChange]:
    new = getattr(instance, name)
    if name == "archived_at":
        return [FieldChange("archived", "yes", "no")]
    if name in ("hmac_secret", "target"):
        return [FieldChange(name, MASK if old[name] else "", MASK if new else "")]
    if name == "headers":
        endpoint = cast(Endpoint, instance)
        secret = {*old.get("secret_header_names", []), *endpoint.secret_header_names}
        return _header_changes(old[name], new, secret)
    file_key = _file_keys(keys).get(name, name)
    to_file = keys[file_key].to_file
    return [FieldChange(file_key, _render(to_file(old[name])), _render(to_file(new)))]


def _header_changes(
    old: dict[str, str], new: dict[str, str], secret: set[str]
) -> list[FieldChange]:
    changes = []
    for header in sorted({*old, *new}):
        before, after = old.get(header), new.get(header)
        if before == after:
            continue
        hidden = is_secret_header(header, secret)
        changes.append(
            FieldChange(
                f"headers.{header}",
                "(absent)" if before is None else MASK if hidden else _render(before),
                "(absent)" if after is None else MASK if hidden else _render(after),
            )
        )
    return changes


def _render(value: Any) -> str:
    if value is None or value == "":
        return "(none)"
    if isinstance(value, str) and value == value.strip():
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def apply_plan(plan: ImportPlan, *, now: datetime) -> None:
    """Write ``plan`` in one transaction; new and rescheduled endpoints go through the governor."""
    with transaction.atomic():
        for write in plan.writes:
            instance = write.instance
            if write.change.action == "created":
                instance.save()
            elif write.update_fields:
                stamp = ["updated_at"] if hasattr(instance, "updated_at") else []
                instance.save(update_fields=[*write.update_fields, *stamp])
            if write.members is not None:
                instance.members.set(write.members)  # type: ignore[attr-defined]
            if write.reschedule:
                replan_after_edit(instance, now=now)  # type: ignore[arg-type]
        for endpoint in plan.prune:
            archive_endpoint(endpoint, now=now)


def import_config(
    text: str,
    *,
    fmt: str,
    environ: Mapping[str, str],
    now: datetime,
    prune: bool = False,
    dry_run: bool = False,
) -> ImportPlan:
    """Parse, check and (unless ``dry_run``) apply a file.

    Raises ConfigError, having written nothing, when anything in the file is invalid.
    """
    return import_document(
        load_document(text, fmt=fmt), environ=environ, now=now, prune=prune, dry_run=dry_run
    )


def import_document(
    document: Any,
    *,
    environ: Mapping[str, str],
    now: datetime,
    prune: bool = False,
    dry_run: bool = False,
) -> ImportPlan:
    """``import_config`` for an already parsed document (``manage.py demo`` builds one)."""
    config = read_config(document, environ=environ)
    if dry_run:
        return plan_import(config, prune=prune)
    # Planning inside the transaction: what was compared is what gets written.
    try:
        with transaction.atomic():
            plan = plan_import(config, prune=prune)
            apply_plan(plan, now=now)
    except IntegrityError as exc:
        # Only a rule the models' clean() does not mirror, or a concurrent edit, gets here.
        raise ConfigError([f"(database): a constraint refused the import: {exc}"]) from None
    return plan


# --- Export ---------------------------------------------------------------------------


def export_config(
    *, tenant_names: Iterable[str] = (), job_names: Iterable[str] = ()
) -> tuple[dict[str, Any], list[str]]:
    """The document for the selected tenants and jobs (all when empty), and the
    environment variables its secret references name."""
    tenants = Tenant.objects.prefetch_related("members").order_by("name")
    if tenant_names := list(tenant_names):
        tenants = tenants.filter(name__in=tenant_names)
    job_filter = list(job_names)
    references: list[str] = []
    entries = [_export_tenant(tenant, job_filter, references) for tenant in tenants]
    if job_filter:
        entries = [entry for entry in entries if entry.get("jobs")]
    return {"version": FORMAT_VERSION, "tenants": entries}, references


def _export_tenant(tenant: Tenant, job_filter: list[str], references: list[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": tenant.name}
    members = sorted(user.get_username() for user in tenant.members.all())
    if members:
        entry["members"] = members
    for key, spec in _TENANT_KEYS.items():
        value = getattr(tenant, spec.model_field)
        if value != _default(Tenant, spec.model_field):
            entry[key] = spec.to_file(value)
    if tenant.hmac_secret:
        entry["hmac_secret"] = _reference(references, tenant.name, "HMAC_SECRET")
    if channels := _export_channels(tenant, references):
        entry["channels"] = channels
    jobs = tenant.jobs.order_by("name")
    if job_filter:
        jobs = jobs.filter(name__in=job_filter)
    exported = [_export_job(tenant, job, references) for job in jobs]
    if exported:
        entry["jobs"] = exported
    return entry


def _export_channels(tenant: Tenant, references: list[str]) -> list[dict[str, Any]]:
    """Alert channels, each target (a secret) as a reference."""
    if not apps.is_installed("notifications"):
        return []
    model = apps.get_model("notifications", "Channel")
    return [
        {
            "name": channel.name,
            "kind": channel.kind,
            "target": _reference(references, tenant.name, "CHANNEL", channel.name),
            **({} if channel.enabled else {"enabled": False}),
        }
        for channel in model.objects.filter(tenant=tenant).order_by("name")
    ]


def _export_job(tenant: Tenant, job: Job, references: list[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": job.name}
    for key, spec in _JOB_KEYS.items():
        value = getattr(job, spec.model_field)
        if value != _default(Job, spec.model_field):
            entry[key] = spec.to_file(value)
    endpoints = [
        _export_endpoint(tenant, job, endpoint, references)
        for endpoint in job.endpoints.live().order_by("name")
    ]
    if endpoints:
        entry["endpoints"] = endpoints
    return entry


def _export_endpoint(
    tenant: Tenant, job: Job, endpoint: Endpoint, references: list[str]
) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": endpoint.name}
    for key, spec in _ENDPOINT_KEYS.items():
        value = getattr(endpoint, spec.model_field)
        if not _same(spec.model_field, value, _default(Endpoint, spec.model_field)):
            entry[key] = spec.to_file(value)
    secret = endpoint.secret_header_names
    if "headers" in entry:
        entry["headers"] = {
            header: _reference(references, tenant.name, job.name, endpoint.name, header)
            if is_secret_header(header, secret)
            else value
            for header, value in endpoint.headers.items()
        }
    if url_password(endpoint.url):
        password = _reference(references, tenant.name, job.name, endpoint.name, "URL_PASSWORD")
        entry["url"] = replace_url_password(endpoint.url, password)
    return entry


def _reference(references: list[str], *parts: str) -> str:
    name = secret_reference_name(*parts)
    references.append(name)
    return "${" + name + "}"


def secret_reference_name(*parts: str) -> str:
    """The environment variable export names for a secret (tenant, job, endpoint, header)."""
    return re.sub(r"[^A-Za-z0-9]+", "_", "_".join(("CRONICORN_SECRET", *parts))).upper().strip("_")
