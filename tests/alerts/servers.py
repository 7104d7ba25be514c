"""Test helpers for alerts: a channel that never answers and a notify loop running beside
a test, as ``runscheduler`` runs it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection
from django.utils import timezone

from notifications.alerts import notify_cycle


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never says a word: a dead webhook, SMTP
    server or chat service as a client sees one (connected, then nothing until timeout)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port = int(self._listener.getsockname()[1])
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self.accepted = 0

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for held in self._held:
            held.close()
        self._listener.close()

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _address = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(client)  # held open, never read from or written to
            self.accepted += 1


@contextmanager
def notify_loop(every: float, *, wait: float = 0.0) -> Iterator[list[BaseException]]:
    """Run the notify cycle every ``every`` seconds in a thread (as runscheduler's notify
    loop does) until the block ends; yields the errors it met (the test asserts none)."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            while not stop.is_set():
                try:
                    notify_cycle(now=timezone.now(), wait=wait)
                except Exception as exc:  # recorded for the test to fail on
                    errors.append(exc)
                stop.wait(every)
        finally:
            connection.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield errors
    finally:
        stop.set()
        thread.join(timeout=30)
