"""Reading and writing a configuration file, within bounds: size, nesting, aliases and
keys are checked before the content is read, so a hostile file costs a message."""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from typing import Any

import yaml
from django.conf import settings
from yaml._yaml import CParser

from endpoints.validation import json_shape_problem, json_text_depth_problem


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
