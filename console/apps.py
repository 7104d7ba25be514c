from __future__ import annotations

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """No models: the admin registrations, templates tags and pages of the other apps."""

    name = "console"
    verbose_name = "Console"
