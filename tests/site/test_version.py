"""Cronicorn's version comes from pyproject.toml alone: the MCP server and the OpenAPI
document report what it says."""

from __future__ import annotations

import asyncio
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client

from api.main import api
from api.mcp_server import build_server
from endpoints import version
from endpoints.version import cronicorn_version

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pyproject_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A pyproject.toml of another release, read instead of the checkout's."""
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nname = "cronicorn-django"\nversion = "9.8.7"\n')
    monkeypatch.setattr(version, "PYPROJECT", path)
    cronicorn_version.cache_clear()
    yield path
    cronicorn_version.cache_clear()


def test_the_mcp_server_reports_the_version_pyproject_gives(pyproject_says: Path) -> None:
    async def server_version() -> str:
        async with Client(build_server()) as client:
            return client.server_info.version

    assert asyncio.run(server_version()) == "9.8.7"


def test_the_openapi_document_gives_the_version_pyproject_gives() -> None:
    with (ROOT / "pyproject.toml").open("rb") as file:
        written = tomllib.load(file)["project"]["version"]
    assert api.get_openapi_schema()["info"]["version"] == written
