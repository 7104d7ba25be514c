"""What the alert tests share: a real SMTP server (aiosmtpd) as the mail backend, and
alert settings that make a digest, a retry and a hanging channel last seconds, not
minutes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.alerts.smtp import SmtpCapture


@pytest.fixture
def smtp(settings: Any) -> Iterator[SmtpCapture]:
    with SmtpCapture() as server:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST = "127.0.0.1"
        settings.EMAIL_PORT = server.port
        yield server


@pytest.fixture
def quick_alerts(settings: Any) -> None:
    settings.CRONICORN_ALERT_DIGEST_SECONDS = 5
    settings.CRONICORN_NOTIFY_RETRY_SECONDS = 10
    settings.CRONICORN_NOTIFY_TIMEOUT_SECONDS = 1
    settings.CRONICORN_ALLOW_PRIVATE_ADDRESSES = True
