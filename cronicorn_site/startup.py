"""Loading the settings at a process's start: a malformed setting is one clear line."""

from __future__ import annotations

import sys


def load_settings_or_exit() -> None:
    """Load the settings now; on a malformed or missing value print the settings'
    message (it names the variable and what is allowed) on one line and exit 2, instead
    of a 40-line traceback whose last line is the only one that helps."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    try:
        settings.INSTALLED_APPS  # noqa: B018 - the first access imports the settings module
    except ImproperlyConfigured as exc:
        print(f"Configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
