"""The OpenAPI document as a contract, checked by a client nobody here wrote: Schemathesis
fuzzes every operation of the served document against a live server (pytest-django's
live_server, the test database) with a write key, a read-only key and no key, with every
check it has but positive_data_acceptance (status codes, content types, response schemas
and headers, negative data rejected, ignored auth, unsupported methods...), and must find
nothing.

Example counts are bounded (``MAX_EXAMPLES`` per operation and phase) so a run takes a
few minutes on two cores; ``SCHEMATHESIS_MAX_EXAMPLES`` raises it for a deeper run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.world import ApiWorld

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "5"))
# These call out (the endpoint's URL, the channel's target): fuzzed URLs would reach the
# network. Their contract is checked with the read key (403) and without a key (401), and
# their behaviour by tests/api/test_operations.py and tests/api/test_channels.py.
CALLS_OUT = ("test_endpoint", "test_channel")


@pytest.fixture(autouse=True)
def no_rate_limit(settings: Any) -> None:
    settings.CRONICORN_API_RATE = "100000/m"  # the fuzzer is not what the limit is for


def served_document(base_url: str, key: str, tmp_path: Path) -> Path:
    response = httpx.get(
        f"{base_url}/api/v1/openapi.json", headers={"Authorization": f"Bearer {key}"}
    )
    assert response.status_code == 200
    path = tmp_path / "openapi.json"
    path.write_text(json.dumps(response.json()))
    return path


def schemathesis(document: Path, base_url: str, key: str | None, *extra: str) -> str:
    args = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        str(document),
        "--url",
        base_url,
        "--checks",
        "all",
        # Every check but one: a schema-valid request may still be refused for what no
        # schema can say (a cron's syntax, a name already taken, a job of another tenant,
        # the tenant's quota), so "positive data accepted" cannot hold; the reverse,
        # "negative data rejected", must.
        "--exclude-checks",
        "positive_data_acceptance",
        "--mode",
        "all",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        "22",
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--max-failures",
        "50",
        "--suppress-health-check",
        "all",
        "--continue-on-failure",
        *extra,
    ]
    if key:
        args += ["--header", f"Authorization: Bearer {key}"]
    # In a scratch directory: the CLI keeps its cache (.schemathesis/) where it runs.
    result = subprocess.run(
        args, capture_output=True, text=True, timeout=900, check=False, cwd=document.parent
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-30_000:]
    return output


@pytest.mark.timeout(900)  # a few minutes on a quiet machine; more when it is shared
@pytest.mark.parametrize("who", ["write", "read", "none"])
def test_schemathesis_finds_nothing_with_each_kind_of_key(
    who: str, api_world: ApiWorld, live_server: Any, tmp_path: Path
) -> None:
    document = served_document(live_server.url, api_world.write_key, tmp_path)
    key = {"write": api_world.write_key, "read": api_world.read_key, "none": None}[who]
    extra: list[str] = []
    if who == "write":
        for name in CALLS_OUT:
            extra += ["--exclude-operation-id", name]
    output = schemathesis(document, live_server.url, key, *extra)
    assert "No issues found" in output or "0 failures" in output.lower() or "passed" in output
