"""import: quilt series, format-patch directories and mboxes come in byte-for-byte."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from support.repos import new_repo
from support.series import make_series

from patchctl import progress
from patchctl.errors import ConfigError, NotFound, PatchctlError, PatchDoesNotApply
from patchctl.gitlayer.git import Git
from patchctl.ops.import_.record import import_patches
from patchctl.ops.import_.sources import (
    Incoming,
    header_fields,
    make_entry,
    read_source,
    slug,
    split_mbox,
)
from patchctl.ops.verify import verify_series
from patchctl.patchfmt.parse import ambiguous_names, parse
from patchctl.series.model import Patch, Series

BASE = {"main.c": b"int main(void)\n{\n\treturn 0;\n}\n", "README": b"hello\n"}

DEP3 = b"""Description: Return one instead of zero
 A longer explanation that is folded
 onto several lines.
Author: Someone <someone@example.org>
Origin: vendor, https://example.org/fix
Forwarded: not-needed
Last-Update: 2024-01-01

--- a/main.c
+++ b/main.c
@@ -1,4 +1,4 @@
 int main(void)
 {
-\treturn 0;
+\treturn 1;
 }
"""

GBP = b"""From: Someone <someone@example.org>
Date: Sat, 25 Jun 2022 11:54:43 -0700
Subject: =?UTF-8?q?Caf=C3=A9=20readme?=
Gbp-Pq: Name readme.patch

---
 README | 1 +
 1 file changed, 1 insertion(+)

diff --git a/README b/README
index ce013625030ba8dba906f756967f9e9ca394464a..94954abda49de8615a048f8d2e64b5de848e27a1 100644
--- a/README
+++ b/README
@@ -1 +1,2 @@
 hello
+world
"""

FORMAT_PATCH_2 = (
    b"""From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: A <a@example.org>
Date: Thu, 1 Jan 1970 00:00:00 +0000
Subject: [PATCH 2/2] Add a file with CRLF

---
diff --git a/dos.txt b/dos.txt
new file mode 100644
index 0000000000000000000000000000000000000000..9a2e9e2a2a2d5f7b35b0ae1e1e2e4d7a8a2e0f3c
--- /dev/null
+++ b/dos.txt
@@ -0,0 +1,2 @@
+one\r
+two\r
"""
    + b"-- \n2.39.5\n\n"
)


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Git, str]:
    made = new_repo(tmp_path / "room", BASE)
    return made.git, made.tree


def _quilt(tmp_path: Path) -> Path:
    d = tmp_path / "debian" / "patches"
    d.mkdir(parents=True)
    (d / "fix-return.patch").write_bytes(DEP3)
    (d / "readme.patch").write_bytes(GBP)
    (d / "series").write_bytes(b"# comment line\nfix-return.patch\nreadme.patch -p1 # trailing\n")
    return d


def test_quilt_import_keeps_bytes_and_verifies(tmp_path: Path, upstream: tuple[Git, str]) -> None:
    git, base = upstream
    series = make_series(tmp_path / "project" / "patches" / "s", base)
    result = import_patches(series, _quilt(tmp_path), git, base)
    updated, added = result.series, result.added
    assert [p.id for p in added] == ["0001-fix-return", "0002-readme"]
    assert (series.dir / "0001-fix-return.patch").read_bytes() == DEP3
    assert (series.dir / "0002-readme.patch").read_bytes() == GBP
    first, second = added
    assert first.imported and first.title == "Return one instead of zero"
    assert first.origin == "vendor, https://example.org/fix"
    assert first.upstream_status == "Inappropriate [not needed]"
    assert second.title == "Café readme"
    assert second.origin == "quilt:patches/readme.patch"
    assert first.pre_tree == base and second.pre_tree == first.post_tree
    report = verify_series(updated, [git.repo])
    assert report.ok, report.failures()
    reexport = next(s for s in report.patches[0].steps if s.step == "reexport")
    assert "kept verbatim" in reexport.detail


def _import_quilt(tmp_path: Path, upstream: tuple[Git, str]) -> tuple[Series, tuple[Patch, ...]]:
    """The quilt series imported into a fresh series on the upstream base: (series, added)."""
    git, base = upstream
    series = make_series(tmp_path / "project" / "patches" / "s", base)
    result = import_patches(series, _quilt(tmp_path), git, base)
    return result.series, result.added


def test_flipping_an_imported_diff_byte_fails_verify(
    tmp_path: Path, upstream: tuple[Git, str]
) -> None:
    git, _ = upstream
    updated, added = _import_quilt(tmp_path, upstream)
    path = updated.patch_path(added[0])
    path.write_bytes(DEP3.replace(b"+\treturn 1;", b"+\treturn 2;"))
    failures = {s.step for _, s in verify_series(updated, [git.repo]).failures()}
    assert "forward" in failures


def test_flipping_an_imported_header_byte_fails_verify(
    tmp_path: Path, upstream: tuple[Git, str]
) -> None:
    git, _ = upstream
    updated, added = _import_quilt(tmp_path, upstream)
    assert added[0].sha256 is not None and len(added[0].sha256) == 64
    path = updated.patch_path(added[0])
    header_end = DEP3.index(b"---")
    flipped = bytearray(DEP3)
    flipped[header_end // 2] ^= 0x01  # a byte of the DEP-3 header: git apply never reads it
    path.write_bytes(bytes(flipped))
    failures = list(verify_series(updated, [git.repo]).failures())
    assert [(pid, s.step) for pid, s in failures] == [("0001-fix-return", "reexport")]
    assert "imported bytes changed" in failures[0][1].detail


def test_format_patch_dir_and_mbox(tmp_path: Path) -> None:
    directory = tmp_path / "fp"
    directory.mkdir()
    (directory / "0001-readme.patch").write_bytes(GBP)
    (directory / "0002-add-dos.patch").write_bytes(FORMAT_PATCH_2)
    (directory / "notes.txt").write_bytes(b"ignored\n")
    kind, items = read_source(directory)
    assert kind == "format-patch" and [i.name for i in items] == [
        "0001-readme.patch",
        "0002-add-dos.patch",
    ]
    mbox = tmp_path / "series.mbox"
    mbox.write_bytes(FORMAT_PATCH_2 + FORMAT_PATCH_2.replace(b"2/2] Add", b"3/3] Again"))
    kind, items = read_source(mbox)
    assert kind == "mbox" and len(items) == 2
    assert b"".join(i.data for i in items) == mbox.read_bytes()
    assert items[1].name == "Again-a-file-with-CRLF"


def test_mbox_import_applies_crlf(tmp_path: Path, upstream: tuple[Git, str]) -> None:
    git, base = upstream
    series = make_series(tmp_path / "project" / "patches" / "s", base)
    mbox = tmp_path / "one.mbox"
    mbox.write_bytes(FORMAT_PATCH_2)
    result = import_patches(series, mbox, git, base)
    updated, added = result.series, result.added
    assert added[0].id == "0001-Add-a-file-with-CRLF"
    assert git.run("cat-file", "-p", f"{added[0].post_tree}:dos.txt") == b"one\r\ntwo\r\n"
    assert verify_series(updated, [git.repo]).ok


def test_split_mbox_plain_patch_is_one_message() -> None:
    assert [i.data for i in split_mbox(DEP3, "x.patch")] == [DEP3]


def test_conflicting_import_is_patch_does_not_apply(
    tmp_path: Path, upstream: tuple[Git, str]
) -> None:
    git, base = upstream
    series = make_series(tmp_path / "project" / "patches" / "s", base)
    source = tmp_path / "bad.patch"
    source.write_bytes(DEP3.replace(b"-\treturn 0;", b"-\treturn 7;"))
    with pytest.raises(PatchDoesNotApply, match="does not apply") as info:
        import_patches(series, source, git, base)
    assert not any(series.dir.glob("*.patch"))  # nothing written on failure
    # The same diagnosis as `cleanroom apply`: file, hunk and reason (series.gitapply.conflict).
    assert (info.value.file, info.value.hunk) == ("main.c", 1)
    assert info.value.why == "context does not match"


@pytest.mark.parametrize(
    "empty", [b"", b"\n", b"Description: kept for the record, its diff was dropped\n"]
)
def test_a_patch_that_changes_nothing_is_refused_naming_its_file(
    tmp_path: Path, upstream: tuple[Git, str], empty: bytes
) -> None:
    """Debian's procps 2:4.0.2-3 lists a 0-byte `ps_checks` in its series (quilt applies it as
    a no-op): import refuses it (exit 3, as `cleanroom apply` does an empty patch), naming the
    quilt file it came from and what to do, and writes nothing."""
    git, base = upstream
    series = make_series(tmp_path / "project" / "patches" / "s", base)
    quilt = _quilt(tmp_path)
    (quilt / "ps_checks").write_bytes(empty)
    (quilt / "series").write_bytes(b"fix-return.patch\nps_checks\nreadme.patch\n")
    with pytest.raises(PatchDoesNotApply) as info:
        import_patches(series, quilt, git, base)
    error = info.value
    assert error.exit_code == 3 and error.patch == "0002-ps_checks"
    assert f"(ps_checks in {quilt}) to the tree before it" in error.message
    assert error.message.endswith("): the patch file contains no changes"), error.message
    assert error.hint is not None and "remove it from the series" in error.hint
    assert not any(series.dir.glob("*.patch"))


def test_a_hash_inside_a_quilt_patch_name_is_part_of_the_name(tmp_path: Path) -> None:
    """dpkg-source and quilt read `#` as a comment only at a line's start or after whitespace:
    `fix-bug#1.patch` names that file, never `fix-bug` (which may exist, with other bytes)."""
    d = tmp_path / "q"
    d.mkdir()
    (d / "fix-bug#1.patch").write_bytes(DEP3)
    (d / "fix-bug").write_bytes(GBP)
    (d / "readme.patch").write_bytes(GBP)
    (d / "series").write_bytes(
        b"  # a comment\nfix-bug#1.patch\t# why\nreadme.patch -p1 #no space after\n#x.patch\n"
    )
    kind, incoming = read_source(d)
    assert kind == "quilt"
    expected = [("fix-bug#1.patch", DEP3), ("readme.patch", GBP)]
    assert [(i.name, i.data) for i in incoming] == expected


def test_quilt_options_and_missing_files(tmp_path: Path) -> None:
    d = tmp_path / "q"
    d.mkdir()
    (d / "a.patch").write_bytes(DEP3)
    (d / "series").write_bytes(b"a.patch -p0\n")
    with pytest.raises(ConfigError, match=r"line 1: a\.patch: unsupported patch options") as info:
        read_source(d)
    assert info.value.exit_code == 5 and info.value.path == d / "series"
    assert str(info.value).endswith("options -p0")
    assert info.value.hint is not None and "quilt refresh -p ab" in info.value.hint
    (d / "series").write_bytes(b"missing.patch\n")
    with pytest.raises(NotFound, match=r"missing\.patch does not exist"):
        read_source(d)
    (d / "dir.patch").mkdir()
    (d / "series").write_bytes(b"dir.patch\n")
    with pytest.raises(NotFound, match=r"dir\.patch is not a regular file"):
        read_source(d)
    with pytest.raises(NotFound):
        read_source(tmp_path / "nothing-here")


def test_header_fields_and_slug() -> None:
    fields = header_fields(DEP3)
    assert fields["description"].startswith("Return one instead of zero A longer")
    assert fields["forwarded"] == "not-needed"
    assert "diff" not in fields
    assert slug("debian/0003-Fix: a bug (CVE-1)!.patch") == "0003-Fix-a-bug-CVE-1"
    assert slug("////") == "patch"


def test_imported_ids_never_nest_numbers() -> None:
    def pid(name: str, number: int = 121) -> str:
        return make_entry(Incoming(name, DEP3), number, "quilt:series", set()).id

    assert pid("features/all/lockdown/0001-MODSIGN-load-keys.patch") == "0121-MODSIGN-load-keys"
    assert pid("bugfix/all/0017-fix.patch") == "0121-fix"
    assert pid("debian/gitignore.patch") == "0121-gitignore"
    assert pid("0007-top-level.patch", 7) == "0007-top-level"  # a flat series keeps its numbers
    assert pid("0200-ahead.patch") == "0200-ahead"
    assert pid("0001-rt-on-top.patch", 166) == "0166-rt-on-top"  # numbering continues
    assert pid("sub/0002-.patch") == "0121-patch"
    taken = {"0121-fix"}
    again = make_entry(Incoming("other/0003-fix.patch", DEP3), 121, "quilt:series", taken)
    assert again.id != "0121-fix" and again.id.startswith("0121-fix-")


def test_offset_hunks_are_noted(tmp_path: Path, upstream: tuple[Git, str]) -> None:
    git, base = upstream
    series = make_series(tmp_path / "project" / "patches" / "s", base)
    source = tmp_path / "offset.patch"
    source.write_bytes(DEP3.replace(b"@@ -1,4 +1,4 @@", b"@@ -3,4 +3,4 @@"))
    result = import_patches(series, source, git, base)
    assert "offset -2 lines" in result.drift["0001-offset"]
    assert verify_series(result.series, [git.repo]).ok  # tree-exact, offsets only noted


def test_drifted_patches_are_imported_and_flagged_per_hunk(tmp_path: Path) -> None:
    from support.drift import drifted_project

    from patchctl.ops.import_.record import import_series
    from patchctl.series.gitapply import is_fuzz

    series_dir = drifted_project(tmp_path, names=())
    quilt = tmp_path / "debian" / "patches"
    result = import_series(series_dir, quilt)
    assert [p.id for p in result.added] == [
        "0001-readme",
        "0002-louder-a",
        "0003-b-30",
        "0004-c-10",
    ]
    names = ("readme.patch", "louder-a.patch", "b-30.patch", "c-10.patch")
    for patch, name in zip(result.added, names, strict=True):  # every byte kept
        assert (series_dir / patch.file).read_bytes() == (quilt / name).read_bytes()
    assert set(result.hunks) == {"0002-louder-a", "0003-b-30"}
    fuzz = result.hunks["0003-b-30"]
    assert [(d.file, d.hunk, is_fuzz(d)) for d in fuzz] == [("src/b.c", 1, True)]
    assert result.drift["0003-b-30"].startswith("fuzz in 1 hunk(s)")
    assert "hunk #1 in src/b.c" in result.drift["0003-b-30"]
    assert not any(is_fuzz(d) for d in result.hunks["0002-louder-a"])
    assert result.refreshed == ()


def test_import_refresh_rewrites_only_the_diff_of_drifted_patches(tmp_path: Path) -> None:
    from support.drift import DEP3_HEADER, MAIL_HEADER, SIGNATURE, drifted_project, sha256

    from patchctl.ops.cleanroom.apply import cleanroom_apply
    from patchctl.ops.import_.record import import_series
    from patchctl.room.cleanroom import open_cleanroom
    from patchctl.series.model import load_series
    from patchctl.series.parts import split_patch

    series_dir = drifted_project(tmp_path, names=())
    quilt = tmp_path / "debian" / "patches"
    result = import_series(series_dir, quilt, refresh=True)
    assert result.refreshed == ("0002-louder-a", "0003-b-30")
    series = load_series(series_dir)
    kept = {"0001-readme": "readme.patch", "0004-c-10": "c-10.patch"}
    for pid, name in kept.items():
        assert series.patch_path(pid).read_bytes() == (quilt / name).read_bytes()
    louder = split_patch(series.patch_path("0002-louder-a").read_bytes())
    b30 = split_patch(series.patch_path("0003-b-30").read_bytes())
    assert louder.header == DEP3_HEADER and b30.header == MAIL_HEADER and b30.trailer == SIGNATURE
    for patch in series.patches:
        assert patch.sha256 == sha256(series.patch_path(patch).read_bytes())
    cleanroom_apply(series_dir)  # strict: every patch now applies exactly
    assert verify_series(series, [open_cleanroom(series_dir).path]).ok


def test_a_real_conflict_stops_the_import_naming_patch_file_and_hunk(tmp_path: Path) -> None:
    from support.drift import drifted_project, edit, lines

    from patchctl.ops.import_.record import import_series

    series_dir = drifted_project(tmp_path, names=())
    source = tmp_path / "conflict.patch"
    other = lines("x", 60)
    source.write_bytes(
        (tmp_path / "debian" / "patches" / "c-10.patch").read_bytes()
        + diff_text(tmp_path, "src/b.c", other, edit(other, "x line 40", "X"))
    )
    before = sorted(p.name for p in series_dir.iterdir())
    with pytest.raises(PatchDoesNotApply) as info:
        import_series(series_dir, source)
    assert info.value.exit_code == 3
    assert (info.value.patch, info.value.file, info.value.hunk) == ("0001-conflict", "src/b.c", 1)
    assert sorted(p.name for p in series_dir.iterdir()) == before


def diff_text(tmp_path: Path, name: str, before: bytes, after: bytes) -> bytes:
    from support.repos import diff_files

    return diff_files(tmp_path / "difftext", {name: before}, {name: after})


@pytest.mark.parametrize(
    ("header", "status"),
    [
        (b"Upstream-Status: Denied [no]\nOrigin: upstream, x\n", "Denied [no]"),
        (b"Description: d\nOrigin: upstream, https://u/c/1\n", "Backport [https://u/c/1]"),
        (b"Description: d\nOrigin: backport, commit:abc\n", "Backport [commit:abc]"),
        (b"Description: d\nOrigin: upstream\nForwarded: no\n", "Backport"),
        (b"Description: d\nApplied-Upstream: 2.1, commit:ab\n", "Backport [2.1, commit:ab]"),
        (b"Description: d\nOrigin: vendor\nForwarded: no\n", "Pending"),
        (b"Description: d\nOrigin: vendor\nForwarded: not-needed\n", "Inappropriate [not needed]"),
        (b"Description: d\nForwarded: https://u/pr/2\n", "Submitted [https://u/pr/2]"),
        (b"Description: d\nBug: https://u/bug/3\n", "Submitted [https://u/bug/3]"),
        (b"Description: d\nOrigin: other, https://elsewhere\n", "Pending"),
        (b"From: A <a@b>\nSubject: [PATCH] plain mail\n", None),
    ],
)
def test_upstream_status_from_dep3(header: bytes, status: str | None) -> None:
    from patchctl.ops.import_.sources import Incoming, make_entry

    entry = make_entry(
        Incoming("x.patch", header + b"\n" + DEP3[DEP3.index(b"--- a") :]), 1, "t", set()
    )
    assert entry.upstream_status == status


def test_an_import_source_that_cannot_be_read_is_named() -> None:
    """A read error (EIO: /proc/self/mem opens but cannot be read, even by root) names the
    source and the fix (exit 1), rather than a bare operating-system error."""
    source = Path("/proc/self/mem")
    if not source.is_file():
        pytest.skip("no /proc/self/mem here")
    with pytest.raises(PatchctlError) as info:
        read_source(source)
    assert info.value.exit_code == 1
    assert str(info.value).startswith(f"cannot read the patch or mbox {source}: ")


SPACED = "Misc/NEWS.d/next/Core and Builtins/x.rst"
SPACED_DIFF = f"""Description: a plain diff of a path with spaces
--- a/{SPACED}
+++ b/{SPACED}
@@ -1,2 +1,2 @@
 a
-b
+c
""".encode()


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_a_plain_diff_path_with_a_space_is_read_as_git_does_and_the_ambiguity_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {SPACED: b"a\nb\n", "Misc/NEWS.d/next/Core": b"a\nb\n"}
    # GNU patch takes the name up to the first whitespace when no TAB ends it
    tree = tmp_path / "gnu"
    for name, data in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    subprocess.run(
        ["patch", "-p1", "--batch", "--silent"], input=SPACED_DIFF, cwd=tree, check=True
    )
    assert (tree / "Misc/NEWS.d/next/Core").read_bytes() == b"a\nc\n"
    assert (tree / SPACED).read_bytes() == b"a\nb\n"

    made = new_repo(tmp_path / "room", files)
    series = make_series(tmp_path / "project" / "patches" / "s", made.tree)
    quilt = tmp_path / "debian" / "patches"
    quilt.mkdir(parents=True)
    (quilt / "spaced.patch").write_bytes(SPACED_DIFF)
    (quilt / "series").write_bytes(b"spaced.patch\n")
    notes: list[str] = []
    monkeypatch.setattr(progress, "notice_sink", notes.append)
    result = import_patches(series, quilt, made.git, made.tree)
    post = result.added[0].post_tree
    assert made.git.run("cat-file", "blob", f"{post}:{SPACED}") == b"a\nc\n"
    assert made.git.run("cat-file", "blob", f"{post}:Misc/NEWS.d/next/Core") == b"a\nb\n"
    assert len(notes) == 1 and "0001-spaced" in notes[0]
    assert f"reads '{SPACED}'" in notes[0] and "read 'Misc/NEWS.d/next/Core'" in notes[0]

    tabbed = SPACED_DIFF.replace(b".rst\n", b".rst\t2024-01-01 00:00:00\n")
    assert ambiguous_names(tabbed) == [] and parse(tabbed)[0].path == SPACED.encode()
    git_style = SPACED_DIFF.replace(b"--- a/", b"diff --git a/x b/x\n--- a/", 1)
    assert ambiguous_names(git_style) == []


def _import_seconds(tmp_path: Path, header: bytes) -> float:
    """Wall seconds of one import of one patch with `header` before its diff (best of 2)."""
    best = float("inf")
    for attempt in range(2):
        here = tmp_path / f"{len(header)}-{attempt}"
        made = new_repo(here / "room", {"x": b"a\n"})
        series = make_series(here / "project" / "patches" / "s", made.tree)
        quilt = here / "quilt"
        quilt.mkdir()
        (quilt / "p.patch").write_bytes(header + b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
        (quilt / "series").write_bytes(b"p.patch\n")
        start = time.monotonic()
        import_patches(series, quilt, made.git, made.tree)
        best = min(best, time.monotonic() - start)
    return best


@pytest.mark.parametrize(
    ("field", "folded"),
    [(b"Description: x\n", b" a folded line of text\n"), (b"Subject: x\n", b" folded words\n")],
)
def test_import_is_linear_in_the_folded_header_lines(
    tmp_path: Path, field: bytes, folded: bytes
) -> None:
    small = _import_seconds(tmp_path, field + folded * 50_000 + b"\n")
    large = _import_seconds(tmp_path, field + folded * 200_000 + b"\n")
    # 4x the lines: about 4x the time when linear, 16x when quadratic
    assert large / small < 8, (small, large)


@pytest.mark.parametrize(
    "patch",
    [
        b"--- a/README\\0x\n+++ b/README\\0x\n@@ -1 +1 @@\n-hello\n+bye\n".replace(b"\\0", b"\0"),
        b'diff --git "a/README\\000x" "b/README\\000x"\nnew file mode 100644\n'
        b'--- /dev/null\n+++ "b/README\\000x"\n@@ -0,0 +1 @@\n+z\n',
    ],
    ids=["raw", "quoted"],
)
def test_a_path_with_a_nul_byte_is_refused_not_cut_short(
    tmp_path: Path, upstream: tuple[Git, str], patch: bytes
) -> None:
    git, base = upstream
    series = make_series(tmp_path / "project" / "patches" / "s", base)
    quilt = tmp_path / "quilt"
    quilt.mkdir()
    (quilt / "nul.patch").write_bytes(patch)
    (quilt / "series").write_bytes(b"nul.patch\n")
    with pytest.raises(PatchDoesNotApply, match=r"names a path with a NUL byte \('README\\\\0x'\)"):
        import_patches(series, quilt, git, base)  # git apply would patch README itself
    assert not (series.dir / "0001-nul.patch").exists()
