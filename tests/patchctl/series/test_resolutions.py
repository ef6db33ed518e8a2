"""series/resolutions.py: conflict blocks, what a resolved file teaches, replay, and the
record files (deterministic, byte-exact, hash-checked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchctl.errors import ResolutionInvalid
from patchctl.series import resolutions
from patchctl.series.resolutions import Record, blocks, learn, lines_of, parse_record, replay

MERGED = (
    b"head\n"
    b"<<<<<<< onto-2\n"
    b"new upstream\n"
    b"||||||| base\n"
    b"old upstream\n"
    b"=======\n"
    b"patched\n"
    b">>>>>>> 0001-a\n"
    b"middle\n"
    b"<<<<<<< onto-2\n"
    b"x = 2;\n"
    b"||||||| base\n"
    b"x = 1;\n"
    b"=======\n"
    b"x = 1; // patched\n"
    b">>>>>>> 0001-a\n"
    b"tail\n"
)
RESOLVED = b"head\nnew upstream, patched\nand a second line\nmiddle\nx = 2; // patched\ntail\n"


def test_blocks_are_what_git_writes_and_lone_markers_are_text() -> None:
    found = blocks(lines_of(MERGED))
    assert [(b.ours, b.base, b.theirs, b.start, b.end) for b in found] == [
        (b"new upstream\n", b"old upstream\n", b"patched\n", 1, 8),
        (b"x = 2;\n", b"x = 1;\n", b"x = 1; // patched\n", 9, 16),
    ]
    two_way = b"<<<<<<< a\nA\n=======\nB\n>>>>>>> b\n"
    assert [(b.ours, b.base, b.theirs) for b in blocks(lines_of(two_way))] == [
        (b"A\n", None, b"B\n")
    ]
    for broken in (
        b"<<<<<<< a\nA\n=======\nB\n",
        b"=======\n>>>>>>> b\n",
        b"<<<<<<< a\n<<<<<<< b\n",
    ):
        assert blocks(lines_of(broken)) == []
    assert blocks(lines_of(b"<<<<<<<<< eight\n")) == []


def test_learn_splits_the_resolution_per_block_and_replay_puts_it_back() -> None:
    learned = learn("0001-a", "src/a.c", MERGED, RESOLVED)
    assert learned.unclear == 0 and not learned.outside_edits
    assert [r.resolved for r in learned.records] == [
        b"new upstream, patched\nand a second line\n",
        b"x = 2; // patched\n",
    ]
    again = replay("0001-a", "src/a.c", MERGED, learned.records)
    assert again.text == RESOLVED and again.left == 0 and len(again.used) == 2
    # another patch, another path, or a block whose base differs: not the same conflict
    assert replay("0002-b", "src/a.c", MERGED, learned.records).left == 2
    assert replay("0001-a", "src/b.c", MERGED, learned.records).left == 2
    other = MERGED.replace(b"old upstream\n", b"older upstream\n")
    partly = replay("0001-a", "src/a.c", other, learned.records)
    assert partly.left == 1 and len(partly.used) == 1
    assert b"x = 2; // patched\n" in partly.text and b"<<<<<<< onto-2\nnew upstream" in partly.text


def test_the_labels_of_the_marker_lines_are_not_part_of_the_key() -> None:
    learned = learn("0001-a", "src/a.c", MERGED, RESOLVED)
    relabelled = MERGED.replace(b"onto-2", b"patchctl/merge/onto-9").replace(b"0001-a\n", b"x\n")
    assert replay("0001-a", "src/a.c", relabelled, learned.records).text == RESOLVED


def test_an_edit_outside_the_blocks_goes_with_the_nearest_block() -> None:
    merged, resolved = MERGED + b"end\n", RESOLVED + b"end, edited\n"
    learned = learn("0001-a", "src/a.c", merged, resolved)
    assert not learned.outside_edits and learned.unclear == 0
    first, second = learned.records
    assert (first.before, first.after) == (b"", b"")
    assert (second.before, second.after) == (b"", b"tail\nend\n")  # the edited line too
    assert second.resolved == b"x = 2; // patched\ntail\nend, edited\n"
    assert replay("0001-a", "src/a.c", merged, learned.records).text == resolved
    # the lines the record covers around its block differ: that block is left as it is
    other = merged.replace(b"tail\n", b"tail, changed upstream\n")
    again = replay("0001-a", "src/a.c", other, learned.records)
    assert (
        again.left == 1 and len(again.used) == 1 and b">>>>>>> 0001-a\ntail, changed" in again.text
    )
    # an edit between two blocks whose stretches meet cannot be told apart
    touching = RESOLVED.replace(b"middle\n", b"middle, edited\n")
    learned = learn("0001-a", "src/a.c", MERGED, touching)
    assert learned.unclear == 2 and learned.records == () and learned.outside_edits


def test_a_block_at_the_start_or_end_of_the_file() -> None:
    merged = b"<<<<<<< a\nA\n||||||| b\nB\n=======\nC\n>>>>>>> c\n"
    learned = learn("0001-a", "f", merged, b"AC\n")
    assert [r.resolved for r in learned.records] == [b"AC\n"]
    assert replay("0001-a", "f", merged, learned.records).text == b"AC\n"


@pytest.mark.parametrize(
    "resolved",
    [
        b"plain\ntext\n",
        b"no final newline",
        b"  leading spaces\n\n\n",
        b"trailing spaces   \n\ttab\n",
        b"crlf\r\nlines\r\n",
        b"\xff\xfe not utf-8\n",
        "unicode \u2028 line separator \x85 and \u00e9\n".encode(),
        b"",
        b"# looks like yaml: {a: 1}\n- item\n",
    ],
)
def test_a_record_reads_back_byte_for_byte(resolved: bytes) -> None:
    record = Record(
        "0001-a",
        "src/dir/a b.c",
        b"ours\n",
        b"base\n",
        b"theirs\r\n",
        resolved,
        True,
        resolved,
        b"a\n",
    )
    raw = record.dump()
    assert parse_record(raw, record.name) == record
    assert record.dump() == raw  # deterministic
    assert raw.decode("utf-8").splitlines()[0].startswith("after:")  # sorted keys
    assert record.name.startswith("a_b.c-") and record.name.endswith(".yaml")


def test_a_readable_record_is_a_literal_block() -> None:
    record = Record("0001-a", "a.c", b"x\n", b"y\n", b"z\n", b"line one\nline two\n")
    assert "resolved: |\n  line one\n  line two\n" in record.dump().decode()


def test_a_record_edited_by_hand_is_refused() -> None:
    record = Record("0001-a", "a.c", b"x\n", b"y\n", b"z\n", b"resolved\n")
    raw = record.dump()
    with pytest.raises(ValueError, match="resolved does not hash"):
        parse_record(raw.replace(b"  resolved\n", b"  resolvee\n"), record.name)
    with pytest.raises(ValueError, match="keys"):
        parse_record(raw + b"extra: 1\n", record.name)
    with pytest.raises(ValueError, match="not a relative path"):
        parse_record(raw.replace(b"file: a.c", b"file: ../a.c"), record.name)
    with pytest.raises(ValueError, match="not YAML"):
        parse_record(b"{", record.name)


def store_with(tmp_path: Path, *records: Record) -> Path:
    for record in records:
        path = tmp_path / record.relpath()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(record.dump())
    return tmp_path


def test_check_store_names_each_stale_orphan_or_damaged_file_and_its_fix(tmp_path: Path) -> None:
    good = Record("0001-a", "src/a.c", b"x\n", b"y\n", b"z\n", b"r\n")
    stale = Record("0001-a", "src/gone.c", b"x\n", b"y\n", b"z\n", b"r\n")
    orphan = Record("0009-old", "src/a.c", b"x\n", b"y\n", b"z\n", b"r\n")
    series_dir = store_with(tmp_path, good, stale, orphan)
    touched = {"0001-a": ["src/a.c"]}
    problems = resolutions.check_store(series_dir, touched)
    assert len(problems) == 2
    assert "0009-old: no patch 0009-old in the series" in problems[1]
    assert f"{stale.name}: patch 0001-a no longer changes src/gone.c" in problems[0]
    assert "git rm" in problems[0] and "git rm -r" in problems[1]
    (series_dir / stale.relpath()).unlink()
    (series_dir / orphan.relpath()).unlink()
    (series_dir / "resolutions" / "0009-old").rmdir()
    assert resolutions.check_store(series_dir, touched) == []
    path = series_dir / good.relpath()
    path.write_bytes(path.read_bytes().replace(b"  r\n", b"  R\n"))
    [problem] = resolutions.check_store(series_dir, touched)
    assert str(path) in problem and "does not hash" in problem and "restore it" in problem
    with pytest.raises(ResolutionInvalid, match="does not hash"):
        resolutions.load_patch_records(series_dir, "0001-a")
    path.rename(path.with_name("renamed-0123456789ab.yaml"))
    path.with_name("renamed-0123456789ab.yaml").write_bytes(good.dump())
    [problem] = resolutions.check_store(series_dir, touched)
    assert "its key gives the name" in problem


def test_the_same_block_twice_in_a_file_is_one_record_unless_resolved_two_ways() -> None:
    block = b"<<<<<<< a\nA\n||||||| b\nB\n=======\nC\n>>>>>>> c\n"
    merged = block + b"one\n" + block
    learned = learn("0001-a", "f", merged, b"AC\none\nAC\n")
    assert len(learned.records) == 1 and learned.unclear == 0
    assert replay("0001-a", "f", merged, learned.records).text == b"AC\none\nAC\n"
    learned = learn("0001-a", "f", merged, b"AC\none\nCA\n")
    assert learned.records == () and learned.unclear == 2
