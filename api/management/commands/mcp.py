"""``manage.py mcp``: the MCP server over stdio (desktop assistants), or over streamable
HTTP at /mcp with ``--http`` (uvicorn serving cronicorn_site.asgi, Django included)."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from api.auth import principal_for_key


class Command(BaseCommand):
    help = (
        "Serve the MCP tools: over stdio with --api-key (or CRONICORN_API_KEY), or over "
        "HTTP with --http (each request sends its key as 'Authorization: Bearer …')."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--api-key", help="The key for stdio (default: CRONICORN_API_KEY).")
        parser.add_argument("--http", action="store_true", help="Streamable HTTP at /mcp.")
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8765)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["http"]:
            import uvicorn

            from endpoints.cpus import yield_to_the_scheduler

            yield_to_the_scheduler()

            uvicorn.run(
                "cronicorn_site.asgi:application",
                host=options["host"],
                port=options["port"],
                log_config=None,  # Django's LOGGING (keys never logged) stays in charge
            )
            return
        key = options["api_key"] or os.environ.get("CRONICORN_API_KEY", "")
        if not key or principal_for_key(key) is None:
            raise CommandError(
                "No usable API key: pass --api-key or set CRONICORN_API_KEY to a key from "
                "manage.py create_api_key (it may be expired or revoked)."
            )
        from api.mcp_server import build_server

        build_server(stdio_key=key).run("stdio")
