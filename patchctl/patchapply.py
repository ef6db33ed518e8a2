"""Applying patch bytes with `git apply`: the one home of its flags, the series-root rule,
the drift / conflict / fuzz diagnostics and a patch's identity (sha256, commit message).

Three callers, two targets: `cleanroom apply` applies to the clean room's index and work tree
(`Git.apply`), `verify` and `import` to an index of their own (`Index.apply`). All of them pass
the same flags, read git's verbose output with the same parsers, and name a failure the same
way: a conflict (PatchDoesNotApply, exit 3) says the file, hunk and reason; a hunk that would
land at an offset or need fuzz is drift (PatchDrift, exit 10); a patch whose reverse applies
is already applied (AlreadyApplied, exit 11). Fuzz is only ever diagnosed, never applied.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from patchctl.errors import AlreadyApplied, GitFailed, PatchDoesNotApply, PatchDrift
from patchctl.git import Git, Index
from patchctl.series import Patch

# (flag, why): every `git apply` patchctl runs has these.
APPLY_FLAGS: tuple[tuple[str, str], ...] = (
    ("--whitespace=nowarn", "apply.whitespace=fix would silently rewrite bytes; nowarn keeps them"),
    ("-p1", "patches carry a/ and b/ prefixes (capture pins them whatever diff.noprefix says)"),
    ("-v", "git reports offsets and reduced context, which find_drift turns into drift"),
)
# The clean room's index and work tree move together (`--index`, in Git.apply); verify and
# import apply to an index of their own (`--cached`, in Index.apply).

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
    root: str = ".", *, reverse: bool = False, check: bool = False, context: int | None = None
) -> tuple[str, ...]:
    """The flags of one `git apply` (without --index / --cached, which the target adds)."""
    mode = (*(["--check"] if check else []), *(["-R"] if reverse else []))
    fuzz = () if context is None else (f"-C{context}",)
    return (*mode, *(flag for flag, _why in APPLY_FLAGS), *fuzz, *root_flags(root))


@dataclass(frozen=True)
class Outcome:
    """How one `git apply` went: its exit status and verbose stderr."""

    code: int
    stderr: bytes

    @property
    def ok(self) -> bool:
        """True when git applied (or, with --check, would apply) the patch."""
        return self.code == 0

    def drift(self) -> list[Drift]:
        """The hunks git placed at an offset or with reduced context."""
        return find_drift(self.stderr)

    def first_error(self) -> str:
        """git's first `error:` line (else its first line), for a one-line report."""
        lines = _decode(self.stderr).strip().splitlines()
        errors = [line for line in lines if line.startswith("error: ")]
        return (errors or lines or ["git apply failed"])[0]


def apply_to_index(index: Index, data: bytes, root: str, *, reverse: bool = False) -> Outcome:
    """Apply patch bytes to an index of patchctl's own (verify, import)."""
    return Outcome(*index.apply(data, apply_flags(root, reverse=reverse)))


def check_in_tree(
    git: Git, data: bytes, root: str, *, reverse: bool = False, context: int | None = None
) -> Outcome:
    """Would the patch apply to the repository's index and work tree? Nothing is written."""
    return Outcome(
        *git.apply(data, apply_flags(root, reverse=reverse, check=True, context=context))
    )


def apply_in_tree(git: Git, data: bytes, root: str) -> None:
    """Apply the patch to the repository's index and work tree (after `check_patch`)."""
    flags = apply_flags(root)
    code, err = git.apply(data, flags)
    if code != 0:
        raise GitFailed(["git", "apply", "--index", *flags], code, err)


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


def find_drift(stderr: bytes) -> list[Drift]:
    """Offsets, reduced context (fuzz) and mode mismatches reported by `git apply -v`."""
    found: list[Drift] = []
    current, hunk = "", None
    for line in stderr.splitlines():
        if m := CHECKING.match(line):
            current, hunk = _decode(m.group(1)), None
        elif m := SUCCEEDED.match(line):
            hunk = int(m.group(1))
            if m := OFFSET.match(line):
                why = f"hunk would apply at line {int(m.group(2))} (offset {int(m.group(3))} lines)"
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
    where = f" in {file}" if file else ""
    at = f" hunk #{hunk}" if hunk else ""
    return PatchDoesNotApply(
        f"patch {patch_id} does not apply{onto}:{at}{where}: {why}",
        patch=patch_id,
        file=file,
        hunk=hunk,
        why=why,
        stderr=stderr,
        hint=hint,
    )


def _first_error(errors: list[bytes]) -> tuple[str | None, str]:
    if not errors:
        return None, "git apply failed without a message"
    first = errors[0]
    if b"No valid patches" in first:
        return None, "the patch file contains no changes"
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


# ----------------------------------------------------------------------------- the strict check


def check_patch(git: Git, patch: Patch, data: bytes, root: str, tree: str) -> None:
    """Raise unless `patch` applies exactly (no offset, no fuzz) to the repository, whose
    HEAD tree is `tree`; nothing is written."""
    if patch.post_tree and patch.post_tree == tree and patch.pre_tree != tree:
        raise already_applied(patch, "the tree equals its recorded post_tree")
    outcome = check_in_tree(git, data, root)
    if not outcome.ok:
        if _reverse_applies(git, data, root):
            raise already_applied(patch, "its reverse applies cleanly")
        fuzz = fuzz_drift(git, data, root)
        if fuzz:
            raise drift_error(patch, fuzz)
        raise conflict(patch.id, data, outcome.stderr, root)
    drift = outcome.drift()
    if drift:
        if _reverse_applies(git, data, root):
            raise already_applied(patch, "its reverse applies cleanly")
        raise drift_error(patch, drift)


def _reverse_applies(git: Git, data: bytes, root: str) -> bool:
    outcome = check_in_tree(git, data, root, reverse=True)
    return outcome.ok and not outcome.drift()


def fuzz_drift(git: Git, data: bytes, root: str) -> list[Drift]:
    """For a patch that does not apply: the hunks that would apply with fuzz (less context).

    Only a diagnosis: the check runs with `-C1` and nothing is ever applied with fuzz.
    """
    outcome = check_in_tree(git, data, root, context=FUZZ_CONTEXT)
    if not outcome.ok:
        return []
    return [d for d in outcome.drift() if d.why.startswith("would need fuzz")]
