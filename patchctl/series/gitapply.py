"""Applying patch bytes with `git apply`: the one home of its flags, the series-root rule,
the drift / conflict / fuzz diagnostics and a patch's identity (sha256, commit message).

Three callers, one target: `cleanroom apply`, `verify` and `import` apply patches to tree
objects (`TreePatcher`: `git apply --cached` on a small index holding only the entries a patch
can touch, then the tree edited in place; its docstring says why the result equals a
whole-index apply). All of them pass the same flags, read git's verbose output with the same
parsers, and name a failure the same way: a conflict (PatchDoesNotApply, exit 3) says the file,
hunk and reason; a hunk that would land at an offset or need fuzz is drift (PatchDrift, exit
10); a patch whose reverse applies is already applied (AlreadyApplied, exit 11). A strict
apply never takes an offset or fuzz: fuzz is only diagnosed there. Import, refresh and rebase
replay a drifted patch leniently (`replay`, `replay_tree`: offset, else fuzz) into indexes and
trees of their own to learn what it does, never into a clean room.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from patchctl.errors import AlreadyApplied, PatchChanged, PatchDoesNotApply, PatchDrift
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.index import Index
from patchctl.gitlayer.runner import temp_prefix
from patchctl.gitlayer.trees import TREE_MODE, Entry, TreeStore
from patchctl.patchfmt import binary as binarypatch
from patchctl.patchfmt.parse import ambiguous_names, display, nul_names, parse, zero_context
from patchctl.progress import notice
from patchctl.series.model import Patch

# (flag, why): every `git apply` patchctl runs has these.
APPLY_FLAGS: tuple[tuple[str, str], ...] = (
    ("--whitespace=nowarn", "apply.whitespace=fix would silently rewrite bytes; nowarn keeps them"),
    ("-p1", "patches carry a/ and b/ prefixes (capture pins them whatever diff.noprefix says)"),
    ("-v", "git reports offsets and reduced context, which find_drift turns into drift"),
)
# Every apply is `--cached` on an index patchctl owns (Index.apply); the clean room's own
# index and work tree follow the resulting commit in one `reset --keep` (ops/cleanroom/apply.py).

ID_TRAILER = "Patchctl-Id"
SHA_TRAILER = "Patchctl-Patch-Sha256"

SUCCEEDED = re.compile(rb"^Hunk #(\d+) succeeded at (\d+)")
OFFSET = re.compile(rb"^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)\.$")
REDUCED = re.compile(rb"^Context reduced to \((\d+)/(\d+)\) to apply fragment at (\d+)$")
CHECKING = re.compile(rb"^Checking patch (.*)\.\.\.$")
TYPE_WARNING = re.compile(rb"^warning: (.*) has type (\d+), expected (\d+)$")
FAILED_AT = re.compile(rb"^error: patch failed: (.*):(\d+)$")
FILE_ERROR = re.compile(rb"^error: (.*): (.*)$")
HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")
FUZZ_CONTEXT = 1  # the context size of the fuzz diagnosis (`-C1`): what quilt/patch would do


# ----------------------------------------------------------------------------- identity


def patch_sha256(data: bytes) -> str:
    """The sha256 of patch bytes (recorded in each patch commit and for imported patches)."""
    return hashlib.sha256(data).hexdigest()


RESTORE_HINT = (
    "restore the file's recorded bytes from version control (e.g. `git restore {file}`); "
    "to change the patch on purpose, apply the series up to the patch before it, edit the "
    "clean room and `patchctl capture {id}`"
)


def check_recorded_sha256(patch: Patch, data: bytes, file: Path) -> None:
    """PatchChanged (exit 12) when series.yaml records a sha256 for the patch (an imported
    patch) and `data`, the bytes of its `file`, hash to another: the file was damaged or
    edited by hand, and applying it would make the damage the clean room's truth."""
    if patch.sha256 is None:
        return
    actual = patch_sha256(data)
    if actual != patch.sha256:
        raise PatchChanged(
            f"patch {patch.id}: {file} has sha256 {actual}, but series.yaml records "
            f"{patch.sha256}: its bytes changed since they were recorded",
            hint=RESTORE_HINT.format(file=file.name, id=patch.id),
        )


def check_names(patch_id: str, data: bytes) -> None:
    """PatchDoesNotApply (exit 3) for a patch naming a path with a NUL byte (raw, or quoted
    as `\\000`): git apply would cut the name there and patch another file."""
    bad = nul_names(data)
    if bad:
        shown = display(bad[0]).replace("\0", "\\0")
        raise PatchDoesNotApply(
            f"patch {patch_id} names a path with a NUL byte ({shown!r}); no file can have it",
            patch=patch_id,
            file=shown,
            why="a path with a NUL byte",
            hint="fix the file name in the patch, or remove the patch from the series",
        )


def warn_ambiguous_names(patch_id: str, data: bytes) -> None:
    """A warning line for each plain-diff name GNU patch and quilt would read otherwise than
    patchctl (git apply): a name with a space and no TAB after it (patchparse.ambiguous_names)."""
    for ours, theirs in ambiguous_names(data):
        notice(
            f"warning: {patch_id}: the plain-diff path {display(ours)!r} holds a space and no "
            f"TAB ends it: patchctl (as git apply) reads {display(ours)!r}, GNU patch and quilt "
            f"read {display(theirs)!r}; end the name with a TAB (or use a git diff) to make "
            "both read the same"
        )


def commit_message(patch: Patch, sha: str) -> bytes:
    """The message of a patch commit: `<id>: <title>` plus the id and sha256 trailers.

    `cleanroom apply` and `capture` both use it, so a patch's commit id is the same whichever
    made it.
    """
    title = patch.title or patch.id
    return f"{patch.id}: {title}\n\n{ID_TRAILER}: {patch.id}\n{SHA_TRAILER}: {sha}\n".encode()


# ----------------------------------------------------------------------------- flags


def root_flags(root: str) -> tuple[str, ...]:
    """The series root rule: patches name paths relative to `root:`, git applies them under it."""
    return () if root in (".", "") else (f"--directory={root.rstrip('/')}",)


def apply_flags(
    root: str = ".",
    *,
    reverse: bool = False,
    check: bool = False,
    context: int | None = None,
    data: bytes = b"",
) -> tuple[str, ...]:
    """The flags of one `git apply` of `data` (without --index / --cached, which the target
    adds). A patch with a zero-context hunk (`diff -U0`) gets `--unidiff-zero`: git then
    places such a hunk by its line numbers, as GNU patch, quilt and dpkg-source do, instead of
    refusing it; a hunk that lands elsewhere is still reported at its offset (drift)."""
    mode = (*(["--check"] if check else []), *(["-R"] if reverse else []))
    fuzz = () if context is None else (f"-C{context}",)
    zero = ("--unidiff-zero",) if data and zero_context(data) else ()
    return (*mode, *(flag for flag, _why in APPLY_FLAGS), *zero, *fuzz, *root_flags(root))


# Per file section of a patch, in order: (the path git names it by, the line `git apply -v`
# prints in `Hunk #N succeeded at L` for each of its hunks when the hunk lands where its
# old-side line numbers say, as GNU patch places it). See `expected_lines`.
Expected = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class Outcome:
    """How one `git apply` of `data` went: its exit status and verbose stderr (`root` and
    `reverse` as applied: where the hunks belong by their line numbers, expected_lines)."""

    code: int
    stderr: bytes
    data: bytes = b""
    root: str = "."
    reverse: bool = False

    @property
    def ok(self) -> bool:
        """True when git applied (or, with --check, would apply) the patch."""
        return self.code == 0

    def drift(self) -> list[Drift]:
        """The hunks git placed at an offset or with reduced context (an offset that puts a
        hunk where its old-side line numbers say is none: expected_lines)."""
        offsets = b"(offset " in self.stderr and bool(self.data)
        expected = expected_lines(self.data, self.root, reverse=self.reverse) if offsets else ()
        return find_drift(self.stderr, expected)

    def first_error(self) -> str:
        """git's first `error:` line (else its first line), for a one-line report."""
        lines = _decode(self.stderr).strip().splitlines()
        errors = [line for line in lines if line.startswith("error: ")]
        return (errors or lines or ["git apply failed"])[0]


def apply_bytes(index: Index, data: bytes, flags: Sequence[str]) -> tuple[int, bytes]:
    """`git apply --cached` of patch bytes on `index`: (exit status, stderr). A binary hunk
    declaring a file over PATCHCTL_MAX_BLOB_BYTES is status 1 without running git: git would
    inflate it whole (patchfmt/binary.py)."""
    refused = binarypatch.oversized(data)
    if refused is not None:
        return 1, refused.encode() + b"\n"
    return index.apply(data, flags)


def apply_to_index(index: Index, data: bytes, root: str, *, reverse: bool = False) -> Outcome:
    """Apply patch bytes to a whole index of patchctl's own."""
    flags = apply_flags(root, reverse=reverse, data=data)
    return Outcome(*apply_bytes(index, data, flags), data, root, reverse)


def expected_lines(data: bytes, root: str = ".", *, reverse: bool = False) -> Expected:
    """Where each hunk belongs by its old-side line numbers, as GNU patch, quilt and
    dpkg-source place it, in the numbers of the file as git patches it (the earlier hunks of
    the file applied): the hunk's old-side start plus what those hunks added; a hunk that
    removes nothing goes after its start line. git places a hunk by its new-side start
    instead, so it reports an offset for a hunk that lands exactly there when that start
    disagrees: a header whose new-side start ignores an earlier hunk of the file
    (`@@ -1419,6 +1419,9 @@` after a hunk that added a line), or a `diff -U0` hunk that
    removes lines (`@@ -22,4 +21,0 @@`, whose new-side start names the line before). Such
    an offset is not drift (`-R`: the new side is the old)."""
    prefix = "" if root in (".", "") else root.rstrip("/") + "/"
    sections = []
    for diff in parse(data):
        delta, lines = 0, []
        for hunk in diff.hunks:
            start, count, other = (
                (hunk.new_start, hunk.new_count, hunk.old_count)
                if reverse
                else (hunk.old_start, hunk.old_count, hunk.new_count)
            )
            lines.append(start + delta + (count == 0))
            delta += other - count
        sections.append((prefix + display(diff.path), tuple(lines)))
    return tuple(sections)


# ----------------------------------------------------------------------------- diagnostics


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def hunk_number(data: bytes, file: str, line: int, root: str = ".") -> int | None:
    """The 1-based number of the hunk of `file` whose old range starts at `line`."""
    name = file if root in (".", "") else file.removeprefix(root.rstrip("/") + "/")
    current: str | None = None
    count = 0
    for raw in data.splitlines():
        if raw.startswith(b"diff --git "):
            current, count = None, 0
        elif raw.startswith((b"--- a/", b"+++ b/")) and current is None:
            current = _decode(raw[6:]).rstrip("\t")
        elif raw.startswith(b"@@ ") and (m := HUNK_HEADER.match(raw)):
            count += 1
            if current == name and int(m.group(1)) in (line, line - 1, line + 1):
                return count
    return None


@dataclass(frozen=True)
class Drift:
    """One hunk that would not land where the patch says."""

    file: str
    hunk: int | None
    why: str


def find_drift(stderr: bytes, expected: Expected = ()) -> list[Drift]:
    """Offsets, reduced context (fuzz) and mode mismatches reported by `git apply -v`; an
    offset that puts a hunk where `expected` says it belongs is none (expected_lines)."""
    found: list[Drift] = []
    current, hunk, section = "", None, -1
    wanted: tuple[int, ...] = ()
    for line in stderr.splitlines():
        if m := CHECKING.match(line):
            current, hunk, section = _decode(m.group(1)), None, section + 1
            named = expected[section] if section < len(expected) else ("", ())
            wanted = named[1] if named[0] == current else ()
        elif m := SUCCEEDED.match(line):
            hunk = int(m.group(1))
            if m := OFFSET.match(line):
                at = int(m.group(2))
                if 0 < hunk <= len(wanted) and wanted[hunk - 1] == at:
                    continue
                why = f"hunk would apply at line {at} (offset {int(m.group(3))} lines)"
                found.append(Drift(current, hunk, why))
        elif m := REDUCED.match(line):
            found.append(Drift(current, hunk, f"would need fuzz ({_decode(m.group(0))})"))
        elif m := TYPE_WARNING.match(line):
            why = f"file mode is {_decode(m.group(2))}, patch expects {_decode(m.group(3))}"
            found.append(Drift(_decode(m.group(1)), None, why))
    return found


def drift_summary(drift: list[Drift]) -> str | None:
    """`N hunk(s) at an offset, first in FILE: WHY`, or None without drift."""
    if not drift:
        return None
    first = drift[0]
    return f"{len(drift)} hunk(s) at an offset, first in {first.file}: {first.why}"


NO_CHANGES = "the patch file contains no changes"
NO_CHANGES_HINT = (
    "the file is empty or holds only a header, no file section git can apply; quilt applies "
    "such a patch as a no-op, patchctl refuses a patch that changes nothing: remove it from the "
    "series, or give it its diff"
)


def conflict(
    patch_id: str,
    data: bytes,
    stderr: bytes,
    root: str,
    *,
    onto: str = "",
    hint: str = "the clean room stays at the last good patch; rebase or fix the patch",
) -> PatchDoesNotApply:
    """A PatchDoesNotApply naming the file, hunk and reason from `git apply` stderr."""
    file, hunk, why = None, None, "git apply failed"
    errors = [line for line in stderr.splitlines() if line.startswith(b"error: ")]
    for line in errors:
        if m := FAILED_AT.match(line):
            file = _decode(m.group(1))
            hunk = hunk_number(data, file, int(m.group(2)), root)
            why = "context does not match"
            break
    else:
        file, why = _first_error(errors)
    if why == NO_CHANGES and (binary := unreadable_binary(data)):
        file, why = binary[0], BINARY_UNREADABLE
        hint = BINARY_HINT
    elif why == NO_CHANGES:
        hint = NO_CHANGES_HINT
    at = f" hunk #{hunk}" if hunk else ""
    place = f"{at} in {file}:" if file else ""
    return PatchDoesNotApply(
        f"patch {patch_id} does not apply{onto}:{place} {why}",
        patch=patch_id,
        file=file,
        hunk=hunk,
        why=why,
        stderr=stderr,
        hint=hint,
    )


BINARY_UNREADABLE = (
    "git apply finds no change it can make: a binary hunk without a full `index` line "
    "(a delta is applied to the blob that line names, which git needs to find the file it "
    "patches, and a literal is checked against it)"
)
BINARY_HINT = (
    "regenerate the patch with `git diff --binary --full-index` (or `git format-patch "
    "--binary`) against a tree that has the file a delta changes"
)


def unreadable_binary(data: bytes) -> list[str]:
    """The paths of binary hunks (`GIT binary patch`, `Binary files ... differ`) in file
    sections without a full `index <old>..<new>` line: git apply drops such a section, and
    says only that the patch holds no valid patch."""
    if b"GIT binary patch" not in data and b"Binary files " not in data:
        return []
    found = []
    for diff in parse(data):
        if diff.binary and not diff.full_index:
            found.append(display(diff.path))
    return found


def _first_error(errors: list[bytes]) -> tuple[str | None, str]:
    if not errors:
        return None, "git apply failed without a message"
    first = errors[0]
    if b"No valid patches" in first:
        return None, NO_CHANGES
    if m := FILE_ERROR.match(first):
        return _decode(m.group(1)), _decode(m.group(2))
    return None, _decode(first.removeprefix(b"error: "))


def drift_error(patch: Patch, drift: list[Drift]) -> PatchDrift:
    """PatchDrift (exit 10) naming the first drifted hunk."""
    first = drift[0]
    at = f" hunk #{first.hunk}" if first.hunk else ""
    more = f" (+{len(drift) - 1} more)" if len(drift) > 1 else ""
    return PatchDrift(
        f"patch {patch.id} drifted:{at} in {first.file}: {first.why}{more}",
        patch=patch.id,
        file=first.file,
        hunk=first.hunk,
        why=first.why,
        hint="the base differs from the one the patch was made on; refresh the patch",
    )


def already_applied(patch: Patch, how: str) -> AlreadyApplied:
    """AlreadyApplied (exit 11): the patch's changes are in the tree already."""
    return AlreadyApplied(
        f"patch {patch.id} is already applied to the tree ({how})",
        patch=patch.id,
        why=how,
        hint="remove it from the series or rebase the series onto the new upstream",
    )


# ----------------------------------------------------------------------------- named paths

DIFF_GIT = b"diff --git "
NAME_LINES = (b"--- ", b"+++ ")
BARE_NAME_LINES = (b"rename from ", b"rename to ", b"copy from ", b"copy to ")
C_ESCAPES = {b"a": 7, b"b": 8, b"f": 12, b"n": 10, b"r": 13, b"t": 9, b"v": 11}
OCTAL = re.compile(rb"[0-7]{3}")


def named_paths(data: bytes, root: str = ".") -> set[bytes]:
    """The tree paths a patch may name, read generously from its headers (a superset).

    A guess that names no entry costs nothing, and a path it misses is found by TreePatcher
    from git's own answer; so this only has to be right often, never always: `diff --git`
    lines split at every space, `---`/`+++` names with and without what follows a tab or a
    space (a timestamp), the rename and copy lines; `-p1` and the series root as `git apply`
    uses them.
    """
    found: set[bytes] = set()
    for line in data.splitlines():
        if line.startswith(DIFF_GIT):
            found.update(_strip1(name) for name in _split_diff_git(line[len(DIFF_GIT) :]))
        elif line.startswith(NAME_LINES):
            name = line[4:]
            for candidate in (name.split(b"\t", 1)[0], name.split(b" ", 1)[0], name.rstrip()):
                found.add(_strip1(_c_unquote(candidate)))
        elif line.startswith(BARE_NAME_LINES):
            found.add(_c_unquote(line.split(b" ", 2)[2]))
    found.discard(b"")
    found.discard(b"dev/null")
    prefix = b"" if root in (".", "") else root.strip("/").encode("utf-8") + b"/"
    return {prefix + name for name in found}


def _split_diff_git(rest: bytes) -> list[bytes]:
    if rest.startswith(b'"'):
        end = _quoted_end(rest)
        return [_c_unquote(rest[:end]), _c_unquote(rest[end:].strip())]
    names = []
    for i, char in enumerate(rest):
        if char == 0x20:
            names += [rest[:i], _c_unquote(rest[i + 1 :])]
    return names


def _quoted_end(text: bytes) -> int:
    i = 1
    while i < len(text):
        if text[i] == 0x5C:  # backslash: skip the escaped character
            i += 2
        elif text[i] == 0x22:  # the closing quote
            return i + 1
        else:
            i += 1
    return len(text)


def _c_unquote(name: bytes) -> bytes:
    """git's C-style quoting undone (`"a/caf\\303\\251"` is a/café); other names unchanged."""
    if len(name) < 2 or name[0] != 0x22 or name[-1] != 0x22:
        return name
    body, out, i = name[1:-1], bytearray(), 0
    while i < len(body):
        if body[i] != 0x5C or i + 1 >= len(body):
            out.append(body[i])
            i += 1
        elif OCTAL.fullmatch(body[i + 1 : i + 4]):
            out.append(int(body[i + 1 : i + 4], 8) & 0xFF)
            i += 4
        else:
            nxt = body[i + 1 : i + 2]
            out.append(C_ESCAPES.get(nxt, nxt[0]))
            i += 2
    return bytes(out)


def _strip1(name: bytes) -> bytes:
    return name.split(b"/", 1)[1] if b"/" in name else b""


# ----------------------------------------------------------------------------- tree apply

# How many times the small index is rebuilt with the paths git showed it lacked, before the
# patch goes to a whole index instead (a patch naming paths that no header line shows).
SMALL_INDEX_ROUNDS = 4
MISSING = re.compile(rb"^error: (.*): does not exist in index$")


@dataclass(frozen=True)
class TreeOutcome:
    """How applying a patch to a tree went: git's verdict and, when it applied, the tree."""

    outcome: Outcome
    tree: str | None


@dataclass(frozen=True)
class _Held:
    """What the small index file holds: entries of `tree`, left by applying `data`."""

    tree: str
    data: bytes
    entries: dict[bytes, Entry]


class TreePatcher:
    """Applies patch bytes to tree objects; each patch costs the paths it touches, not the tree.

    `git apply --cached` reads the index entries of the paths the patch names (to check and
    patch them) and of the entries a new path displaces (a file where the new path needs a
    directory, the files of a directory the new path replaces), and no others. So instead of
    a whole index of the tree (tens of thousands of entries read, hashed and written for each
    patch), it runs on a small index holding those entries, and the new tree is the old tree
    with the small index's changes edited in (`TreeStore.edit`). The small index is checked
    against git's own answer: a path git says "does not exist in index" that the tree holds,
    a path the patch created that the tree already held, or a displaced entry the small index
    lacked each put that path in and apply again. The tree is therefore the one a whole-index
    `apply --cached` + `write-tree` writes, and git's messages are the same.
    """

    def __init__(self, git: Git, store: TreeStore | None = None) -> None:
        self.git = git
        self.store = store if store is not None else TreeStore(git)
        self._owns_store = store is None
        self._dir = Path(tempfile.mkdtemp(prefix=temp_prefix("apply")))  # swept after a kill
        self._index = Index(git, self._dir / "index")
        self._held: _Held | None = None

    def __enter__(self) -> TreePatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the small index (and end the store's processes when this patcher made it)."""
        if self._owns_store:
            self.store.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def apply(
        self,
        tree: str,
        data: bytes,
        root: str = ".",
        *,
        reverse: bool = False,
        context: int | None = None,
        build: bool = True,
    ) -> TreeOutcome:
        """Apply `data` to `tree` (`build`: and write the resulting tree)."""
        flags = apply_flags(root, reverse=reverse, context=context, data=data)
        wanted, expand = named_paths(data, root), set[bytes]()
        for _round in range(SMALL_INDEX_ROUNDS):
            before = self._load(tree, data, wanted, expand)
            outcome = Outcome(*apply_bytes(self._index, data, flags), data, root, reverse)
            self._held = None
            if not outcome.ok:
                missed = self._missing_in_index(tree, outcome.stderr, before)
                if not missed:
                    return TreeOutcome(outcome, None)
                wanted |= missed
                continue
            after = self._index.entries()
            missed, displaced = self._displaced(tree, before, after)
            if missed or displaced:
                wanted |= missed
                expand |= displaced
                continue
            if not build:
                return TreeOutcome(outcome, None)
            changes: dict[bytes, Entry | None] = {
                p: e for p, e in after.items() if before.get(p) != e
            }
            changes.update({p: None for p in before if p not in after})
            new = self.store.edit(tree, changes)
            self._held = _Held(new, data, after)
            return TreeOutcome(outcome, new)
        return self._whole_index(tree, data, flags, build, root, reverse)

    def _load(
        self, tree: str, data: bytes, wanted: set[bytes], expand: set[bytes]
    ) -> dict[bytes, Entry]:
        """Fill the small index with the entries of `tree` the patch can touch."""
        held = self._held
        if held is not None and held.tree == tree and held.data == data and not expand:
            return held.entries  # the reverse of the patch just applied: the same paths
        chosen: dict[bytes, Entry] = {}
        for path in wanted | expand:
            found = self.store.find(tree, path)
            if found.blocker is not None:
                chosen[found.blocker[0]] = found.blocker[1]
            if found.entry is None:
                continue
            if found.entry[0] != TREE_MODE:
                chosen[path] = found.entry
            elif path in expand:
                chosen.update(self.store.walk(found.entry[1], path + b"/"))
        self._index.path.unlink(missing_ok=True)
        if chosen:
            self._index.add_entries(chosen)
        return chosen

    def _missing_in_index(self, tree: str, stderr: bytes, before: dict[bytes, Entry]) -> set[bytes]:
        """Paths git wanted in the index that the tree holds but the small index lacked."""
        missed = set()
        for line in stderr.splitlines():
            if (m := MISSING.match(line)) and m.group(1) not in before:
                found = self.store.find(tree, m.group(1))
                if found.entry is not None or found.blocker is not None:
                    missed.add(m.group(1))
        return missed

    def _displaced(
        self, tree: str, before: dict[bytes, Entry], after: dict[bytes, Entry]
    ) -> tuple[set[bytes], set[bytes]]:
        """For each path the patch created: an entry of the tree there, or a file in its way,
        that the small index lacked (a whole index would have refused or replaced it)."""
        missed: set[bytes] = set()
        displaced: set[bytes] = set()
        for path in after.keys() - before.keys():
            found = self.store.find(tree, path)
            if found.entry is not None and found.entry[0] != TREE_MODE:
                missed.add(path)
            elif found.entry is not None and not any(p.startswith(path + b"/") for p in before):
                displaced.add(path)
            if found.blocker is not None and found.blocker[0] not in before:
                missed.add(found.blocker[0])
        return missed, displaced

    def _whole_index(
        self, tree: str, data: bytes, flags: tuple[str, ...], build: bool, root: str, reverse: bool
    ) -> TreeOutcome:
        """The plain way, for a patch whose paths the small index never caught up with."""
        self._index.path.unlink(missing_ok=True)
        self._index.read_tree(tree)
        outcome = Outcome(*apply_bytes(self._index, data, flags), data, root, reverse)
        return TreeOutcome(outcome, self._index.write_tree() if outcome.ok and build else None)


# ----------------------------------------------------------------------------- the strict check


def strict_apply(
    patcher: TreePatcher,
    patch: Patch,
    data: bytes,
    root: str,
    tree: str,
    *,
    recorded: str | None = None,
) -> str:
    """The tree `patch` makes of `tree` when it applies exactly (no offset, no fuzz); else
    PatchDoesNotApply (3), PatchDrift (10) or AlreadyApplied (11). Nothing is checked out.

    `recorded`: `tree` as the patch's own series records trees (the subtree an extended
    series' patch was captured in, stack.Entry.local_tree); `tree` itself when None."""
    check_names(patch.id, data)
    local = tree if recorded is None else recorded
    if patch.post_tree and patch.post_tree == local and patch.pre_tree != local:
        raise already_applied(patch, "the tree equals its recorded post_tree")
    result = patcher.apply(tree, data, root)
    outcome = result.outcome
    if not outcome.ok:
        if _reverse_applies(patcher, tree, data, root):
            raise already_applied(patch, "its reverse applies cleanly")
        fuzz = fuzz_drift(patcher, tree, data, root)
        if fuzz:
            raise drift_error(patch, fuzz)
        raise conflict(patch.id, data, outcome.stderr, root)
    drift = outcome.drift()
    if drift:
        if _reverse_applies(patcher, tree, data, root):
            raise already_applied(patch, "its reverse applies cleanly")
        raise drift_error(patch, drift)
    assert result.tree is not None
    return result.tree


def _reverse_applies(patcher: TreePatcher, tree: str, data: bytes, root: str) -> bool:
    outcome = patcher.apply(tree, data, root, reverse=True, build=False).outcome
    return outcome.ok and not outcome.drift()


def fuzz_drift(patcher: TreePatcher, tree: str, data: bytes, root: str) -> list[Drift]:
    """For a patch that does not apply: the hunks that would apply with fuzz (less context).

    Only a diagnosis: the check runs with `-C1` on the patcher's throwaway index, and nothing
    is ever applied with fuzz.
    """
    outcome = patcher.apply(tree, data, root, context=FUZZ_CONTEXT, build=False).outcome
    if not outcome.ok:
        return []
    return [d for d in outcome.drift() if d.why.startswith("would need fuzz")]


# ----------------------------------------------------------------------------- lenient replay
#
# import, refresh and rebase must know what a drifted patch does on a base it was not made
# on: the tree it produces there and how it got there. `replay_tree` applies it to a tree
# object through a TreePatcher, exactly if it can, else at an offset (git's default), else with
# fuzz (the `-C1` of the diagnosis above) -- never to a clean room -- and says which hunks
# needed what.


@dataclass(frozen=True)
class Replayed:
    """A patch applied leniently to a tree: the tree it gave and the hunks that drifted."""

    post: str
    drift: tuple[Drift, ...]  # one entry per drifted hunk: fuzz wins over offset

    @property
    def fuzz(self) -> bool:
        """True when some hunk applied only with fuzz (reduced context)."""
        return any(is_fuzz(d) for d in self.drift)


def is_fuzz(drift: Drift) -> bool:
    """True for a hunk that needed fuzz (reduced context) rather than an offset."""
    return drift.why.startswith("would need fuzz")


def per_hunk(drift: list[Drift]) -> tuple[Drift, ...]:
    """One entry per (file, hunk): a hunk that needed fuzz is reported as fuzz only (the
    offset git prints for it comes from the context it dropped)."""
    fuzzed = {(d.file, d.hunk) for d in drift if is_fuzz(d) and d.hunk is not None}
    kept = [d for d in drift if is_fuzz(d) or (d.file, d.hunk) not in fuzzed]
    return tuple(dict.fromkeys(kept))


def replay_tree(
    patcher: TreePatcher,
    tree: str,
    data: bytes,
    root: str,
    patch_id: str,
    *,
    onto: str = "",
    hint: str = "",
) -> Replayed:
    """Patch bytes applied to `tree` exactly, at an offset, or with fuzz (in that order) through
    a TreePatcher, so each patch costs the paths it touches, not the whole tree.

    A patch that does not apply even with fuzz is a conflict (PatchDoesNotApply, exit 3,
    naming the file and hunk of the exact attempt, with `onto` and `hint` in its message)."""
    check_names(patch_id, data)
    exact = patcher.apply(tree, data, root)
    if exact.outcome.ok and exact.tree is not None:
        return Replayed(exact.tree, per_hunk(exact.outcome.drift()))
    fuzzy = patcher.apply(tree, data, root, context=FUZZ_CONTEXT)
    if not fuzzy.outcome.ok or fuzzy.tree is None:
        raise _replay_conflict(patch_id, data, exact.outcome, root, onto, hint)
    return Replayed(fuzzy.tree, per_hunk(fuzzy.outcome.drift()))


def _replay_conflict(
    patch_id: str, data: bytes, exact: Outcome, root: str, onto: str, hint: str
) -> PatchDoesNotApply:
    """The conflict of a replay, named from the exact attempt's errors."""
    hint = hint or "fix the patch by hand, or rebase the series onto the upstream it needs"
    return conflict(patch_id, data, exact.stderr, root, onto=onto, hint=hint)


def failing_hunks(index: Index, data: bytes, root: str) -> tuple[tuple[str, int | None], ...]:
    """Every (file, hunk number) of a patch that does not apply to `index`'s tree, from one
    `git apply --check --reject` (which tries every hunk instead of stopping at the first);
    a file that is missing or otherwise refused has hunk None. Nothing is written."""
    _code, err = apply_bytes(index, data, (*apply_flags(root, check=True, data=data), "--reject"))
    found: dict[tuple[str, int | None], None] = {}
    for line in err.splitlines():
        if m := FAILED_AT.match(line):
            file = _decode(m.group(1))
            found[(file, hunk_number(data, file, int(m.group(2)), root))] = None
        elif (m := FILE_ERROR.match(line)) and not line.startswith(b"error: patch failed"):
            file = _decode(m.group(1))
            if not any(f == file for f, _h in found) and " " not in file.strip():
                found[(file, None)] = None
    return tuple(found)
