"""The OpenAPI document as a contract, checked by a client nobody here wrote: Schemathesis
fuzzes every operation of the served document against the API as deployed (gunicorn with
the project's config and production settings, tests/api/serving.py, on the test
database) with a write key, a read-only key and no key, in every phase (examples,
coverage, fuzzing, and the stateful phase's chains of calls along the links it infers),
with every check it has but positive_data_acceptance (status codes, content types,
response schemas and headers, negative data rejected, ignored auth, unsupported
methods...), and must find nothing.

Example counts are bounded (``MAX_EXAMPLES`` per operation and phase) so a run takes a
few minutes on two cores; ``SCHEMATHESIS_MAX_EXAMPLES`` raises it for a deeper run and
``SCHEMATHESIS_SEED`` picks another seed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.operations import OPERATIONS
from tests.api.serving import gunicorn_serving
from tests.compose import REPO
from tests.world import ApiWorld

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "5"))
SEED = os.environ.get("SCHEMATHESIS_SEED", "22")
# These call out (the endpoint's URL, the channel's target): fuzzed URLs would reach the
# network. Their contract is checked with the read key (403) and without a key (401), and
# their behaviour by tests/api/test_operations.py and tests/api/test_channels.py.
CALLS_OUT = [op.name for op in OPERATIONS if op.calls_out]


@pytest.fixture
def served(api_world: ApiWorld, tmp_path: Path) -> Iterator[str]:
    # The fuzzer is not what the rate limit is for.
    with gunicorn_serving(
        tmp_path, CRONICORN_API_RATE="100000/m", CRONICORN_API_CPU_PER_KEY="0"
    ) as base_url:
        yield base_url


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
        "--config-file",
        str(REPO / "schemathesis.toml"),
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
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        SEED,
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
    who: str, api_world: ApiWorld, served: str, tmp_path: Path
) -> None:
    document = served_document(served, api_world.write_key, tmp_path)
    key = {"write": api_world.write_key, "read": api_world.read_key, "none": None}[who]
    extra: list[str] = []
    if who == "write":
        for name in CALLS_OUT:
            extra += ["--exclude-operation-id", name]
    output = schemathesis(document, served, key, *extra)
    assert "✅ Stateful" in output, output[-3000:]  # the chains of calls ran, and passed
