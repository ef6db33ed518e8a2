"""patchctl: manage a patch series on a pinned upstream.

patchctl materializes a pinned upstream (a PyPI sdist, a git commit or an archive, checked by
sha256 and git tree id) into a clean-room git repository it owns, applies an ordered series
of patches strictly (no fuzz, no offsets, whitespace untouched, one reproducible commit per
patch), builds the result, captures edits back into patch files and verifies that the round
trip is byte-for-byte exact.
"""

from __future__ import annotations

__version__ = "0.1.0"
