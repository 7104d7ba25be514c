"""What the MCP tests share: the server over HTTP on the test database (``mcp_http``),
after the common ``api_world`` so that it is stopped before the database is emptied."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mcp.serving import mcp_over_http
from tests.world import ApiWorld


@pytest.fixture
def mcp_http(api_world: ApiWorld, tmp_path: Path) -> Iterator[str]:
    with mcp_over_http(tmp_path / "mcp-http.log") as url:
        yield url
