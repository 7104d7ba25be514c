"""Start a Celery program of cronicorn_site (``worker ...`` or ``beat ...``), the same as
``celery -A cronicorn_site ...``, except that ``BENCH_CHUNK_SIZE`` in the environment
overrides ``endpoints.tasks.CHUNK_SIZE`` (claims per execute message), which is a
module constant, not a setting, and ``BENCH_GC_LOG`` has the process log its garbage
collections (``bench/_gc.py``).

    .venv/bin/python bench/_celery_main.py worker -Q execute -P threads -c 4
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cronicorn_site.settings")

import django

django.setup()

from cronicorn_site.celery import app  # noqa: E402

if chunk := os.environ.get("BENCH_CHUNK_SIZE"):
    from endpoints import tasks

    tasks.CHUNK_SIZE = int(chunk)

if gc_log := os.environ.get("BENCH_GC_LOG"):
    from _gc import watch

    watch(Path(gc_log))

if __name__ == "__main__":
    sys.exit(app.start(sys.argv[1:]))
