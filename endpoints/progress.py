"""A long operation's progress, told to whoever shows it (a command's progress bar, see
endpoints/management/commands/_progress.py): the operation calls
``progress(stage, done, total)`` as it goes, ``total`` None when it is not known ahead."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Progress = Callable[[str, int, "int | None"], None]


@dataclass
class Tally:
    """Counts one stage's units and tells ``progress`` (if any) at each step."""

    progress: Progress | None
    stage: str
    total: int | None = None
    done: int = 0

    def add(self, count: int = 1) -> None:
        self.done += count
        if self.progress is not None and count:
            self.progress(self.stage, self.done, self.total)
