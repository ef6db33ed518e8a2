"""project.py: the project root a series defines, its registry, and the inside check."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchctl.errors import DirtyTree
from patchctl.series.project import check_inside, project_root, registry_path, series_key


def test_the_patches_layout_and_any_other_directory(tmp_path: Path) -> None:
    series = tmp_path / "proj" / "patches" / "llamafile"
    series.mkdir(parents=True)
    assert project_root(series) == tmp_path / "proj"
    assert series_key(series) == "patches/llamafile"
    assert registry_path(series) == tmp_path / "proj" / "docs" / "UPSTREAM_SYNC.md"
    loose = tmp_path / "x" / "s"
    loose.mkdir(parents=True)
    assert project_root(loose) == tmp_path / "x" and series_key(loose) == "s"


def test_a_symlinked_series_counts_where_it_really_is(tmp_path: Path) -> None:
    real = tmp_path / "proj" / "patches" / "a"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    assert project_root(tmp_path / "link") == tmp_path / "proj"


def test_check_inside_follows_directory_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "docs").mkdir(parents=True)
    check_inside(root / "docs" / "x.md", root)
    (root / "out").symlink_to(tmp_path)
    with pytest.raises(DirtyTree, match="outside the project root"):
        check_inside(root / "out" / "x.md", root)
