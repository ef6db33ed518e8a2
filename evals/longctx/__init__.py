"""Long-context quality harness: retrieval tasks far past a model's trained length.

RULER-style tasks (passkey, multi-key and multi-value needle-in-a-haystack, variable tracking) are
hidden in haystacks of natural text shipped with Python and the OS, sent token-exact through the
real ``llama-server`` HTTP API, and scored exactly, per method (plain RoPE, linear, YaRN, DCA,
...) and length (multiples of the trained context). Results are JSON with every trial, Wilson
95% intervals per cell, peak memory per server process, PNG plots and Markdown tables.

Run it as ``python3 -m evals.longctx`` from the repository root; docs/dca.md ("Long-context
quality") documents the commands, the tasks, the scoring and the device plans.
"""

from __future__ import annotations

SCHEMA = "patchctl-longctx/1"
"""The results document's schema id (results.py)."""
