from __future__ import annotations

from django.apps import AppConfig


class EndpointsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "endpoints"
    verbose_name = "Scheduling"
