"""archive.py: safe extraction; a hostile member means nothing is written."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from support.archives import Special, make_tar
from support.files import Entry, Exe, Link

from patchctl.archive import extract_archive
from patchctl.errors import NotFound, ToolchainMissing, UnsafeArchive
from patchctl.progress import RecordingProgress

SAFE: dict[str, Entry | Special] = {
    "README": b"hello\n",
    "bin/run.sh": Exe(b"#!/bin/sh\n"),
    "docs/link": Link("../README"),
    "vendor/lib/.git": b"gitdir: ../../.git/modules/lib\n",
    "vendor/lib/a.c": b"int a;\n",
    "vendor/lib/sub/b.c": b"int b;\n",
}


def test_extracts_with_top_level_stripped_modes_and_links(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "pkg-1.0.tar.gz", SAFE)
    dest = tmp_path / "out"
    progress = RecordingProgress()
    result = extract_archive(archive, dest, progress=progress)
    assert (dest / "README").read_bytes() == b"hello\n"
    assert os.access(dest / "bin" / "run.sh", os.X_OK)
    assert not os.access(dest / "README", os.X_OK)
    assert os.readlink(dest / "docs" / "link") == "../README"
    assert result.dropped == ("vendor/lib/.git",)
    assert not (dest / "vendor" / "lib" / ".git").exists()
    assert progress.events[0] == ("start", "extract", 5)
    assert progress.events[-1] == ("done", "extract", None)


def test_subdir_selects_part_of_the_archive_and_drops_gitlink(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "pkg-1.0.tar.gz", SAFE)
    dest = tmp_path / "out"
    result = extract_archive(archive, dest, subdir="vendor/lib")
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == ["a.c", "sub", "sub/b.c"]
    assert result.dropped == (".git",)


def test_missing_subdir_is_not_found(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "pkg-1.0.tar.gz", SAFE)
    with pytest.raises(NotFound):
        extract_archive(archive, tmp_path / "out", subdir="nope")
    assert not (tmp_path / "out").exists()


def test_hard_link_inside_the_tree_becomes_a_copy(tmp_path: Path) -> None:
    files: dict[str, Entry | Special] = {
        "a.txt": b"data\n",
        "b.txt": Special(tarfile.LNKTYPE, "pkg-1.0/a.txt"),
    }
    dest = tmp_path / "out"
    extract_archive(make_tar(tmp_path / "p.tar.gz", files), dest)
    assert (dest / "b.txt").read_bytes() == b"data\n"


HOSTILE_TAR: dict[str, tuple[dict[str, Entry | Special], str | None, str]] = {
    "dotdot": ({"../evil": b"x"}, None, "contains '..'"),
    "nested-dotdot": ({"ok/../../evil": b"x"}, "pkg", "contains '..'"),
    "absolute": ({"/tmp/evil": b"x"}, None, "absolute path"),
    "symlink-escape": ({"f": b"x", "link": Link("../../etc/passwd")}, "pkg", "links outside"),
    "symlink-absolute": ({"f": b"x", "link": Link("/etc/passwd")}, "pkg", "absolute path"),
    "hardlink-escape": (
        {"f": b"x", "hl": Special(tarfile.LNKTYPE, "../outside")},
        None,
        "contains '..'",
    ),
    "char-device": ({"f": b"x", "dev": Special(tarfile.CHRTYPE)}, "pkg", "device"),
    "block-device": ({"f": b"x", "dev": Special(tarfile.BLKTYPE)}, "pkg", "device"),
    "fifo": ({"f": b"x", "pipe": Special(tarfile.FIFOTYPE)}, "pkg", "fifo"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TAR))
def test_hostile_tar_is_refused_and_nothing_is_written(tmp_path: Path, case: str) -> None:
    files, top, why = HOSTILE_TAR[case]
    archive = make_tar(tmp_path / "evil.tar.gz", files, top=top)
    dest = tmp_path / "sandbox" / "out"
    with pytest.raises(UnsafeArchive) as info:
        extract_archive(archive, dest)
    assert info.value.exit_code == 7
    assert why in str(info.value) and "nothing was extracted" in str(info.value)
    assert "\n" not in info.value.one_line()
    assert not dest.exists()
    assert not (tmp_path / "evil").exists() and not Path("/tmp/evil").exists()


def _zip(path: Path, members: dict[str, tuple[bytes, int]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, mode) in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


def test_zip_extracts_files_exec_bits_and_links(tmp_path: Path) -> None:
    archive = _zip(
        tmp_path / "p.zip",
        {
            "p/a.txt": (b"a\r\n", 0o100644),
            "p/run": (b"#!/bin/sh\n", 0o100755),
            "p/ln": (b"a.txt", 0o120777),
        },
    )
    dest = tmp_path / "out"
    extract_archive(archive, dest)
    assert (dest / "a.txt").read_bytes() == b"a\r\n"
    assert os.access(dest / "run", os.X_OK)
    assert os.readlink(dest / "ln") == "a.txt"


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ({"../evil": (b"x", 0o100644)}, "contains '..'"),
        ({"/abs": (b"x", 0o100644)}, "absolute path"),
        ({"p/f": (b"x", 0o100644), "p/ln": (b"../../x", 0o120777)}, "links outside"),
        ({"p/f": (b"x", 0o100644), "p/fifo": (b"", 0o010644)}, "fifo"),
    ],
)
def test_hostile_zip_is_refused(
    tmp_path: Path, members: dict[str, tuple[bytes, int]], why: str
) -> None:
    dest = tmp_path / "out"
    with pytest.raises(UnsafeArchive) as info:
        extract_archive(_zip(tmp_path / "evil.zip", members), dest)
    assert why in str(info.value)
    assert not dest.exists()


def test_not_an_archive_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "x.tar.gz"
    bogus.write_bytes(b"not a tarball")
    with pytest.raises(UnsafeArchive):
        extract_archive(bogus, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- .tar.zst

needs_zstd = pytest.mark.skipif(shutil.which("zstd") is None, reason="no zstd command here")


def make_tar_zst(path: Path, files: dict[str, Entry | Special]) -> Path:
    """A .tar.zst of `files` (a plain tar compressed by the zstd command)."""
    plain = make_tar(path.with_name("plain.tar.gz"), files)
    tar = path.with_name("plain.tar")
    with tarfile.open(plain) as src, tarfile.open(tar, "w") as dst:
        for info in src.getmembers():
            dst.addfile(info, src.extractfile(info) if info.isreg() else None)
    subprocess.run(["zstd", "-q", "-f", "-o", str(path), "--", str(tar)], check=True)
    return path


@needs_zstd
def test_tar_zst_extracts_like_a_tar_gz(tmp_path: Path) -> None:
    archive = make_tar_zst(tmp_path / "pkg-1.0.tar.zst", SAFE)
    dest = tmp_path / "out"
    result = extract_archive(archive, dest)
    assert (dest / "README").read_bytes() == b"hello\n"
    assert os.access(dest / "bin" / "run.sh", os.X_OK)
    assert os.readlink(dest / "docs" / "link") == "../README"
    assert result.dropped == ("vendor/lib/.git",)


@needs_zstd
def test_tar_zst_hostile_members_are_refused_like_any_tar(tmp_path: Path) -> None:
    archive = make_tar_zst(tmp_path / "pkg-1.0.tar.zst", {"../evil": b"x\n"})
    with pytest.raises(UnsafeArchive):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "evil").exists() and not (tmp_path / "out").exists()


@needs_zstd
def test_tar_zst_damage_is_corrupt_with_zstds_message(tmp_path: Path) -> None:
    archive = make_tar_zst(tmp_path / "pkg-1.0.tar.zst", SAFE)
    archive.write_bytes(archive.read_bytes()[:-12])
    with pytest.raises(UnsafeArchive, match="corrupt or truncated") as caught:
        extract_archive(archive, tmp_path / "out")
    assert caught.value.exit_code == 7
    assert not (tmp_path / "out").exists()


@needs_zstd
def test_tar_zst_bomb_stops_while_it_is_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = make_tar_zst(tmp_path / "pkg-1.0.tar.zst", {"zeros": b"\0" * (3 << 20)})
    monkeypatch.setenv("PATCHCTL_MAX_ARCHIVE_BYTES", str(1 << 20))
    with pytest.raises(UnsafeArchive, match="PATCHCTL_MAX_ARCHIVE_BYTES"):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_tar_zst_without_the_zstd_command_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "pkg-1.0.tar.zst"
    archive.write_bytes(b"(\xb5/\xfd")  # never read: the command is looked for first
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(ToolchainMissing, match="needs the zstd command") as caught:
        extract_archive(archive, tmp_path / "out")
    assert caught.value.exit_code == 14
