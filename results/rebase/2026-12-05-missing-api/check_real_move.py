"""The missing-API check (patchctl/ops/rebase/vanished.py) on the real 0.3.36 -> 0.3.34 move:
the eight-patch series as that move took it (patches/llamafile at 2f588f3) and the series as
the move left it (results/rebase/2026-12-05-move-0.3.34/series). Prints one JSON document.

    PYTHONPATH=. .venv/bin/python results/rebase/2026-12-05-missing-api/check_real_move.py OLD MOVED

OLD: patches/llamafile at 2f588f3 extracted to a folder (`git archive 2f588f3
patches/llamafile | tar -x`); MOVED: results/rebase/2026-12-05-move-0.3.34/series.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from patchctl.gitlayer.git import Git
from patchctl.ops.rebase.train import _trees
from patchctl.ops.rebase.vanished import missing_api
from patchctl.series.model import load_series


def main() -> None:
    old = load_series(Path(sys.argv[1]))
    moved = load_series(Path(sys.argv[2]))
    out: dict[str, object] = {"old": old.upstream.describe(), "new": moved.upstream.describe()}
    with tempfile.TemporaryDirectory() as tmp:
        git = Git.init(Path(tmp) / "t.git", bare=True)
        trees = {"before": _trees(git, old, Path(tmp), None)}
        trees["after"] = _trees(git, moved, Path(tmp), None)
        for label, series in (("before", old), ("after", moved)):
            t = trees[label]
            pairs = [(p.id, t[i], t[i + 1]) for i, p in enumerate(series.patches)]
            start = time.perf_counter()
            found = missing_api(git, trees["before"][0], trees["after"][0], pairs)
            out[f"{label}_seconds"] = round(time.perf_counter() - start, 2)
            out[label] = {p.id: [m.to_json() for m in p.missing] for p in found}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
