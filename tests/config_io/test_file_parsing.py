"""Untrusted files: alias bombs, deep nesting, huge objects and oversize files end in a
located ConfigError with bounded memory, never a traceback. How long each takes is
measured by bench/hostile_files.py; here a timeout only stops a hang."""

from __future__ import annotations

import io
import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from endpoints.config_io.documents import ConfigError, load_document

pytestmark = pytest.mark.timeout(20)

MEMORY_CAP = 64 * 1024 * 1024


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    """The classic: each level a list of ``width`` aliases of the one before (about
    460 bytes for 9 x 9, expanding to 9**9 values)."""
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        refs = ", ".join([f"*a{level - 1}"] * width)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int = 24) -> str:
    """Merge keys that double a mapping at each level."""
    lines = ["m0: &m0 {k: v}"]
    for level in range(1, levels):
        lines.append(f"m{level}: &m{level} {{<<: [*m{level - 1}, *m{level - 1}], k{level}: v}}")
    return "\n".join(lines) + "\n"


def refusal(text: str, fmt: str) -> tuple[list[str], int]:
    """The problems ``load_document`` reports, and the peak memory it took."""
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as refused:
            load_document(text, fmt=fmt)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return refused.value.problems, peak


def test_a_460_byte_alias_bomb_is_refused_with_bounded_memory() -> None:
    text = billion_laughs()
    assert len(text) < 500

    (problem,), peak = refusal(text, "yaml")

    assert problem == "(file): the document has more than 500000 values; make it smaller"
    assert peak < MEMORY_CAP


def test_more_aliases_than_the_cap_are_refused_where_they_start() -> None:
    text = billion_laughs(levels=12, width=12)

    (problem,), peak = refusal(text, "yaml")

    assert problem.startswith("line ") and "more than 100 aliases (*name)" in problem
    assert peak < MEMORY_CAP


def test_merge_keys_that_double_a_mapping_each_level_are_refused() -> None:
    (problem,), peak = refusal(merge_bomb(), "yaml")

    assert problem.startswith("line ") and "merge keys (<<) expand this mapping too far" in problem
    assert peak < MEMORY_CAP


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        ("[" * 10_000 + "]" * 10_000, "json"),
        ('{"a":' * 10_000 + "1" + "}" * 10_000, "json"),
        ("[" * 10_000 + "]" * 10_000, "yaml"),
        ("{a: " * 10_000 + "1" + "}" * 10_000, "yaml"),
        ("".join(f"{'  ' * n}- \n" for n in range(1_000)), "yaml"),
    ],
    ids=["json-lists", "json-objects", "yaml-flow-lists", "yaml-flow-maps", "yaml-block"],
)
def test_10_000_deep_nesting_is_a_located_problem_not_a_recursion_error(
    text: str, fmt: str
) -> None:
    (problem,), peak = refusal(text, fmt)

    assert "nested more than 48 levels deep" in problem
    assert peak < MEMORY_CAP


def test_a_json_object_with_100_000_keys_parses_in_one_pass() -> None:
    text = json.dumps({"version": 1, "tenants": [], **{f"k{n}": n for n in range(100_000)}})

    document = load_document(text, fmt="json")

    assert len(document) == 100_002


def test_a_repeated_key_among_100_000_is_named() -> None:
    pairs = ", ".join(f'"k{n}": {n}' for n in range(100_000))
    text = "{" + pairs + ', "k99999": 0}'

    (problem,), _peak = refusal(text, "json")

    assert problem == "(file): the key 'k99999' appears twice in one object"


def test_a_yaml_mapping_of_10_000_keys_loads_and_one_of_100_000_is_refused_early() -> None:
    text = "".join(f"k{n}: {n}\n" for n in range(10_000))
    assert len(load_document(text, fmt="yaml")) == 10_000

    text = "".join(f"k{n}: {n}\n" for n in range(100_000))
    (problem,), peak = refusal(text, "yaml")

    assert problem.startswith("line 10001") and "more than 10000 keys" in problem
    assert peak < MEMORY_CAP


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_a_file_over_the_size_cap_is_refused_before_parsing(settings: Any, fmt: str) -> None:
    settings.CRONICORN_MAX_CONFIG_BYTES = 1_000

    (problem,), _peak = refusal(json.dumps({"tenants": ["x" * 2_000]}), fmt)

    assert "larger than 1000 bytes (CRONICORN_MAX_CONFIG_BYTES)" in problem


def test_a_yaml_key_that_is_a_list_is_refused_with_its_line() -> None:
    (problem,), _peak = refusal("? [a, b]\n: 1\n", "yaml")

    assert problem.startswith("line 1") and "a key must be text" in problem


@pytest.mark.django_db
def test_the_import_command_reads_no_further_than_the_cap(
    settings: Any, tmp_path: Path, write_big: Callable[[Path, int], Path]
) -> None:
    settings.CRONICORN_MAX_CONFIG_BYTES = 10_000
    path = write_big(tmp_path, 50_000_000)

    with pytest.raises(CommandError) as refused:
        call_command("import_endpoints", str(path), stdout=io.StringIO())

    assert "larger than 10000 bytes" in str(refused.value)
    assert "Traceback" not in str(refused.value)


@pytest.fixture
def write_big() -> Callable[[Path, int], Path]:
    def write(directory: Path, size: int) -> Path:
        path = directory / "big.yaml"
        with path.open("w") as file:
            file.write("tenants:\n")
            file.truncate(size)  # sparse: costs no disk
        return path

    return write
