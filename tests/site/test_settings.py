"""Settings come from the environment and a bad value stops the process with a readable reason."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from cronicorn_site.settings import env_bool, env_choice, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parents[2]
VAR = "CRONICORN_TEST_VALUE"


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        *[("1", True), ("true", True), ("YES", True), (" on ", True)],
        *[("0", False), ("false", False), ("No", False), ("off", False)],
    ],
)
def test_env_bool_reads_the_usual_spellings(
    monkeypatch: pytest.MonkeyPatch, raw: str, value: bool
) -> None:
    monkeypatch.setenv(VAR, raw)
    assert env_bool(VAR, not value) is value


@pytest.mark.parametrize("default", [True, False])
def test_unset_or_empty_means_the_default(monkeypatch: pytest.MonkeyPatch, default: bool) -> None:
    monkeypatch.delenv(VAR, raising=False)
    assert env_bool(VAR, default) is default
    assert env_int(VAR, 7) == 7
    assert env_str(VAR, "fallback") == "fallback"
    monkeypatch.setenv(VAR, "")
    assert env_bool(VAR, default) is default
    assert env_int(VAR, 7) == 7
    assert env_float(VAR, 0.5) == 0.5
    assert env_str(VAR, "fallback") == "fallback"


def test_env_bool_refuses_anything_else(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, "maybe")
    with pytest.raises(ImproperlyConfigured) as caught:
        env_bool(VAR, True)
    assert str(caught.value) == f"{VAR}='maybe' is not a boolean; use true or false."


@pytest.mark.parametrize("raw", ["forty", "2.5", "1e3", "0x10"])
def test_env_int_refuses_what_is_not_a_whole_number(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(ImproperlyConfigured) as caught:
        env_int(VAR, 1)
    assert str(caught.value) == f"{VAR}={raw!r} is not a whole number."


def test_env_int_refuses_a_value_below_its_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, "0")
    with pytest.raises(ImproperlyConfigured) as caught:
        env_int(VAR, 1000, minimum=1)
    assert str(caught.value) == f"{VAR}=0 is too small; it must be at least 1."
    monkeypatch.setenv(VAR, "1")
    assert env_int(VAR, 1000, minimum=1) == 1


def test_env_int_refuses_a_value_above_its_maximum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, "10000001")
    with pytest.raises(ImproperlyConfigured) as caught:
        env_int(VAR, 50_000, maximum=10_000_000)
    assert str(caught.value) == f"{VAR}=10000001 is too large; it must be at most 10000000."
    monkeypatch.setenv(VAR, "10000000")
    assert env_int(VAR, 50_000, maximum=10_000_000) == 10_000_000


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("fast", "is not a number."),
        ("nan", "is not a finite number."),
        ("inf", "is not a finite number."),
        ("0.01", "is too small; it must be at least 0.05."),
    ],
)
def test_env_float_refuses_bad_numbers(
    monkeypatch: pytest.MonkeyPatch, raw: str, message: str
) -> None:
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(ImproperlyConfigured) as caught:
        env_float(VAR, 1.0, minimum=0.05)
    assert str(caught.value).startswith(f"{VAR}=")
    assert str(caught.value).endswith(message)


def test_env_choice_lists_the_allowed_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, "gpt")
    with pytest.raises(ImproperlyConfigured) as caught:
        env_choice(VAR, "rules", ("rules", "llm"))
    assert str(caught.value) == f"{VAR}='gpt' is not one of: rules, llm."
    monkeypatch.setenv(VAR, "llm")
    assert env_choice(VAR, "rules", ("rules", "llm")) == "llm"


def test_env_list_splits_on_commas_and_drops_blanks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, " a.example, b.example,,c.example ")
    assert env_list(VAR, []) == ["a.example", "b.example", "c.example"]


def test_the_defaults_claim_a_tick_ahead_within_twice_the_tick() -> None:
    # Every slot is claimed at least a tick before its time (issue 23), never more than
    # two ticks ahead (a claim holds its endpoint's lease until its run ends).
    assert settings.CRONICORN_CLAIM_HORIZON_MS == settings.CRONICORN_TICK_SECONDS * 2000


# Each scenario starts Django in its own fresh process; they run side by side to stay fast.
STARTS: dict[str, dict[str, str]] = {
    "production-without-key": {"DEBUG": "false"},
    "production-with-key": {"DEBUG": "false", "DJANGO_SECRET_KEY": "x" * 50},
    "malformed-boolean": {"DEBUG": "maybe"},
    # DEBUG is off unless set, so these carry a key to reach the setting they test.
    "horizon-above-tick": {
        "CRONICORN_TICK_SECONDS": "1",
        "CRONICORN_CLAIM_HORIZON_MS": "2500",
        "DJANGO_SECRET_KEY": "x" * 50,
    },
    "bad-database-url": {
        "DATABASE_URL": "postgress://bob:hunter2@db.example:5432/cronicorn",
        "DJANGO_SECRET_KEY": "x" * 50,
    },
    "local-default": {"DEBUG": "true"},
}


def start(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Start Django in a fresh process with a clean environment plus ``env``."""
    keep = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CRONICORN_", "DJANGO_", "DATABASE_", "DEBUG"))
    }
    keep.update(DJANGO_SETTINGS_MODULE="cronicorn_site.settings", CRONICORN_ENV_FILE="", **env)
    code = "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=BASE_DIR,
        env=keep,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def started() -> dict[str, subprocess.CompletedProcess[str]]:
    with ThreadPoolExecutor(max_workers=len(STARTS)) as pool:
        results = dict(zip(STARTS, pool.map(start, STARTS.values()), strict=True))
    return results


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    return result.stderr.strip().splitlines()[-1]


Started = dict[str, subprocess.CompletedProcess[str]]


def test_production_without_a_secret_key_refuses_to_start(started: Started) -> None:
    result = started["production-without-key"]
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set and DEBUG is false" in last_line(result)
    assert "set it to a long random string" in last_line(result)


def test_production_with_a_secret_key_starts(started: Started) -> None:
    result = started["production-with-key"]
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_a_malformed_boolean_refuses_to_start_and_names_the_variable(started: Started) -> None:
    result = started["malformed-boolean"]
    assert result.returncode != 0
    assert last_line(result).endswith("DEBUG='maybe' is not a boolean; use true or false.")


def test_a_claim_horizon_longer_than_twice_the_tick_refuses_to_start(started: Started) -> None:
    result = started["horizon-above-tick"]
    assert result.returncode != 0
    assert last_line(result).endswith(
        "CRONICORN_CLAIM_HORIZON_MS=2500 exceeds twice the tick (1.0 s); keep it at or below 2000."
    )


def test_a_bad_database_url_is_explained_without_its_password(started: Started) -> None:
    result = started["bad-database-url"]
    assert result.returncode != 0
    line = last_line(result)
    assert "DATABASE_URL='postgress://bob:••••@db.example:5432/cronicorn' is not understood" in line
    assert "use e.g. postgres://user@127.0.0.1:5432/name" in line
    assert "hunter2" not in result.stderr + result.stdout


def test_the_local_default_keeps_its_generated_secret_key_out_of_git(started: Started) -> None:
    result = started["local-default"]
    assert result.returncode == 0, result.stderr
    key_file = BASE_DIR / ".secret_key"
    assert len(key_file.read_text().strip()) >= 50
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(key_file)], cwd=BASE_DIR, check=False
    )
    assert ignored.returncode == 0
