"""Fixtures of the configuration-file tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml


@pytest.fixture
def write(tmp_path: Path) -> Callable[..., Path]:
    counter = iter(range(1000))

    def write(content: dict[str, Any] | str, suffix: str = ".yaml") -> Path:
        path = tmp_path / f"config-{next(counter)}{suffix}"
        if isinstance(content, str):
            path.write_text(content)
        elif suffix == ".json":
            path.write_text(json.dumps(content))
        else:
            path.write_text(yaml.safe_dump(content, sort_keys=False))
        return path

    return write
