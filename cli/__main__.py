"""``python -m cli``: the same as the ``cronicorn`` console script."""

from __future__ import annotations

import sys

from cli.main import main

sys.exit(main())
