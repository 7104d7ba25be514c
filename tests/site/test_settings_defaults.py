"""DEBUG is off unless set; the outbound guard has its own setting, never tied to DEBUG;
a malformed setting is one line naming the variable, for every process's entry point;
the local set-up (.env.local) is read under the environment, and without it nothing
departs from production's defaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parents[2]
KEY = {"DJANGO_SECRET_KEY": "k" * 50}
SHOW = (
    "import json, django; django.setup(); from django.conf import settings as s; "
    "print(json.dumps([s.DEBUG, s.CRONICORN_ALLOW_PRIVATE_ADDRESSES, s.SESSION_COOKIE_SECURE]))"
)


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CRONICORN_", "DJANGO_", "DEBUG", "PROMETHEUS_"))
    }
    # No local set-up unless a test gives one: a developer's .env.local is not production.
    clean.update({"DJANGO_SETTINGS_MODULE": "cronicorn_site.settings", "CRONICORN_ENV_FILE": ""})
    clean.update(env)
    return subprocess.run(
        args, cwd=BASE_DIR, env=clean, capture_output=True, text=True, timeout=120, check=False
    )


def test_debug_is_off_unless_set_and_the_guard_is_on_whatever_debug_says() -> None:
    unset = run([sys.executable, "-c", SHOW], KEY)
    assert unset.returncode == 0, unset.stderr
    assert json.loads(unset.stdout) == [False, False, True]
    debugging = run([sys.executable, "-c", SHOW], {**KEY, "DEBUG": "true"})
    assert json.loads(debugging.stdout) == [True, False, False]


@pytest.mark.parametrize(
    "entry",
    [
        [sys.executable, "manage.py", "check"],
        [sys.executable, "-c", "import cronicorn_site.wsgi"],
        [sys.executable, "-m", "celery", "-A", "cronicorn_site", "report"],
    ],
    ids=["manage.py", "wsgi", "celery"],
)
def test_a_malformed_setting_is_one_line_naming_the_variable(entry: list[str]) -> None:
    result = run(entry, {**KEY, "CRONICORN_TICK_SECONDS": "abc"})
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines == ["Configuration error: CRONICORN_TICK_SECONDS='abc' is not a number."]
    assert "Traceback" not in result.stdout + result.stderr


GUARD = (
    "import json, django; django.setup(); from django.conf import settings as s; "
    "from endpoints.engine.guard import AddressGuard, NetworkPolicy, BlockedAddressError\n"
    "def allowed(port):\n"
    "    try: AddressGuard(NetworkPolicy.from_settings()).check('127.0.0.1', ['127.0.0.1'], port)\n"
    "    except BlockedAddressError: return False\n"
    "    return True\n"
    "print(json.dumps([s.DEBUG, allowed(8000), allowed(8001)]))"
)


def test_without_a_local_set_up_production_defaults_hold() -> None:
    keyless = run([sys.executable, "manage.py", "check"], {})
    assert keyless.returncode != 0
    assert keyless.stderr.strip().splitlines() == [
        "Configuration error: DJANGO_SECRET_KEY is not set and DEBUG is false. In production "
        "set it to a long random string (python -c 'import secrets; "
        "print(secrets.token_urlsafe(50))'); on your own machine run scripts/start once, "
        "which writes the local set-up (.env.local) that every command in the checkout reads."
    ]
    production = run([sys.executable, "-c", GUARD], KEY)
    assert json.loads(production.stdout) == [False, False, False]  # loopback refused


def test_the_local_set_up_is_read_under_the_environment(tmp_path: Path) -> None:
    local = tmp_path / ".env.local"
    local.write_text(
        "# as scripts/start writes it\nDEBUG=true\nCRONICORN_SSRF_ALLOWLIST=127.0.0.1:8000\n"
    )
    read = run([sys.executable, "-c", GUARD], {"CRONICORN_ENV_FILE": str(local)})
    assert read.returncode == 0, read.stderr  # no key needed: a generated one
    assert json.loads(read.stdout) == [True, True, False]  # the demo's origin, not all loopback
    overridden = run(
        [sys.executable, "manage.py", "check"], {"CRONICORN_ENV_FILE": str(local), "DEBUG": "no"}
    )
    assert overridden.returncode != 0
    assert "DJANGO_SECRET_KEY is not set and DEBUG is false" in overridden.stderr


def test_a_named_local_set_up_that_is_missing_stops_the_process(tmp_path: Path) -> None:
    result = run([sys.executable, "manage.py", "check"], {"CRONICORN_ENV_FILE": "nowhere.env"})
    assert result.stderr.strip().splitlines() == [
        "Configuration error: CRONICORN_ENV_FILE='nowhere.env' is not a file."
    ]
