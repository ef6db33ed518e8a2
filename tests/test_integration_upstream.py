"""Integration: the REAL default upstream (llama-cpp-python 0.3.36 sdist) plus a real patch.

The sdist is kept in a persistent cache between runs: `$PATCHCTL_TEST_CACHE`, default
`~/.cache/patchctl-test` of the real user (not the test's fake HOME). On a fresh machine the
first run downloads it from PyPI through patchctl's own code path; a local copy at
`$PATCHCTL_TEST_SDIST` (default /tmp/dl/...) seeds the cache only if its sha256 matches.
"""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

import pytest

from patchctl.fsio import sha256_file
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.room.cleanroom import load_cleanroom
from patchctl.series.model import Patch, load_series, save_series
from patchctl.upstream.sources import find_cached, store

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
SDIST_SHA = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SDIST_NAME = "llama_cpp_python-0.3.36.tar.gz"
BASE_TREE = "b2da53584951ec8aa40680229509a6646a637560"
# Base tree + PATCH, computed independently with plain `git apply --cached` + `write-tree`.
PATCHED_TREE = "fe4a7dab4257d58106e494130d0d34951dba49e0"
PATCH = b"".join(
    line + b"\n"
    for line in (
        b"diff --git a/src/llama.cpp b/src/llama.cpp",
        b"index e97272c8895b6399b6ed3812c11dc5fa25d4ce22..1a27610652a6a48e32d344e11435cea0bb4f9cf3"
        b" 100644",
        b"--- a/src/llama.cpp",
        b"+++ b/src/llama.cpp",
        b"@@ -11,6 +11,8 @@",
        b' #include "llama-model-saver.h"',
        b' #include "llama-model.h"',
        b" ",  # a blank context line is a single space
        b"+// patchctl integration test: a small real patch on the pinned upstream",
        b"+",
        b' #include "ggml.h"',
        b' #include "ggml-cpp.h"',
        b' #include "ggml-backend.h"',
    )
)
# Resolved at import, before the hermetic seal replaces HOME.
REAL_HOME = Path(pwd.getpwuid(os.getuid()).pw_dir)
TEST_CACHE = Path(os.environ.get("PATCHCTL_TEST_CACHE", REAL_HOME / ".cache" / "patchctl-test"))
LOCAL_SDIST = Path(os.environ.get("PATCHCTL_TEST_SDIST", f"/tmp/dl/{SDIST_NAME}"))


def seed_cache(cache: Path) -> None:
    """Copy a local sdist into the content-addressed store, only if its sha256 matches."""
    if find_cached(SDIST_SHA, cache) is not None or not LOCAL_SDIST.is_file():
        return
    if sha256_file(LOCAL_SDIST) == SDIST_SHA:
        store(LOCAL_SDIST, SDIST_SHA, SDIST_NAME, cache)


@pytest.fixture
def real_series(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped series.yaml (same pin) with one small real patch, in a temp project."""
    monkeypatch.setenv("PATCHCTL_CACHE_DIR", str(TEST_CACHE))
    seed_cache(TEST_CACHE)
    directory = tmp_path / "proj" / "patches" / "llamafile"
    directory.mkdir(parents=True)
    shutil.copy(REPO / "patches" / "llamafile" / "series.yaml", directory / "series.yaml")
    (directory / "0001-integration.patch").write_bytes(PATCH)
    series = load_series(directory, check_files=False)
    entry = Patch(id="0001-integration", file="0001-integration.patch", title="Integration")
    save_series(series.with_patches([entry]))
    return directory


def test_real_upstream_materializes_to_the_pinned_tree_and_takes_a_patch(
    real_series: Path,
) -> None:
    report = cleanroom_apply(real_series)
    workdir = real_series.parent.parent / "cleanroom" / "llamafile"
    assert report.cleanroom == workdir
    assert report.base_tree == BASE_TREE
    assert report.tree == PATCHED_TREE
    assert [a.id for a in report.applied] == ["0001-integration"]
    assert find_cached(SDIST_SHA, TEST_CACHE) is not None  # cached for the next run
    room = load_cleanroom(workdir)
    assert room.dirty_paths() == []
    assert not (workdir / ".git" / "modules").exists()
    assert room.meta["dropped"] == [".git"]  # the sdist's gitlink file
    assert b"// patchctl integration test" in (workdir / "src" / "llama.cpp").read_bytes()
    # Idempotent: a second run keeps the applied commit.
    again = cleanroom_apply(real_series)
    assert again.head == report.head and again.applied[0].reused
