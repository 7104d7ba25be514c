"""A real SMTP server on 127.0.0.1 (aiosmtpd) that keeps every message it receives."""

from __future__ import annotations

import threading
from email import message_from_bytes
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller

from tests.http_targets import free_port


class SmtpCapture:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: list[Message] = []
        self.port = free_port()
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> SmtpCapture:
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = message_from_bytes(envelope.content)
        message["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
        with self._lock:
            self._messages.append(message)
        return "250 Message accepted for delivery"

    def messages(self) -> list[Message]:
        with self._lock:
            return list(self._messages)

    def subjects(self) -> list[str]:
        return [str(message["Subject"]) for message in self.messages()]
