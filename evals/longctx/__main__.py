"""Entry point: ``python3 -m evals.longctx`` (from the repository root)."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
