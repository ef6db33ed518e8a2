"""archive.py: safe extraction; a hostile member means nothing is written."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.archives import Special, make_tar
from support.files import Entry, Exe, Link

from patchctl.errors import NotFound, ToolchainMissing, UnsafeArchive
from patchctl.progress import RecordingProgress
from patchctl.upstream import archive as archive_module
from patchctl.upstream import casefold, fdwrite
from patchctl.upstream.archive import extract_archive, is_git_dir_name
from patchctl.upstream.casefold import name_folding, same_name

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
    # one pass: the member count is not known up front; each member read advances
    assert progress.events[0] == ("start", "extract", None)
    assert sum(e[2] or 0 for e in progress.events if e[0] == "advance") == 6
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
    # a regular file named `a/`: GNU tar makes a directory and fails (exit 2)
    "file-named-as-a-directory": ({"f": b"x", "a/": b"data"}, "pkg", "its name ends in '/'"),
    "link-named-as-a-directory": ({"f": b"x", "l/": Link("f")}, "pkg", "its name ends in '/'"),
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


# ----------------------------------------------------------------------------- one pass


def _many(count: int, size: int) -> dict[str, Entry | Special]:
    """`count` files of `size` random bytes (incompressible: the archive is as big as they)."""
    return {f"d{i % 7}/f{i}.bin": os.urandom(size) for i in range(count)}


def _tar_xz(path: Path, files: dict[str, Entry | Special]) -> Path:
    """`files` under pkg-1.0/, as a .tar.xz (make_tar writes gzip)."""
    plain = make_tar(path.with_name("plain.tar.gz"), files)
    with tarfile.open(plain) as src, tarfile.open(path, "w:xz") as dst:
        for info in src.getmembers():
            dst.addfile(info, src.extractfile(info) if info.isreg() else None)
    return path


class _Counting:
    """The archive file, counting the bytes read from it and the seeks back."""

    def __init__(self, path: Path, counts: dict[str, int]) -> None:
        self._file = path.open("rb")
        self._counts = counts

    def read(self, size: int = -1) -> bytes:
        data = self._file.read(size)
        self._counts["bytes"] += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        before = self._file.tell()
        after = self._file.seek(offset, whence)
        if after < before:
            self._counts["rewinds_from"] = max(self._counts["rewinds_from"], before)
        return after

    def __getattr__(self, name: str) -> object:
        return getattr(self._file, name)

    def __enter__(self) -> _Counting:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


@pytest.mark.parametrize("fmt", ["tar.xz", "tar.gz"])
def test_the_archive_is_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    files = _many(40, 16 << 10)
    files["d0/hard"] = Special(tarfile.LNKTYPE, "pkg-1.0/d1/f1.bin")  # copied from the first
    name = tmp_path / f"pkg-1.0.{fmt}"
    archive = _tar_xz(name, files) if fmt == "tar.xz" else make_tar(name, files)
    size = archive.stat().st_size
    counts = {"bytes": 0, "rewinds_from": 0}
    monkeypatch.setattr(
        "patchctl.upstream.archive_formats.open_archive", lambda path: _Counting(path, counts)
    )
    result = extract_archive(archive, tmp_path / "out")
    assert result.files == 41
    assert (tmp_path / "out" / "d0" / "hard").read_bytes() == files["d1/f1.bin"]
    # 640 KiB of random data: a second decompression would read it all again. tarfile's
    # format probing reads a few blocks from the start and seeks back; nothing later is
    assert counts["bytes"] < size + (64 << 10), (counts, size)
    assert counts["rewinds_from"] < 64 << 10, (counts, size)


LATE: dict[str, tuple[dict[str, Entry | Special], str]] = {
    # found at the end of the archive, after every file was written
    "symlink-escape": ({"x": Link("../../victim")}, "links outside the tree"),
    "hardlink-to-missing": ({"h": Special(tarfile.LNKTYPE, "pkg-1.0/nope")}, "not a regular"),
    # found at its own header, after the files before it were written
    "device": ({"dev": Special(tarfile.CHRTYPE)}, "device"),
    "dotdot": ({"../../victim": b"pwned\n"}, "contains '..'"),
    "under-a-file": ({"d0/f0.bin/x": b"pwned\n"}, "lies under"),
}


@pytest.mark.parametrize("case", sorted(LATE))
def test_a_hostile_member_late_in_the_archive_leaves_nothing(tmp_path: Path, case: str) -> None:
    late, why = LATE[case]
    archive = make_tar(tmp_path / "pkg-1.0.tar.gz", {**_many(200, 64), **late})
    room = tmp_path / "room" / "dest"
    (room / ".git").mkdir(parents=True)  # as in a clean room: kept, everything else removed
    (room / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(UnsafeArchive, match=why):
        extract_archive(archive, room)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert not (tmp_path / "victim").exists() and not (tmp_path / "room" / "victim").exists()


class _Recording:
    """A Sink that checks each path it is told of is complete on disk when told."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.paths: list[str] = []
        self.flushed = False

    def start(self, root: Path) -> None:
        self.root = root

    def add(self, path: str) -> None:
        assert self.root is not None and not self.flushed
        assert (self.root / path).is_symlink() or (self.root / path).is_file()
        self.paths.append(path)

    def flush(self) -> None:
        self.flushed = True


def _tree(dest: Path) -> list[str]:
    return sorted(
        str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_symlink() or p.is_file()
    )


def test_the_sink_is_told_every_file_by_its_final_name(tmp_path: Path) -> None:
    files: dict[str, Entry | Special] = {
        **SAFE,
        "hard": Special(tarfile.LNKTYPE, "pkg-1.0/README"),
    }
    sink = _Recording()
    dest = tmp_path / "out"
    result = extract_archive(make_tar(tmp_path / "p.tar.gz", files), dest, sink=sink)
    assert result.sunk and sink.flushed
    assert sorted(sink.paths) == _tree(dest) == [
        "README", "bin/run.sh", "docs/link", "hard", "vendor/lib/a.c", "vendor/lib/sub/b.c"
    ]  # fmt: skip


def test_a_wrong_guess_of_the_top_is_reported_not_sunk(tmp_path: Path) -> None:
    # the first member names a top directory, a later one is outside it: no top is stripped
    files: dict[str, Entry | Special] = {"pkg-1.0/a": b"a", "pkg-1.0/b": b"b", "other": b"o"}
    sink = _Recording()
    dest = tmp_path / "out"
    result = extract_archive(make_tar(tmp_path / "p.tar.gz", files, top=None), dest, sink=sink)
    assert not result.sunk and sink.flushed  # flushed all the same: the sink is done reading
    assert _tree(dest) == ["other", "pkg-1.0/a", "pkg-1.0/b"]


def test_a_subdir_is_never_sunk(tmp_path: Path) -> None:
    sink = _Recording()
    dest = tmp_path / "out"
    archive = make_tar(tmp_path / "p.tar.gz", SAFE)
    result = extract_archive(archive, dest, subdir="vendor/lib", sink=sink)
    assert not result.sunk and sink.root is None
    assert _tree(dest) == ["a.c", "sub/b.c"]


@pytest.mark.parametrize(
    ("part", "git"),
    [
        (".git", True),
        (".GiT", True),
        (".git.", True),
        (".git . .", True),
        ("git~1", True),
        ("GIT~1.", True),
        (".git::$INDEX_ALLOCATION", True),
        (".g\u200cit", True),
        ("\ufeff.git", True),
        (".gitignore", False),
        (".github", False),
        ("git~2", False),
        ("x.git", False),
        (".git-x", False),
    ],
)
def test_is_git_dir_name_follows_gits_ntfs_and_hfs_rules(part: str, git: bool) -> None:
    assert is_git_dir_name(part) is git


def fold_os(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put archive.py, its case-folding probes (casefold.py) and its descriptor-relative
    writing (fdwrite.py) on a FoldingOs."""
    folding = FoldingOs()
    monkeypatch.setattr(archive_module, "os", folding)
    monkeypatch.setattr(casefold, "os", folding)
    monkeypatch.setattr(fdwrite, "os", folding)


class FoldingOs:
    """The os module as archive.py and casefold.py see it, on a simulated case-insensitive
    file system (as macOS and Windows have by default): a name relative to a directory
    descriptor is stored and looked up in lower case, so `A.c` and `a.c` are one file."""

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    @staticmethod
    def _fold(path: str | os.PathLike[str]) -> str:
        name = os.fspath(path)
        return name if name.startswith("/") else name.lower()

    def open(
        self,
        path: str | os.PathLike[str],
        flags: int,
        mode: int = 0o777,
        *,
        dir_fd: int | None = None,
    ) -> int:
        return os.open(self._fold(path), flags, mode, dir_fd=dir_fd)

    def mkdir(self, path: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        os.mkdir(self._fold(path), mode, dir_fd=dir_fd)

    def symlink(self, src: str, dst: str, *, dir_fd: int | None = None) -> None:
        os.symlink(src, self._fold(dst), dir_fd=dir_fd)

    def stat(
        self, path: str, *, dir_fd: int | None = None, follow_symlinks: bool = True
    ) -> os.stat_result:
        return os.stat(self._fold(path), dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    def unlink(self, path: str, *, dir_fd: int | None = None) -> None:
        os.unlink(self._fold(path), dir_fd=dir_fd)


COLLIDING: dict[str, tuple[dict[str, Entry | Special], str, str]] = {
    "files": ({"src/A.c": b"int A;\n", "src/a.c": b"int a;\n"}, "src/A.c", "src/a.c"),
    "top-level": ({"Makefile": b"all:\n", "makefile": b"x:\n"}, "Makefile", "makefile"),
    "directories": ({"SRC/x.c": b"int x;\n", "src/y.c": b"int y;\n"}, "SRC", "src"),
    "a link": ({"README": b"r\n", "readme": Link("README")}, "README", "readme"),
}


@pytest.mark.parametrize("case", sorted(COLLIDING))
def test_names_one_file_on_a_case_insensitive_file_system_are_refused_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """On a file system that ignores case, two members it takes for one would overwrite each
    other (a generic 'File exists' error) or merge two directories silently: refused (exit 7)
    naming the archive, both members and the fix, and nothing is left."""
    files, first, second = COLLIDING[case]
    archive = make_tar(tmp_path / "pkg-1.0.tar.gz", files)
    fold_os(monkeypatch)
    dest = tmp_path / "out"
    with pytest.raises(UnsafeArchive) as info:
        extract_archive(archive, dest)
    message = str(info.value)
    assert info.value.exit_code == 7
    first, second = f"pkg-1.0/{first}", f"pkg-1.0/{second}"  # as the archive names them
    assert message.startswith(f"pkg-1.0.tar.gz: members {first!r} and {second!r} name one file")
    assert "ignores case" in message and "nothing was extracted" in message
    assert info.value.hint is not None and "case-sensitive file system" in info.value.hint
    assert "--workdir" in info.value.hint
    assert not dest.exists()


@contextmanager
def dir_fd(path: Path) -> Iterator[int]:
    """A descriptor of directory `path`, closed at the end."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


def ignores_case(directory: Path) -> bool:
    """Whether `directory`'s file system finds a file `X` as `x` (a file made there, removed)."""
    (directory / "X").write_bytes(b"")
    try:
        return (directory / "x").exists()
    finally:
        (directory / "X").unlink()


def test_names_differing_only_in_case_extract_exactly_where_the_file_system_tells_them_apart(
    tmp_path: Path,
) -> None:
    with dir_fd(tmp_path) as fd:
        folding = name_folding(fd)
    if folding is not None:
        pytest.skip("the test directory's file system ignores case")
    files: dict[str, Entry | Special] = {
        "src/A.c": b"int A;\n",
        "src/a.c": b"int a;\r\n",
        "Makefile": b"all:\n",
        "makefile": Exe(b"x:\n"),
        "SRC/x.c": b"int x;\n",
    }
    archive = make_tar(tmp_path / "pkg-1.0.tar.gz", files)
    dest = tmp_path / "out"
    assert extract_archive(archive, dest).files == 5
    for name, entry in files.items():
        data = entry.data if isinstance(entry, Exe) else entry
        assert (dest / name).read_bytes() == data
    assert os.access(dest / "makefile", os.X_OK) and not os.access(dest / "Makefile", os.X_OK)


def test_name_folding_probes_the_file_system_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folds_case = ignores_case(tmp_path)
    with dir_fd(tmp_path) as fd:
        found = name_folding(fd)
        if folds_case:
            assert found is not None and found("A") == found("a")
        else:
            assert found is None or found("A") != found("a")
        assert list(tmp_path.iterdir()) == []
        fold_os(monkeypatch)
        fold = name_folding(fd)
        assert fold is not None and fold("src/A.c") == fold("SRC/a.c") != fold("src/b.c")
        assert list(tmp_path.iterdir()) == []


def test_names_that_only_casefold_alike_are_asked_of_the_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`str.casefold` takes "Straße" for "Strasse"; a file system that ignores case keeps
    them apart (here: one that compares lower case). Such a pair, and names alike only in
    directories that differ there, extract; a pair it does take for one is still refused."""
    fold_os(monkeypatch)
    files: dict[str, Entry | Special] = {
        "Straße.txt": b"sz\n",
        "Strasse.txt": b"ss\n",
        "Straße/A.c": b"int A;\n",
        "Strasse/a.c": b"int a;\n",
    }
    dest = tmp_path / "out"
    assert extract_archive(make_tar(tmp_path / "pkg-1.0.tar.gz", files), dest).files == 4
    for name, data in files.items():
        assert (dest / name.lower()).read_bytes() == data  # this file system stores lower case
    folded = {**files, "Straße/a.c": b"x\n"}
    with pytest.raises(UnsafeArchive) as info:
        extract_archive(make_tar(tmp_path / "pkg-1.1.tar.gz", folded), tmp_path / "out2")
    assert "'pkg-1.0/Straße/A.c' and 'pkg-1.0/Straße/a.c'" in str(info.value)


def test_same_name_probes_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folds_case = ignores_case(tmp_path)
    with dir_fd(tmp_path) as fd:
        assert same_name(fd, "A", "a") == folds_case
        assert same_name(fd, "A", "A") and not same_name(fd, "A", "B")
        fold_os(monkeypatch)
        assert same_name(fd, "A", "a") and not same_name(fd, "Straße", "Strasse")
    assert list(tmp_path.iterdir()) == []


Member = tuple[str, bytes | Link, int]


def _tar_of(path: Path, members: list[Member]) -> Path:
    """A .tar.gz of (name, bytes or link, mode) members in order, names repeated as given."""
    with tarfile.open(path, "w:gz") as tar:
        for name, entry, mode in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if isinstance(entry, Link):
                info.type, info.linkname = tarfile.SYMTYPE, entry.target
                tar.addfile(info)
            else:
                info.size = len(entry)
                tar.addfile(info, io.BytesIO(entry))
    return path


def test_a_member_repeated_identically_is_taken_once(tmp_path: Path) -> None:
    members: list[Member] = [
        ("pkg/a.c", b"int a;\n", 0o644),
        ("pkg/run", b"#!/bin/sh\n", 0o755),
        ("pkg/l", Link("a.c"), 0o777),
        ("pkg/a.c", b"int a;\n", 0o644),
        ("pkg/run", b"#!/bin/sh\n", 0o755),
        ("pkg/l", Link("a.c"), 0o777),
    ]
    dest = tmp_path / "out"
    result = extract_archive(_tar_of(tmp_path / "dup.tar.gz", members), dest)
    assert result.files == 3 and (dest / "a.c").read_bytes() == b"int a;\n"
    assert os.access(dest / "run", os.X_OK) and os.readlink(dest / "l") == "a.c"


@pytest.mark.parametrize(
    "second",
    [
        ("pkg/a.c", b"int b;\n", 0o644),  # same size, other bytes
        ("pkg/a.c", b"int a; \n", 0o644),  # other size
        ("pkg/a.c", b"int a;\n", 0o755),  # other mode
        ("pkg/a.c", Link("x"), 0o777),  # other type
    ],
)
def test_a_member_repeated_with_a_difference_is_refused(
    tmp_path: Path, second: Member
) -> None:
    members: list[Member] = [("pkg/a.c", b"int a;\n", 0o644), ("pkg/b.c", b"b\n", 0o644), second]
    dest = tmp_path / "out"
    refused = r"member 'pkg/a\.c' (appears twice|changes type)"
    with pytest.raises(UnsafeArchive, match=refused) as info:
        extract_archive(_tar_of(tmp_path / "dup.tar.gz", members), dest)
    assert info.value.exit_code == 7
    assert not dest.exists()
    links: list[Member] = [("pkg/l", Link("a"), 0o777), ("pkg/l", Link("b"), 0o777)]
    with pytest.raises(UnsafeArchive, match="differing"):
        extract_archive(_tar_of(tmp_path / "links.tar.gz", links), dest)
