"""DEBUG is off unless set; the outbound guard has its own setting, never tied to DEBUG;
a malformed setting is one line naming the variable, for every process's entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parent.parent
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
    clean.update(DJANGO_SETTINGS_MODULE="cronicorn_site.settings", **env)
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
