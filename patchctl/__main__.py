"""`python -m patchctl`."""

from __future__ import annotations

from patchctl.cli.main import main

raise SystemExit(main())
