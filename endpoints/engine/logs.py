"""The scheduler's log lines: one logger, the ids every line carries, the ids bound to a
unit of work.

A line is logged with ``endpoint_id``, ``run_id``, ``claim_token`` and ``source`` as
``extra`` fields (``log_event``), or inside ``log_context(...)``, which binds them to every
line logged within, the executor's included. The formatters of ``cronicorn_site.logs``
print them and mask secrets; the engine only supplies the ids.
"""

from __future__ import annotations

import contextvars
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

logger = logging.getLogger("cronicorn.scheduler")

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "cronicorn_log_context", default=None
)


class ClaimIds(Protocol):
    """What a line needs of a claim (``endpoints.engine.claiming.Claim``)."""

    @property
    def endpoint_id(self) -> int: ...

    @property
    def claim_token(self) -> uuid.UUID: ...

    @property
    def source(self) -> str: ...


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Bind ids (endpoint_id, run_id, claim_token, source) to every line logged inside."""
    token = _context.set({**(_context.get() or {}), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def bound_ids() -> dict[str, Any]:
    """The ids bound by the innermost ``log_context``, if any."""
    return _context.get() or {}


def log_event(
    level: int,
    message: str,
    *,
    claim: ClaimIds | None = None,
    exc: bool | BaseException = False,
    **ids: Any,
) -> None:
    """Log with endpoint id, run id, claim token and source as ``extra`` fields, which the
    formatters (cronicorn_site.logs) print on every line."""
    context = {
        "endpoint_id": ids.get("endpoint_id", claim.endpoint_id if claim else None),
        "run_id": ids.get("run_id"),
        "claim_token": str(claim.claim_token) if claim else ids.get("claim_token"),
        "source": claim.source if claim else ids.get("source"),
    }
    logger.log(level, message, extra=context, exc_info=exc)
