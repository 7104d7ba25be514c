"""Log records for operators: scheduler ids on every scheduler line, secrets masked.

Wired in through ``LOGGING`` in settings (Django processes) and Celery's ``setup_logging``
signal (workers and beat), so every process formats the same way:

- ``SchedulerContextFilter`` gives each scheduler record ``endpoint_id``, ``run_id``,
  ``claim_token`` and ``source`` — from the record's ``extra=``, else from the ids bound
  with ``endpoints.engine.logs.log_context(...)`` around a unit of work, else ``None``,
  plus ``task_id`` and ``task_name`` inside a Celery task.
- ``TextFormatter`` and ``JsonFormatter`` (``CRONICORN_LOG_FORMAT``) mask secrets in the
  finished line, tracebacks and extra fields included, as a last safety net.
"""

from __future__ import annotations

import logging
import re

from celery import current_task
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from pythonjsonlogger.json import JsonFormatter as _BaseJsonFormatter

from endpoints.engine.logs import bound_ids

SCHEDULER_FIELDS = ("endpoint_id", "run_id", "claim_token", "source")
TASK_FIELDS = ("task_id", "task_name")
# Loggers whose every line is a scheduler line and so always carries the id fields.
SCHEDULER_LOGGERS = ("cronicorn", "endpoints", "planner")
MASK = "••••"
# Values shorter than this are not masked by value: they would blot out ordinary words.
MIN_SECRET_LENGTH = 8


class SchedulerContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        bound = bound_ids()
        if bound or record.name.startswith(SCHEDULER_LOGGERS):
            for name in SCHEDULER_FIELDS:
                if getattr(record, name, None) is None:
                    setattr(record, name, bound.get(name))
            for name, value in bound.items():
                if not hasattr(record, name):
                    setattr(record, name, value)
        self._add_task(record)
        return True

    @staticmethod
    def _add_task(record: logging.LogRecord) -> None:
        request = getattr(current_task, "request", None)
        task_id = getattr(request, "id", None)
        if task_id and not hasattr(record, "task_id"):
            record.task_id = task_id
            record.task_name = current_task.name


# Header, query and assignment forms of names that always hold secrets; ``claim_token``
# and ``secret_header_names`` are not secrets, and the look-arounds keep them out. Quotes
# may come escaped (JSON inside a JSON line); values stop at a backslash or quote so that
# masking never breaks a JSON line's escapes.
_SENSITIVE_NAMES = (
    r"authorization|proxy-authorization|x-api-key|api[_-]?key|apikey|access[_-]token|"
    r"refresh[_-]token|auth[_-]token|api[_-]token|id[_-]token|token|client[_-]secret|"
    r"hmac[_-]secret|secret[_-]key|secret|password|passwd|cookie|set-cookie"
)
_QUOTE = r"""(?:\\?["'])?"""
_NAMED_SECRET = re.compile(
    rf"(?P<name>(?<![\w-])(?:{_SENSITIVE_NAMES})(?![\w-]){_QUOTE}\s*[:=]\s*{_QUOTE})"
    r"""(?P<scheme>(?:bearer|basic|token|digest)\s+)?(?P<value>[^\s"'\\,;&}]+)""",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\b(?P<scheme>Bearer|Basic)\s+(?P<value>[A-Za-z0-9._~+/=-]{8,})")
_URL_PASSWORD = re.compile(
    r"""(?P<prefix>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<value>[^@/\s\\"']+)@"""
)


def mask_secrets(text: str) -> str:
    """Replace secret-looking values (named secrets, bearer tokens, URL passwords)."""
    text = _NAMED_SECRET.sub(lambda m: f"{m['name']}{m['scheme'] or ''}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m['scheme']} {MASK}", text)
    text = _URL_PASSWORD.sub(lambda m: f"{m['prefix']}{MASK}@", text)
    for value in _configured_secrets():
        text = text.replace(value, MASK)
    return text


def _configured_secrets() -> list[str]:
    """The secret values this deployment is configured with, once settings are loaded."""
    names = (
        "SECRET_KEY",
        "CRONICORN_LLM_API_KEY",
        "CRONICORN_METRICS_TOKEN",
        "EMAIL_HOST_PASSWORD",
    )
    try:
        values = [str(getattr(settings, name, "") or "") for name in names]
    except ImproperlyConfigured:  # a process without Django settings (a bare script)
        return []
    return [value for value in values if len(value) >= MIN_SECRET_LENGTH]


class TextFormatter(logging.Formatter):
    """``time level logger message`` then ``key=value`` for each id the record carries."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = [
            f"{name}={value}"
            for name in (*SCHEDULER_FIELDS, *TASK_FIELDS)
            if (value := getattr(record, name, None)) is not None
        ]
        if ids:
            first, newline, rest = line.partition("\n")
            line = f"{first} {' '.join(ids)}{newline}{rest}"
        return mask_secrets(line)


class JsonFormatter(_BaseJsonFormatter):
    """One JSON object a line: timestamp, level, logger, message and every extra field."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )

    def format(self, record: logging.LogRecord) -> str:
        return mask_secrets(super().format(record))
