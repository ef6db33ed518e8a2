"""`python -m patchctl`."""

from __future__ import annotations

from patchctl.cli import main

raise SystemExit(main())
