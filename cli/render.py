"""What a person reads: tables with aligned columns, times without their microseconds,
durations in words; and the API's problem details as sentences."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

Column = tuple[str, Callable[[dict[str, Any]], Any]]
MAX_CELL = 60


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    cells = [[cell(fn(row)) for _, fn in columns] for row in rows]
    heads = [head for head, _ in columns]
    widths = [max([len(head), *(len(r[i]) for r in cells)]) for i, head in enumerate(heads)]
    lines = [heads, *cells]
    padded = ("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in lines)
    return "\n".join(line.rstrip() for line in padded)


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = when(value) if isinstance(value, str) and _ISO.match(value) else str(value)
    text = " ".join(text.split())
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


def when(value: str | None) -> str:
    """``2026-12-01T18:55:11.123456Z`` as ``2026-12-01 18:55:11Z``."""
    if not value:
        return "-"
    head, _, rest = value.partition(".")
    zone = "" if not rest else rest.lstrip("0123456789")
    return head.replace("T", " ") + ("Z" if zone in ("Z", "+00:00") else zone)


def duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    seconds, parts = ms // 1000, []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts)


def fields(values: dict[str, Any], names: Sequence[str]) -> str:
    width = max(len(name) for name in names)
    return "\n".join(f"{name.ljust(width)}  {cell(values.get(name))}" for name in names)


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


HINTS = {
    401: "the API key was refused: check CRONICORN_API_KEY or the profile's key (it may be "
    "expired or revoked)",
    403: "this key may not do that (a read key cannot change anything)",
}


def problem(status: int, body: dict[str, Any], retry_after: str | None) -> str:
    """An error answer as sentences: status, the API's detail, every field's messages."""
    title = body.get("title") or "Error"
    lines = [f"{status} {title}: {body.get('detail') or title}"]
    if status in HINTS:
        lines.append(f"  ({HINTS[status]})")
    errors = body.get("errors") or {}
    for field, messages in errors.items() if isinstance(errors, dict) else []:
        for message in messages if isinstance(messages, list) else [messages]:
            lines.append(f"  {field}: {message}")
    if status == 429 and retry_after:
        lines.append(f"  Retry after {retry_after} s.")
    return "\n".join(lines)
