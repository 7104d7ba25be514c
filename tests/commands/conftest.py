"""What the command tests share: the clock frozen at ``NOW`` (tests/conftest.py's
``now``), so that what a command prints about time is the same on every run."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import time_machine


@pytest.fixture
def frozen(now: datetime) -> Iterator[Any]:
    with time_machine.travel(now, tick=False) as traveller:
        yield traveller
