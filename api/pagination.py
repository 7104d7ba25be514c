"""Keyset ("cursor") pagination: runs grow to billions of rows, so a page costs one
indexed range query, never a COUNT or an OFFSET. The cursor is the last row's sort key
and id, opaque to the client (URL-safe base64 of JSON)."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any, TypeVar

from django.db.models import Model, Q, QuerySet
from ninja.errors import HttpError

M = TypeVar("M", bound=Model)
# A page as the operations return it: ``items`` (model instances, serialised once by the
# response schema, ``JobPage``, ``RunPage``…, on the way out) and ``next_cursor``.
Page = dict[str, Any]

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
# The cursors this API gives out are short; anything longer was not made here.
MAX_CURSOR_CHARS = 200
# Ids are PostgreSQL bigints.
MAX_ID = 2**63 - 1
BAD_CURSOR = "The cursor is not one this API gave out; pass next_cursor unchanged."


def keyset_page(
    queryset: QuerySet[M], *, key: str, cursor: str | None, limit: int, descending: bool
) -> Page:
    """One page ordered by ``key`` then id (both descending or both ascending)."""
    if not 1 <= limit <= MAX_LIMIT:
        raise HttpError(422, f"limit must be 1..{MAX_LIMIT}; got {limit}.")
    sign, after = ("-", "lt") if descending else ("", "gt")
    if cursor:
        value, pk = _decode(cursor, timestamp=key != "id")
        # The first condition bounds the index range scan (an OR alone would be a filter
        # over every row before the cursor); the second only sorts out ties on ``key``.
        queryset = queryset.filter(**{f"{key}__{after}e": value}).filter(
            Q(**{f"{key}__{after}": value}) | Q(**{f"pk__{after}": pk})
        )
    rows = list(queryset.order_by(f"{sign}{key}", f"{sign}pk")[: limit + 1])
    if len(rows) <= limit:
        return {"items": rows, "next_cursor": None}
    last = rows[limit - 1]
    return {"items": rows[:limit], "next_cursor": _encode(getattr(last, key), last.pk)}


def _encode(value: Any, pk: int) -> str:
    raw = json.dumps([value.isoformat() if isinstance(value, datetime) else value, pk])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(cursor: str, *, timestamp: bool) -> tuple[Any, int]:
    """The cursor's (key, id), or a 400: a forged cursor (Infinity, NaN, deep nesting,
    a huge number, a naive time) is refused here, never passed to the database."""
    if len(cursor) > MAX_CURSOR_CHARS:
        raise HttpError(400, BAD_CURSOR)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value, pk = json.loads(raw, parse_constant=_refuse_constant)
        if timestamp:
            key: Any = datetime.fromisoformat(value)
            if key.tzinfo is None:
                raise ValueError("a cursor's time has an offset")
        else:
            key = _bounded_id(value)
        return key, _bounded_id(pk)
    except (binascii.Error, ValueError, TypeError, RecursionError, OverflowError) as exc:
        raise HttpError(400, BAD_CURSOR) from exc


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a cursor holds")


def _bounded_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ID:
        raise ValueError("a cursor's id is a whole number in the id range")
    return value
