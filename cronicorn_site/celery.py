"""The Celery app: configured from Django settings (namespace CELERY), tasks autodiscovered."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cronicorn_site.settings")

app = Celery("cronicorn")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
