"""Recorded conflict resolutions of a series: `resolutions/<patch id>/<name>.yaml`.

One file per resolved conflict block. A block is what git's three-way merge leaves in a file
(`diff3` style, the merge's base lines between `|||||||` and `=======`):

    <<<<<<< onto-0.3.35
    ours: the new upstream (plus the patches moved before)
    ||||||| base
    base: the old upstream (plus the patches before)
    =======
    theirs: the patch's side
    >>>>>>> 0082-llama-dca

A record is keyed by the patch id, the file's path and the sha256 of the three texts of the
block (ours, base, theirs), and carries the text the block was resolved to. The marker lines'
labels are not part of the key: the same conflict met in another rebase, on another machine
or by another maintainer is the same record. Replaying a record puts its resolved text in
place of the block, byte for byte.

A record also says whether the file needed edits outside its conflict blocks when it was
resolved (`outside_edits`): a replay of such a record puts the block in but leaves the file to
the user, since no record holds those edits.

The file is YAML with sorted keys: each text as a literal block scalar when YAML keeps its
bytes, a double-quoted escaped string otherwise, and `{base64: ...}` when it is not UTF-8;
each text's sha256 beside it. A record is written only when it reads back to the same bytes,
and read only when every text hashes to its recorded sha256. The file's name is derived from
its key (`<file name>-<12 hex>.yaml`), so a record has exactly one place.

Nothing here runs git: the rebase (ops/rebase/replay.py) reads the blobs and writes the trees.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import hashlib
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from patchctl.errors import ResolutionInvalid

FORMAT = 1
DIRECTORY = "resolutions"
TEXTS = ("ours", "base", "theirs", "resolved", "before", "after")
FLAG = "outside_edits"  # the file's resolution also needed edits outside its blocks
KEYS = frozenset(("format", "patch", "file", FLAG, *TEXTS, *(f"{t}_sha256" for t in TEXTS)))
RECORD_BYTES = 4 << 20
# How far (in lines) from a block an edit outside every block may be and still go with the
# block's record (the lines between are then kept in it twice: `before`/`after` and
# `resolved`); a farther edit is left out, and a replay leaves its file to the user.
REACH = 120
# A conflict-marker line as git writes one: seven `<`, `|`, `=` or `>` at the start of the
# line, then whitespace or the end of the line.
MARKER = re.compile(rb"^(<{7}|\|{7}|={7}|>{7})(?:[ \t].*)?\r?\n?\Z", re.DOTALL)
_PATCH_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_NAME = re.compile(r"[A-Za-z0-9._-]+-[0-9a-f]{12}\.yaml")


@dataclass(frozen=True)
class Block:
    """One conflict block of a merged file: its three sides and the lines it spans."""

    ours: bytes
    base: bytes | None  # None: git wrote no base section (a two-way block)
    theirs: bytes
    start: int  # index of its `<<<<<<<` line
    end: int  # index after its `>>>>>>>` line

    def key(self, patch: str, path: str) -> tuple[str, str, str, str, str]:
        """(patch, path, sha256 of ours, of base, of theirs): what a record is found by."""
        return (patch, path, sha256(self.ours), sha256(self.base or b""), sha256(self.theirs))


@dataclass(frozen=True)
class Record:
    """A resolved block: where it was met, its three sides and what it was resolved to."""

    patch: str
    file: str
    ours: bytes
    base: bytes
    theirs: bytes
    resolved: bytes
    outside_edits: bool = False  # the file also needed edits outside its blocks (not here)
    before: bytes = b""  # the merged file's lines just before the block that `resolved` replaces
    after: bytes = b""  # and just after it (edits near the block, outside it)

    def key(self) -> tuple[str, str, str, str, str]:
        """The key of the block it resolves (Block.key)."""
        return (self.patch, self.file, sha256(self.ours), sha256(self.base), sha256(self.theirs))

    @property
    def name(self) -> str:
        """`<file name>-<12 hex of the key>.yaml`: one place per key."""
        return record_name(self.key())

    def relpath(self) -> str:
        """Its path under the series directory."""
        return f"{DIRECTORY}/{self.patch}/{self.name}"

    def dump(self) -> bytes:
        """The record's bytes (sorted keys); refused when they would not read back as given."""
        data: dict[str, Any] = {"format": FORMAT, "patch": self.patch, "file": self.file}
        data[FLAG] = self.outside_edits
        for name in TEXTS:
            value: bytes = getattr(self, name)
            data[name] = _text_value(value)
            data[f"{name}_sha256"] = sha256(value)
        raw = yaml.dump(
            data, Dumper=_Dumper, sort_keys=True, allow_unicode=True, width=1 << 16
        ).encode("utf-8")
        if parse_record(raw, self.name) != self:
            raise ResolutionInvalid(f"record {self.relpath()} would not read back byte for byte")
        return raw


def sha256(data: bytes) -> str:
    """Hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def record_name(key: tuple[str, str, str, str, str]) -> str:
    """The file name of the record with `key`."""
    digest = sha256("\0".join(key).encode("utf-8", "surrogateescape"))[:12]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", key[1].rsplit("/", 1)[-1]).strip("._") or "file"
    return f"{stem[:60]}-{digest}.yaml"


# ----------------------------------------------------------------------------- blocks


def lines_of(text: bytes) -> list[bytes]:
    """The lines of `text`, each with its line end (the last may have none)."""
    return text.splitlines(keepends=True) if b"\r" in text else _split_lf(text)


def _split_lf(text: bytes) -> list[bytes]:
    parts = text.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    return lines + ([parts[-1]] if parts[-1] else [])


def _marker(line: bytes) -> bytes | None:
    match = MARKER.match(line)
    return match.group(1)[:1] if match else None


def blocks(lines: Sequence[bytes]) -> list[Block]:
    """The well-formed conflict blocks of a merged file's lines, in order (a marker line
    outside a well-formed block is text: a block is only what git writes)."""
    found: list[Block] = []
    i = 0
    while i < len(lines):
        if _marker(lines[i]) != b"<":
            i += 1
            continue
        block = _block_at(lines, i)
        if block is None:
            i += 1
            continue
        found.append(block)
        i = block.end
    return found


def _block_at(lines: Sequence[bytes], start: int) -> Block | None:
    sides: dict[bytes, list[bytes]] = {b"<": [], b"|": [], b"=": []}
    section, seen = b"<", [b"<"]
    for j in range(start + 1, len(lines)):
        kind = _marker(lines[j])
        if kind == b"<":
            return None  # nested or unfinished: not a block git wrote
        if kind == b"|" and section == b"<":
            section = b"|"
        elif kind == b"=" and section in (b"<", b"|"):
            section = b"="
        elif kind == b">" and section == b"=":
            base = b"".join(sides[b"|"]) if b"|" in seen else None
            return Block(b"".join(sides[b"<"]), base, b"".join(sides[b"="]), start, j + 1)
        elif kind is not None:
            return None
        else:
            sides[section].append(lines[j])
            continue
        seen.append(section)
    return None


@dataclass(frozen=True)
class Learned:
    """What a resolved file taught: a record per block whose resolution could be told apart,
    the blocks that could not (their lines around were edited too), and whether the resolved
    file is exactly the merged one with its blocks replaced (False: there were edits outside
    the blocks, which no record holds)."""

    records: tuple[Record, ...]
    unclear: int
    outside_edits: bool


def learn(patch: str, path: str, merged: bytes, resolved: bytes) -> Learned:
    """The records of the blocks of `merged` (a file with conflict blocks) as `resolved`
    resolves them.

    The two files are matched line by line; each stretch that differs belongs to the block
    it overlaps, or else to the nearest block: a block's record then also covers the merged
    lines between the block and that edit (`before`, `after`), and its `resolved` text is what
    `resolved` holds in their place. So the records together turn `merged` into `resolved`.
    Blocks whose stretches would overlap are not recorded (counted as unclear)."""
    lines, done = lines_of(merged), lines_of(resolved)
    found = blocks(lines)
    if not found:
        return Learned((), 0, merged != resolved)
    anchors = _matched_lines(lines, done)
    spans = _spans(found, _changed(anchors, len(lines), len(done)))
    records: list[Record] = []
    kept: list[tuple[Block, int, int]] = []
    unclear = 0
    for k, (block, (start, end)) in enumerate(zip(found, spans, strict=True)):
        if any(m != k and o[0] < end and start < o[1] for m, o in enumerate(spans)):
            unclear += 1
            continue
        first = 0 if start == 0 else anchors[start - 1] + 1
        last = len(done) if end == len(lines) else anchors[end]
        kept.append((block, start, end))
        records.append(
            Record(
                patch,
                path,
                block.ours,
                block.base or b"",
                block.theirs,
                b"".join(done[first:last]),
                before=b"".join(lines[start : block.start]),
                after=b"".join(lines[block.end : end]),
            )
        )
    outside = unclear > 0 or _apply_spans(lines, records, kept) != resolved
    if outside:
        records = [replace(r, outside_edits=True) for r in records]
    unique, ambiguous = _one_per_key(records)
    return Learned(unique, unclear + ambiguous, outside)


def _changed(anchors: dict[int, int], size: int, done: int) -> list[tuple[int, int]]:
    """The stretches [a, b) of the merged lines that differ from the resolved file (an
    insertion is an empty stretch at its place), from the matched lines."""
    pairs = [(-1, -1), *sorted(anchors.items()), (size, done)]
    return [
        (i0 + 1, i1)
        for (i0, j0), (i1, j1) in itertools.pairwise(pairs)
        if i1 - i0 > 1 or j1 - j0 > 1
    ]


def _spans(found: Sequence[Block], changed: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each block's stretch of merged lines: the block, the changed stretches overlapping it,
    and the stretches outside every block that are nearer to it than to any other."""
    spans = [[b.start, b.end] for b in found]
    for a, b in changed:
        hit = [k for k, block in enumerate(found) if a < block.end and block.start < b]
        if not hit:
            near = min(range(len(found)), key=lambda k: _distance(found[k], a, b))
            if _distance(found[near], a, b) > REACH:
                continue  # too far from every block: left out (the file is flagged)
            hit = [near]
        for k in hit:
            spans[k] = [min(spans[k][0], a), max(spans[k][1], b)]
    return [(s, e) for s, e in spans]


def _distance(block: Block, a: int, b: int) -> int:
    return a - block.end if a >= block.end else block.start - b


def _apply_spans(
    lines: Sequence[bytes], records: Sequence[Record], spans: Sequence[tuple[Block, int, int]]
) -> bytes:
    out: list[bytes] = []
    at = 0
    for record, (_block, start, end) in sorted(
        zip(records, spans, strict=True), key=lambda item: item[1][1]
    ):
        out += lines[at:start]
        out.append(record.resolved)
        at = end
    out += lines[at:]
    return b"".join(out)


def _one_per_key(records: Sequence[Record]) -> tuple[tuple[Record, ...], int]:
    """One record per key (the same block met twice in a file and resolved alike is one
    record); the blocks of a key resolved in two ways are dropped (a replay could not tell
    which is meant) and counted."""
    by_key: dict[tuple[str, ...], list[Record]] = {}
    for record in records:
        by_key.setdefault(record.key(), []).append(record)
    kept = [same[0] for same in by_key.values() if len({r.resolved for r in same}) == 1]
    dropped = sum(len(same) for same in by_key.values() if len({r.resolved for r in same}) > 1)
    return tuple(kept), dropped


def _matched_lines(a: Sequence[bytes], b: Sequence[bytes]) -> dict[int, int]:
    """Line index in `a` -> line index in `b` for the lines a line diff keeps (the common
    head and tail matched directly; difflib between them)."""
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    pairs = {i: i for i in range(head)}
    pairs.update({len(a) - 1 - k: len(b) - 1 - k for k in range(tail)})
    matcher = difflib.SequenceMatcher(None, a[head : len(a) - tail], b[head : len(b) - tail],
                                      autojunk=False)  # fmt: skip
    for i, j, size in matcher.get_matching_blocks():
        pairs.update({head + i + k: head + j + k for k in range(size)})
    return pairs


@dataclass(frozen=True)
class Replayed:
    """A merged file with the recorded blocks put in: the new text, the records used and the
    number of blocks left (no record for them)."""

    text: bytes
    used: tuple[Record, ...]
    left: int


def replay(patch: str, path: str, merged: bytes, store: Sequence[Record]) -> Replayed:
    """`merged` with each block that has a record in `store` (and the lines around it the
    record names, as they are) replaced by its resolved text."""
    by_key = {r.key(): r for r in store}
    lines = lines_of(merged)
    found = blocks(lines)
    used: list[tuple[int, int, Record]] = []
    for block in found:
        record = by_key.get(block.key(patch, path))
        if record is None:
            continue
        start = block.start - len(lines_of(record.before))
        end = block.end + len(lines_of(record.after))
        if start < 0 or b"".join(lines[start : block.start]) != record.before:
            continue
        if b"".join(lines[block.end : end]) != record.after:
            continue
        if used and start < used[-1][1]:
            continue  # overlaps the span of the block replayed before it
        used.append((start, end, record))
    out: list[bytes] = []
    at = 0
    for start, end, record in used:
        out += lines[at:start]
        out.append(record.resolved)
        at = end
    out += lines[at:]
    text = b"".join(out) if used else merged
    return Replayed(text, tuple(r for _s, _e, r in used), len(found) - len(used))


# ----------------------------------------------------------------------------- the files


class _Dumper(yaml.SafeDumper):
    """Texts as literal block scalars where YAML keeps their bytes."""


def _str_style(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" not in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value)
    style = "|" if _block_safe(value) else '"'  # double-quoted: every byte escaped
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _block_safe(value: str) -> bool:
    """True when a literal block scalar reads back as exactly `value`."""
    try:
        raw = yaml.dump({"x": value}, Dumper=_PlainBlock, allow_unicode=True, width=1 << 16)
        return bool(yaml.safe_load(raw) == {"x": value})
    except yaml.YAMLError:
        return False


class _PlainBlock(yaml.SafeDumper):
    pass


_PlainBlock.add_representer(
    str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|")
)
_Dumper.add_representer(str, _str_style)


def _text_value(data: bytes) -> str | dict[str, str]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def _text_bytes(value: object, what: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{what}: base64 that does not decode") from None
    raise ValueError(f"{what}: a string or {{base64: ...}} was expected")


def parse_record(raw: bytes, name: str) -> Record:
    """A record from its file's bytes (`name`: the file, for the errors); ValueError when it
    is not a record of this format or a text does not hash to its recorded sha256."""
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or set(data) != KEYS:
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"keys {got}, expected {sorted(KEYS)}")
    if data["format"] != FORMAT:
        raise ValueError(f"format {data['format']!r}, expected {FORMAT}")
    patch, file = data["patch"], data["file"]
    if not isinstance(patch, str) or not _PATCH_ID.fullmatch(patch):
        raise ValueError(f"patch {patch!r} is not a patch id")
    if not isinstance(file, str) or not _safe_path(file):
        raise ValueError(f"file {file!r} is not a relative path inside the tree")
    if not isinstance(data[FLAG], bool):
        raise ValueError(f"{FLAG}: true or false was expected")
    texts = {}
    for text in TEXTS:
        value = _text_bytes(data[text], text)
        if data[f"{text}_sha256"] != sha256(value):
            raise ValueError(f"{text} does not hash to its {text}_sha256 (edited by hand?)")
        texts[text] = value
    return Record(patch, file, **texts, outside_edits=data[FLAG])


def _safe_path(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and "\0" not in path and all(p not in ("", ".", "..") for p in parts)


def is_record_name(name: str) -> bool:
    """Whether `name` is a record's file name (`<file>-<12 hex>.yaml`)."""
    return _NAME.fullmatch(name) is not None


def store_dir(series_dir: Path) -> Path:
    """The series' resolutions directory."""
    return series_dir / DIRECTORY


def load_patch_records(series_dir: Path, patch: str) -> list[Record]:
    """The records of `patch` (none when it has no directory); ResolutionInvalid naming the
    file when one does not read."""
    folder = store_dir(series_dir) / patch
    if not folder.is_dir():
        return []
    records = []
    for path in sorted(folder.iterdir()):
        records.append(_load(path, patch))
    return records


def _load(path: Path, patch: str) -> Record:
    fix = f"restore it from version control, or delete it (`git rm {path}`) to record it again"
    if not path.is_file() or path.is_symlink() or not _NAME.fullmatch(path.name):
        raise ResolutionInvalid(
            f"{path}: not a resolution record (expected <file>-<12 hex>.yaml)", hint=fix
        )
    if path.stat().st_size > RECORD_BYTES:
        raise ResolutionInvalid(f"{path}: larger than {RECORD_BYTES} bytes", hint=fix)
    try:
        record = parse_record(path.read_bytes(), path.name)
    except ValueError as exc:
        raise ResolutionInvalid(f"{path}: {exc}", hint=fix) from None
    if record.patch != patch:
        raise ResolutionInvalid(f"{path}: names patch {record.patch}, not {patch}", hint=fix)
    if record.name != path.name:
        raise ResolutionInvalid(
            f"{path}: its key gives the name {record.name} (the file was renamed or edited)",
            hint=fix,
        )
    return record


def check_store(series_dir: Path, touched: Mapping[str, Sequence[str]]) -> list[str]:
    """Every problem of the store, one line each (naming the file and the fix): a record
    that does not read, names another patch, belongs to no patch of the series (`touched`:
    patch id -> the paths it changes) or to a path its patch does not change."""
    root = store_dir(series_dir)
    if not root.exists():
        return []
    if not root.is_dir() or root.is_symlink():
        return [f"{root}: not a directory (remove it)"]
    problems: list[str] = []
    for folder in sorted(root.iterdir()):
        if folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
            continue  # an empty directory: git keeps none, and it holds no record
        if folder.name not in touched:
            problems.append(
                f"{folder}: no patch {folder.name} in the series (orphan records: the patch was"
                f" dropped or renamed; `git rm -r {folder}`, or move them to the patch's new id"
                " and re-record)"
            )
            continue
        if not folder.is_dir() or folder.is_symlink():
            problems.append(f"{folder}: not a directory of records (remove it)")
            continue
        for path in sorted(folder.iterdir()):
            try:
                record = _load(path, folder.name)
            except ResolutionInvalid as exc:
                problems.append(f"{exc} ({exc.hint})")
                continue
            if record.file not in touched[folder.name]:
                problems.append(
                    f"{path}: patch {folder.name} no longer changes {record.file} (stale record;"
                    f" `git rm {path}`)"
                )
    return problems
