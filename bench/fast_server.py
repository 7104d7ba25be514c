"""A fast local HTTP/1.1 target for the benchmarks: keep-alive, answers every request
with a small JSON body, no framework (plain asyncio protocol), one process.

    .venv/bin/python bench/fast_server.py PORT [ARRIVALS_FILE]

Prints ``ready`` once listening. With ``ARRIVALS_FILE`` it notes when each request
arrived (its path and ``time.time()``) and writes them there as JSON when asked with a
request to ``/__arrivals``: lateness measured at the target, where the call lands.
Its cost per request is a few tens of microseconds, so
the benchmarks measure the scheduler, not the target.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time

BODY = b'{"ok": true, "items": 3}'
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)
MAX_HEADER = 64 * 1024
ARRIVALS: list[tuple[str, float]] | None = None
ARRIVALS_FILE = ""


class Http11(asyncio.Protocol):
    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        replies = []
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEADER:
                    self.transport.close()
                break
            length = content_length(self.buffer[:end])
            if len(self.buffer) < end + 4 + length:
                break
            if ARRIVALS is not None:
                note_arrival(self.buffer[: self.buffer.find(b"\r\n")])
            self.buffer = self.buffer[end + 4 + length :]
            replies.append(RESPONSE)
        if replies:
            self.transport.write(b"".join(replies))


def note_arrival(request_line: bytes) -> None:
    assert ARRIVALS is not None
    path = request_line.split(b" ")[1].decode("latin-1") if b" " in request_line else ""
    if path == "/__arrivals":
        with open(ARRIVALS_FILE, "w") as out:
            json.dump(ARRIVALS, out)
        return
    ARRIVALS.append((path, time.time()))


def content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip() or 0)
    return 0


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Http11, "127.0.0.1", port, backlog=1024, reuse_address=True)
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set_result, None)
    print("ready", flush=True)
    async with server:
        await stop


if __name__ == "__main__":
    if len(sys.argv) > 2:
        ARRIVALS, ARRIVALS_FILE = [], sys.argv[2]
    asyncio.run(serve(int(sys.argv[1])))
