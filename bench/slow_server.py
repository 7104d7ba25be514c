"""A slow local HTTP target for the benchmarks: answers every request with a 503 after
DELAY seconds (each connection closed after it), one asyncio process.

    .venv/bin/python bench/slow_server.py PORT DELAY

Prints ``ready`` once listening.
"""

from __future__ import annotations

import asyncio
import sys


async def slow_target(port: int, delay: float) -> None:
    """Answers every request with a 503 after ``delay`` seconds; prints ``ready``."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            await asyncio.sleep(delay)
            body = b'{"status": "busy"}'
            writer.write(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(slow_target(int(sys.argv[1]), float(sys.argv[2])))
