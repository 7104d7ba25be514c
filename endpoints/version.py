"""Cronicorn's version, written in one place: pyproject.toml's ``[project] version``.

The project is not installed as a distribution (``[tool.uv] package = false``), so
importlib.metadata has nothing to read; pyproject.toml sits beside the code in a checkout
and in the image (the Dockerfile copies the tree). The MCP server and the API's OpenAPI
document report it.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


@functools.cache
def cronicorn_version() -> str:
    with PYPROJECT.open("rb") as file:
        return str(tomllib.load(file)["project"]["version"])
