"""What PostgreSQL stores in its text and jsonb columns, and what it refuses: NUL, unpaired
surrogates (invalid Unicode), NaN and the infinities (not JSON). Pure rules, no models.

Two uses: a value a person gives is refused in words (``json_scalar_problem``,
``unencodable_problem``: the validation path, run policies); a value a program sent us
(a target's response, a model's tool call), which we record rather than judge, is made
storable (``storable``), so one such character never costs the whole record.
"""

from __future__ import annotations

import math
import re
from typing import Any

# What PostgreSQL refuses in text and jsonb: NUL and unpaired surrogates.
_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")
# JSON's own names for the floats it cannot carry (Python's json writes and reads them).
_FLOAT_NAMES = {math.inf: "Infinity", -math.inf: "-Infinity"}


def unencodable_problem(value: str) -> str:
    try:
        value.encode()
    except UnicodeEncodeError:
        return "Remove the unpaired surrogate characters: the text is not valid Unicode."
    return ""


def json_scalar_problem(item: Any) -> str:
    """What keeps a scalar from being stored as JSON in PostgreSQL (jsonb), or ""."""
    if isinstance(item, str):
        if "\x00" in item or unencodable_problem(item):
            return "holds text with NUL or invalid Unicode; remove it"  # jsonb refuses both
    elif isinstance(item, float) and not math.isfinite(item):
        return "holds NaN or Infinity, which JSON cannot carry; use a number or null"
    elif item is not None and not isinstance(item, (int, float, bool)):
        return (
            f"holds a value of type {type(item).__name__}, which is not JSON (objects, lists, "
            "text, numbers, true/false, null); quote dates and times"
        )
    return ""


def storable(value: Any) -> Any:
    """``value`` as PostgreSQL can store it: NUL and unpaired surrogates replaced by
    U+FFFD, NaN and the infinities by their names as text ("NaN", "Infinity")."""
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, float) and not math.isfinite(value):
        return _FLOAT_NAMES.get(value, "NaN")
    if isinstance(value, dict):
        return {storable(str(key)): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value
