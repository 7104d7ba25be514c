"""A response's body as the run keeps it: JSON when it parses, else text (the executor's
``HttpResult.body``), storable as it is: what PostgreSQL's jsonb refuses and many services
send (NaN and Infinity, which Python's json writes by default; NUL; half a surrogate
pair) is replaced ("NaN", "Infinity", U+FFFD, ``endpoints.jsonb.storable``), so the run,
the success checks and the planner keep the rest of the body rather than none of it."""

from __future__ import annotations

import codecs
import json
import re
from typing import Any

from endpoints.jsonb import storable
from endpoints.validation import json_text_depth_problem

# Response JSON nested deeper than this is kept as text.
RESPONSE_JSON_MAX_DEPTH = 100


def decode_body(raw: bytes, content_type: str, truncated: bool) -> Any:
    """The body as JSON when it parses, else as text; never raises, whatever the server
    sends: an unknown or non-text charset falls back to UTF-8, and JSON nested deeper than
    ``RESPONSE_JSON_MAX_DEPTH`` is kept as text (parsing it would recurse, and so would
    every later use of it)."""
    if not raw:
        return None
    try:
        text = raw.decode(_charset(content_type), errors="replace")
    except (UnicodeError, LookupError, ValueError):  # e.g. the idna codec ignores "replace"
        text = raw.decode("utf-8", errors="replace")
    if truncated:
        return _kept_text(text)  # cut JSON would not parse; the text is still worth keeping
    if _is_json_type(content_type) or text.lstrip()[:1] in ("{", "["):
        if _may_nest_deeper(text) and json_text_depth_problem(
            text, max_depth=RESPONSE_JSON_MAX_DEPTH
        ):
            return _kept_text(text)
        try:
            body = json.loads(text)
        except (ValueError, RecursionError):
            return _kept_text(text)
        return storable(body) if _may_hold_unstorable(text) else body
    return _kept_text(text)


def _kept_text(text: str) -> str:
    # Decoded with errors="replace", the text holds no lone surrogate; NUL it may.
    return storable(text) if "\x00" in text else text


def _may_hold_unstorable(text: str) -> bool:
    """Whether JSON ``text`` may parse into what jsonb refuses: substring scans at C speed,
    so most bodies are never walked. (A literal past a float's range, 1e400, parses as
    infinity unseen here; the engine's recording makes it storable, running._record_alone.)"""
    return any(mark in text for mark in ("NaN", "Infinity", "\\u0000", "\\ud", "\\uD"))


def _may_nest_deeper(text: str) -> bool:
    # Counting runs at C speed; most bodies have too few brackets to need the scan.
    return text.count("[") + text.count("{") > RESPONSE_JSON_MAX_DEPTH


def _charset(content_type: str) -> str:
    """The declared charset when Python knows it as a text encoding, else UTF-8
    (``charset=rot13`` or ``base64`` name codecs that are not text encodings)."""
    match = re.search(r"charset=\"?([\w.:-]+)", content_type, re.IGNORECASE)
    if match is None:
        return "utf-8"
    try:
        info = codecs.lookup(match.group(1))
    except LookupError:
        return "utf-8"
    return info.name if getattr(info, "_is_text_encoding", True) else "utf-8"


def _is_json_type(content_type: str) -> bool:
    media_type = content_type.split(";")[0].strip().lower()
    return media_type in ("application/json", "text/json") or media_type.endswith("+json")
