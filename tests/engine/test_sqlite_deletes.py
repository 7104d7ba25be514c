"""Deletes on SQLite (the embedded default, ``runscheduler`` in one process with the API
and the admin) while the scheduler records a run: the delete lists the endpoint's runs
before it deletes them, and a run recorded in between must not make it fail."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.engine_processes import ROOT, manage, process_env


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    database = tmp_path_factory.mktemp("sqlite") / "migrated.sqlite3"
    env = process_env(DATABASE_URL=f"sqlite:///{database}")
    subprocess.run(manage("migrate", "-v", "0"), env=env, cwd=ROOT, check=True, timeout=120)
    return database


@pytest.fixture
def sqlite_env(migrated: Path, tmp_path: Path) -> dict[str, str]:
    """A database of its own for each test, copied from one migrated once."""
    database = tmp_path / "cronicorn.sqlite3"
    shutil.copyfile(migrated, database)
    return process_env(DATABASE_URL=f"sqlite:///{database}")


@pytest.mark.parametrize("interface", ["api-endpoint", "api-job"])
def test_a_delete_on_sqlite_succeeds_when_the_scheduler_records_a_run_meanwhile(
    sqlite_env: dict[str, str], interface: str
) -> None:
    script = f"from tests.engine.sqlite_delete_race import main; main({interface!r})"
    done = subprocess.run(
        manage("shell", "-c", script),
        env=sqlite_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    left = json.loads(done.stdout.strip().splitlines()[-1])
    assert left == {"status": 200, "endpoints": 0, "runs": 0, "scheduler_done": True}, done.stderr


def test_an_endpoint_with_a_long_history_is_deleted_on_sqlite(sqlite_env: dict[str, str]) -> None:
    """Django's own delete unlinks the retries of every run it deletes in one statement
    naming each run: past SQLite's limit of variables (32 766 by default, 9 hours of a run
    a second; 250 000 in Debian's build) the delete failed with "too many SQL variables",
    a 500. The runs go set-based instead."""
    script = (
        "from tests.engine.sqlite_delete_race import delete_a_long_history; delete_a_long_history()"
    )
    done = subprocess.run(
        manage("shell", "-c", script),
        env=sqlite_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"status": 200, "runs": 0}
