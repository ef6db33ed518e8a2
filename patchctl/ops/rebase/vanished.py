"""API the new upstream lacks: the identifiers a moved patch's added lines use that the old
upstream has and the new one does not.

A three-way merge only stops where both sides changed the same lines. A patch line that
calls `kv.get_cells(seq_id)` merges cleanly onto an upstream that has no `get_cells` at all,
and the first to notice is the compiler, or nobody (a CUDA file on a CPU machine). This check
runs when a rebase ends (and on `rebase --status`) and lists, per patch, the names that went.

The heuristic, over C and C++ (and CUDA, Objective-C, Metal, OpenCL) source, by name only:
1. The patch's added lines: every line its diff (the tree before it to the tree after it, on
   the new upstream) adds to a file with a C-family suffix (SUFFIXES). At a stop, the patch as
   the merge left it, with every conflict block put back to the new upstream's side: only
   what git merged on its own is checked; the blocks are the user's to resolve.
2. Their identifiers: `[A-Za-z_][A-Za-z0-9_]*` not preceded by a letter, digit or `_`
   (so the `x1F` of `0x1F` and the `f` of `1.0f` are not names). Each added line is read on
   its own: in its code, every identifier; in its comments and string literals (`//`, `/* */`,
   a line that continues a block comment with `*`, "..."), only words that look like code
   (an `_` inside, or a lower-case letter followed by an upper-case one: `ggml_prec_set_acc`,
   `getCells`), so prose ("regimes", "fingerprint") is never a name.
3. Names the series declares itself are dropped: a name that an added code line of the same
   file, in this patch or in one before it in the series, declares (`<type> [*&] name`
   followed by `=`, `;`, `,`, `)`, `[`, `{` or `(`: a local, a parameter, a member, a
   function), so a patch's own `n_cells` is not taken for the upstream's.
4. A remaining name is listed when some C-family file of the old upstream's tree holds it
   and no C-family file of the new upstream's tree does (whole words, code or comment). Of
   the old tree only the files that differ from the new one are read (a name the new tree
   lacks is in one of them); the new tree's files are read until no name is left.

What it catches: a function, macro, type, enum value, struct member or parameter name that the
new upstream removed or renamed everywhere, used in code git merged without a conflict, in any
file of the patch (new files included), and such a name in a comment. What it cannot catch: a
name the new upstream still has somewhere else (a member gone from one struct but present in
another, an overload, a changed signature or meaning, a default argument:
`cparams.rope_scaling_type` where only `llama_context_params` keeps the name); names built by
the preprocessor (`##`); anything in a file without a C-family suffix (Python, CMake, shaders
under other suffixes); a name the series declares itself that is also the upstream's (a
parameter the patch passes on under the same name: declared, so dropped); the line-by-line
reading does not know a block comment's middle lines that do not start with `*`, nor a raw
string. It can list a name a line declares in a form step 3 does not read (a macro, a name
behind a template argument), or a plain upstream local the patch reuses that the new upstream
renamed in that function: the maintainer reads the list against the build. It is a list to
read, never a refusal: a rebase does not stop for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from patchctl.gitlayer.git import Git
from patchctl.gitlayer.trees import TreeStore
from patchctl.patchfmt.parse import parse
from patchctl.series import resolutions
from patchctl.series.patchfile import diff_tree_pairs

SUFFIXES = (
    ".c", ".h", ".cc", ".cpp", ".cxx", ".c++", ".hpp", ".hh", ".hxx", ".h++", ".inl", ".inc",
    ".ipp", ".tpp", ".cu", ".cuh", ".m", ".mm", ".metal", ".cl",
)  # fmt: skip
WORD = re.compile(rb"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]*")
CODE_LIKE = re.compile(rb"[A-Za-z0-9]_|_[A-Za-z0-9]|[a-z][A-Z]")  # a word of prose has neither
# `<type> [*&] name` then what follows a declared name; the type word is not a keyword that
# takes an expression (`return x;`, `else f(x);`, `case X:`)
DECLARED = re.compile(
    rb"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)(?:\s*<[^;()]*>)?[\s*&]+"
    rb"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=|;|,|\)|\[|\{|\()"
)
NOT_TYPES = frozenset(
    b"return else case goto delete new throw sizeof alignof decltype typeid co_return"
    b" co_yield co_await not and or".split()
)
TEXT_CHARS = 160  # an added line is shown cut to this many characters
REGULAR = ("100644", "100755")
CHUNK = 256  # blobs read per `cat-file --batch`
# every byte that cannot be part of an identifier becomes a space (`_words` splits there)
SEPARATE = bytes(
    c if chr(c).isascii() and (chr(c).isalnum() or c == ord("_")) else 32 for c in range(256)
)


@dataclass(frozen=True)
class Missing:
    """One identifier a patch's added lines use that the new upstream lacks."""

    name: str
    file: str  # the first file of the patch whose added lines use it
    text: str  # that added line, stripped (cut to TEXT_CHARS)
    uses: int  # the patch's added lines that use it
    old_file: str  # a file of the old upstream that has it

    def to_json(self) -> dict[str, object]:
        """Plain data for the report."""
        return {
            "name": self.name,
            "file": self.file,
            "text": self.text,
            "uses": self.uses,
            "old_file": self.old_file,
        }


@dataclass(frozen=True)
class PatchApi:
    """What the check found for one patch."""

    id: str
    missing: tuple[Missing, ...]
    outside_blocks: bool = False  # a stop: only the lines git merged outside conflict blocks


def is_c_family(path: bytes | str) -> bool:
    """True for a path with a C-family suffix (SUFFIXES, case as written)."""
    name = path if isinstance(path, str) else path.decode("utf-8", "surrogateescape")
    return name.endswith(SUFFIXES)


def missing_api(
    git: Git,
    old_tree: str,
    new_tree: str,
    patches: Sequence[tuple[str, str, str]],
    outside_blocks: str = "",
) -> tuple[PatchApi, ...]:
    """For each (id, tree before, tree after) of `patches` (moved onto the new upstream
    `new_tree`), the identifiers its added lines use that `old_tree` has and `new_tree` lacks
    (C-family files only). `outside_blocks`: the id of a patch whose `after` tree holds
    conflict blocks (a stop); they are put back to the new side before its lines are read."""
    if not patches:
        return ()
    pairs = [(pre, post) for _pid, pre, post in patches]
    if outside_blocks:
        pairs = [
            (pre, _without_blocks(git, pre, post) if pid == outside_blocks else post)
            for (pid, _a, _b), (pre, post) in zip(patches, pairs, strict=True)
        ]
    uses: list[dict[bytes, tuple[str, str, int]]] = []
    declared: dict[str, set[bytes]] = {}  # per file: by this patch or an earlier one
    for diff in diff_tree_pairs(git, pairs):
        seen, declares = _added_words(diff)
        for path, names in declares.items():
            declared.setdefault(path, set()).update(names)
        used: dict[bytes, tuple[str, str, int]] = {}
        for word, path, text in seen:
            if word in declared.get(path, ()):
                continue
            first = used.get(word)
            used[word] = (path, text, 1) if first is None else (*first[:2], first[2] + 1)
        uses.append(used)
    wanted = set().union(*(u.keys() for u in uses))
    gone = _gone(git, old_tree, new_tree, wanted) if wanted else {}
    found = []
    for (pid, _pre, _post), used in zip(patches, uses, strict=True):
        listed = [
            Missing(n.decode("utf-8", "replace"), used[n][0], used[n][1], used[n][2], gone[n])
            for n in sorted(n for n in used if n in gone)
        ]
        found.append(PatchApi(pid, tuple(listed), pid == outside_blocks))
    return tuple(found)


def _added_words(diff: bytes) -> tuple[list[tuple[bytes, str, str]], dict[str, set[bytes]]]:
    """The identifiers of the lines `diff` adds to C-family files, one (name, file, line) per
    added line that uses the name, and per file the names those lines declare."""
    found: list[tuple[bytes, str, str]] = []
    declared: dict[str, set[bytes]] = {}
    for section in parse(diff):
        if section.new is None or not is_c_family(section.new):
            continue
        path = section.new.decode("utf-8", "replace")
        names = declared.setdefault(path, set())
        for line in section.added:
            code, prose = split_line(line)
            names.update(m.group(2) for m in DECLARED.finditer(code) if m.group(1) not in NOT_TYPES)
            words = set(WORD.findall(code))
            words.update(w for w in WORD.findall(prose) if CODE_LIKE.search(w))
            text = line.decode("utf-8", "replace").strip()[:TEXT_CHARS]
            found += [(word, path, text) for word in sorted(words)]
    return found, declared


def split_line(line: bytes) -> tuple[bytes, bytes]:
    """One source line as (its code, its comments and string literals), each part joined by
    spaces; a line that continues a block comment (`*` first) is all comment."""
    stripped = line.lstrip()
    if stripped.startswith(b"*") and not stripped.startswith(b"*/"):
        return b"", line
    code: list[bytes] = []
    prose: list[bytes] = []
    i, n, start = 0, len(line), 0
    while i < n:
        c = line[i : i + 1]
        two = line[i : i + 2]
        if two == b"//":
            code.append(line[start:i])
            prose.append(line[i + 2 :])
            return b" ".join(code), b" ".join(prose)
        if two == b"/*":
            code.append(line[start:i])
            end = line.find(b"*/", i + 2)
            end = n if end < 0 else end
            prose.append(line[i + 2 : end])
            i = start = min(n, end + 2)
            continue
        if c in (b'"', b"'"):
            code.append(line[start:i])
            j = i + 1
            while j < n and line[j : j + 1] != c:
                j += 2 if line[j : j + 1] == b"\\" else 1
            prose.append(line[i + 1 : j])
            i = start = min(n, j + 1)
            continue
        i += 1
    code.append(line[start:])
    return b" ".join(code), b" ".join(prose)


def _gone(git: Git, old_tree: str, new_tree: str, wanted: set[bytes]) -> dict[bytes, str]:
    """The names of `wanted` that some C-family file of `old_tree` holds and none of
    `new_tree` does, each with one old file that holds it. A name the new tree lacks is in
    a file that differs between the trees (or one it deleted): only those files of the old
    tree are read; then every C-family file of the new tree, until no name is left."""
    [changes] = git.raw_changes([(old_tree, new_tree)])
    old = sorted(
        (path.decode("utf-8", "replace"), entry[1])
        for path, (entry, _new) in changes.items()
        if entry is not None and entry[0] in REGULAR and is_c_family(path)
    )
    where: dict[bytes, str] = {}
    for start in range(0, len(old), CHUNK):
        part = old[start : start + CHUNK]
        for (path, _oid), data in zip(part, git.cat_blobs([o for _p, o in part]), strict=True):
            for word in _words(data) & wanted:
                where.setdefault(word, path)
    new = [e.oid for e in git.ls_tree(new_tree) if e.mode in REGULAR and is_c_family(e.path)]
    for start in range(0, len(new), CHUNK):
        if not where:
            break
        for data in git.cat_blobs(new[start : start + CHUNK]):
            for word in _words(data) & where.keys():
                del where[word]
    return where


def _words(data: bytes) -> set[bytes]:
    """The maximal runs of letters, digits and `_` in `data` (identifiers among them, as
    WORD reads them; a run that starts with a digit is never a wanted name). One translate
    and one split, in C: several times faster than the regular expression on a large tree."""
    return set(data.translate(SEPARATE).split())


def _without_blocks(git: Git, pre: str, merged: str) -> str:
    """`merged` (a stop's tree) with each conflict block of the files that differ from `pre`
    replaced by its first side (the new upstream's, with the patches moved before)."""
    changes: dict[bytes, tuple[str, str] | None] = {}
    with TreeStore(git) as store:
        for path in git.changed_paths(pre, merged):
            raw = path.encode("utf-8", "surrogateescape")
            entry = store.find(merged, raw).entry
            if entry is None or entry[0] not in REGULAR or not is_c_family(path):
                continue
            lines = resolutions.lines_of(git.cat_file("blob", entry[1]))
            blocks = resolutions.blocks(lines)
            if not blocks:
                continue
            kept: list[bytes] = []
            at = 0
            for block in blocks:
                kept += [*lines[at : block.start], block.ours]
                at = block.end
            kept += lines[at:]
            changes[raw] = (entry[0], git.write_blob(b"".join(kept)))
        return store.edit(merged, changes) if changes else merged
