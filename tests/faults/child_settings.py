"""The project's settings plus broker transport options from the environment, for the
visibility-timeout case: ``CELERY_BROKER_TRANSPORT_OPTIONS`` has no environment hook, and
the fault suite must not change the engine's settings to get one.

``FAULTS_BROKER_TRANSPORT_OPTIONS`` is a JSON object merged over the project's options.
"""

from __future__ import annotations

import json
import os

from cronicorn_site.settings import *  # noqa: F403
from cronicorn_site.settings import CELERY_BROKER_TRANSPORT_OPTIONS as _PROJECT_OPTIONS

CELERY_BROKER_TRANSPORT_OPTIONS = {
    **_PROJECT_OPTIONS,
    **json.loads(os.environ.get("FAULTS_BROKER_TRANSPORT_OPTIONS", "{}")),
}
