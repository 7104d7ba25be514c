"""The Celery app: configured from Django settings (namespace CELERY), tasks autodiscovered."""

from __future__ import annotations

import logging.config
import os
from typing import Any

from celery import Celery
from celery.signals import beat_init, setup_logging, worker_init

from cronicorn_site.startup import load_settings_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cronicorn_site.settings")
load_settings_or_exit()


@setup_logging.connect
def use_django_logging(**_: Any) -> None:
    """Workers and beat log through Django's LOGGING (JSON, scheduler ids, secrets masked).

    Connecting this signal also stops Celery from installing its own handlers and from
    redirecting stdout into the log.
    """
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


@worker_init.connect
@beat_init.connect
def keep_to_the_scheduler_cores(**_: Any) -> None:
    """A worker or beat keeps to CRONICORN_SCHEDULER_CPUS, before its pool's threads."""
    from endpoints.cpus import keep_to_the_scheduler_cores as keep

    keep()


app = Celery("cronicorn")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
