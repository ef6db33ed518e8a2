"""markers: where a patch adds a marker, and marker presence in trees."""

from __future__ import annotations

from pathlib import Path

from support.files import write_files
from support.repos import new_repo

from patchctl.series.markers import (
    MarkerCheck,
    added_by,
    check_markers_batch,
    files_adding,
    markers_in_tree,
    read_blobs,
    touched_paths,
)

PATCH = b"""diff --git a/src/a.c b/src/a.c
index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644
--- a/src/a.c
+++ b/src/a.c
@@ -1,2 +1,3 @@
 int a;
+// patchctl 0078-dca
 int b;
diff --git "a/sp ace/\\303\\251.h" "b/sp ace/\\303\\251.h"
new file mode 100644
--- /dev/null
+++ "b/sp ace/\\303\\251.h"
@@ -0,0 +1 @@
+#define X 1 // patchctl 0078-dca
diff --git a/gone.c b/gone.c
deleted file mode 100644
--- a/gone.c
+++ /dev/null
@@ -1 +0,0 @@
-// patchctl 0078-dca (removed lines do not count)
"""


def test_files_adding_reads_added_lines_only() -> None:
    assert files_adding(PATCH, "// patchctl 0078-dca") == ("src/a.c", "sp ace/é.h")
    assert files_adding(PATCH, "absent") == ()


def test_touched_paths_and_added_by() -> None:
    assert touched_paths(PATCH) == ["src/a.c", "sp ace/é.h", "gone.c"]
    assert added_by(PATCH, ["// patchctl 0078-dca", "nope"]) == frozenset({"// patchctl 0078-dca"})


def test_presence_in_trees(tmp_path: Path) -> None:
    files = {"a.c": b"int a; // MARK-A\n", "b.bin": b"\0MARK-B\n", "c.h": b"int c;\n"}
    made = new_repo(tmp_path / "r", files)
    git, base = made.git, made.tree
    write_files(tmp_path / "r", {"c.h": b"int c; // MARK-C\n"})
    post = git.snapshot_worktree()
    assert markers_in_tree(git, base, ["MARK-A", "MARK-B", "MARK-C"]) == frozenset({"MARK-A"})
    assert markers_in_tree(git, base, ["MARK-A"], paths=["c.h"]) == frozenset()
    assert markers_in_tree(git, base, ["MARK-A"], paths=[]) == frozenset()
    jobs = [(base, post, ["MARK-C", "MARK-A", "MARK-B"], ["c.h", "b.bin"])]
    (checks,) = check_markers_batch(git, jobs)
    assert checks == (
        MarkerCheck("MARK-C", False, True),
        MarkerCheck("MARK-A", False, False),  # only the touched paths are read
        MarkerCheck("MARK-B", False, False),  # binary files are skipped, like git grep -I
    )
    assert [c.ok for c in checks] == [True, False, False]


def test_read_blobs_missing_and_trees(tmp_path: Path) -> None:
    made = new_repo(tmp_path / "r", {"d/x": b"x\n"})
    git, base = made.git, made.tree
    blobs = read_blobs(git, [f"{base}:d/x", f"{base}:nope", f"{base}:d"])
    assert blobs == {f"{base}:d/x": b"x\n", f"{base}:nope": None, f"{base}:d": None}
