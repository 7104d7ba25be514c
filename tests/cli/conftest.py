"""What the command line's tests share: the API served as deployed (gunicorn, on the test
database) and ``cronicorn`` run as the installed console script, in an environment with no
database, no Django and no Celery variable: only a URL, a key and a home of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.api.serving import gunicorn_serving
from tests.world import ApiWorld

CRONICORN = Path(sys.executable).parent / "cronicorn"
SERVER_ONLY = ("DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE", "DJANGO_SECRET_KEY")


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def operator_env(home: Path, **values: str) -> dict[str, str]:
    """An operator's laptop: a PATH, a HOME, no config file unless a test writes one, and
    none of the server's variables."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "CRONICORN_CONFIG": str(home / "config.toml"),
        **values,
    }
    assert not set(SERVER_ONLY) & set(env)
    return env


def run_cli(env: dict[str, str], *args: str, stdin: str | None = None) -> Ran:
    done = subprocess.run(
        [str(CRONICORN), *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def served(api_world: ApiWorld, tmp_path: Path) -> Iterator[str]:
    with gunicorn_serving(tmp_path, CRONICORN_API_RATE="100000/m") as base_url:
        yield base_url


@pytest.fixture
def cli(served: str, api_world: ApiWorld, tmp_path: Path) -> Callable[..., Ran]:
    """``cli(*args, key=...)``: cronicorn against the served API with tenant A's write key
    (or ``key``)."""
    home = tmp_path / "home"
    home.mkdir()

    def call(*args: str, key: str | None = None, stdin: str | None = None, **env: str) -> Ran:
        values = {"CRONICORN_URL": served, "CRONICORN_API_KEY": key or api_world.write_key}
        return run_cli(operator_env(home, **{**values, **env}), *args, stdin=stdin)

    return call
