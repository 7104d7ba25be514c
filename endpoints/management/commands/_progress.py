"""Progress bars for the long commands (import_endpoints, export_endpoints, cleanup_runs):
tqdm on stderr, one bar per stage of the work (endpoints/progress.py).

Shown only on a terminal (tqdm's ``disable=None``) and only once a stage has lasted a
second (``delay``; tqdm's own ``TQDM_DELAY`` overrides it): a quick command, a pipe, a
file or a CI log get exactly the output they had before, and stdout never carries a bar."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from tqdm import tqdm

from endpoints.progress import Progress

UNITS = {"checking": "endpoint", "writing": "object", "exporting": "endpoint", "deleting": "run"}
DELAY_SECONDS = 1.0


@contextmanager
def progress_bars(stream: TextIO | None = None) -> Iterator[Progress]:
    """A ``progress`` callback drawing a bar per stage on ``stream`` (stderr)."""
    out = stream if stream is not None else sys.stderr
    bars: dict[str, Any] = {}

    def progress(stage: str, done: int, total: int | None) -> None:
        bar = bars.get(stage)
        if bar is None:
            for earlier in bars.values():
                earlier.close()
            # tqdm reads TQDM_* variables as its defaults, which a given argument beats.
            delay = {} if "TQDM_DELAY" in os.environ else {"delay": DELAY_SECONDS}
            bar = bars[stage] = tqdm(
                desc=stage.capitalize(),
                total=total,
                unit=f" {UNITS.get(stage, 'item')}s",
                file=out,
                disable=None,  # only on a terminal
                leave=False,
                dynamic_ncols=True,
                **delay,
            )
        bar.update(done - bar.n)

    try:
        yield progress
    finally:
        for bar in bars.values():
            bar.close()
