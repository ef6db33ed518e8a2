"""`patchctl ci`: the round-trip gate of a CI job or a pre-commit hook, one exit code.

Per series, in this order (the exit code is that of the first failure: the series in the
order given, and within one the checks in this order):
  series   series.yaml loads and validates (with the series it extends);
  patches  each patch file exists, hashes to the sha256 series.yaml records for it (imported
           patches), carries the header capture writes from series.yaml (captured ones), has
           hunks whose lines match their `@@` counts and that `git apply` reads; and the
           recorded trees chain (each pre_tree is the post_tree before it, the first the
           upstream tree);
  docs     the generated docs are current (what `patchctl docs --check` checks);
  apply    the pinned upstream materialized from the cache and the series applied strictly
           in its clean room (what `patchctl cleanroom apply` does);
  verify   every patch round-trips: forward, reverse, re-export byte for byte, markers (what
           `patchctl verify --all` does);
  build    optionally, the clean room built (what `patchctl build` does).
`fast` stops after docs: no upstream, no clean room, no git objects (the pre-commit hook).
Each problem becomes a Finding on the file and line a reviewer should open (findings.py),
together with the error it stands for (its exit code; the first one is raised).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from patchctl.allowlists import printable
from patchctl.errors import (
    DocsOutOfDate,
    NotFound,
    PatchctlError,
    PatchDoesNotApply,
    StaleDocs,
    VerifyFailed,
)
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.objects import scratch_repo
from patchctl.ops.build.config import BuildConfig
from patchctl.ops.ci import findings as where
from patchctl.ops.ci.findings import Finding
from patchctl.patchfmt import binary as binarypatch
from patchctl.progress import Progress
from patchctl.series.docs import render_docs
from patchctl.series.gitapply import patch_sha256
from patchctl.series.model import Series, load_series, read_patch_file, series_file
from patchctl.series.patchfile import patch_header
from patchctl.series.stack import Entry, Stack, load_stack

CHECKS = ("series", "patches", "docs", "apply", "verify", "build")
FAST_CHECKS = CHECKS[:3]


@dataclass(frozen=True)
class Failure:
    """A finding and the error it stands for (whose exit code counts)."""

    finding: Finding
    error: PatchctlError


@dataclass(frozen=True)
class CheckResult:
    """One check of one series: ok, failed (with its failures) or skipped (and why)."""

    check: str
    status: str  # "ok" | "failed" | "skipped"
    detail: str = ""
    failures: tuple[Failure, ...] = ()

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {"check": self.check, "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class SeriesGate:
    """Every check of one series."""

    series: str
    checks: tuple[CheckResult, ...]

    @property
    def failures(self) -> list[Failure]:
        """The failures in check order."""
        return [f for c in self.checks for f in c.failures]

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {
            "series": self.series,
            "ok": not self.failures,
            "checks": [c.to_json() for c in self.checks],
        }


@dataclass(frozen=True)
class GateReport:
    """What `patchctl ci` found over all its series."""

    series: tuple[SeriesGate, ...]
    fast: bool = False

    @property
    def failures(self) -> list[Failure]:
        """Every failure, series by series, check by check."""
        return [f for s in self.series for f in s.failures]

    @property
    def ok(self) -> bool:
        """True when every check of every series passed."""
        return not self.failures

    @property
    def findings(self) -> list[Finding]:
        """Every finding, series by series, check by check."""
        return [f.finding for f in self.failures]

    @property
    def exit_code(self) -> int:
        """0 when green, else the exit code of the first failure."""
        return self.failures[0].error.exit_code if self.failures else 0

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {
            "ok": self.ok,
            "exit_code": self.exit_code,
            "fast": self.fast,
            "series": [s.to_json() for s in self.series],
            "findings": [f.to_json() for f in self.findings],
        }

    def raise_if_failed(self) -> None:
        """The first failure's own error (its exit code), carrying this report as `ci`."""
        if self.failures:
            raise self.failures[0].error.attach("ci", self)


# ----------------------------------------------------------------------------- the gate


def project_series(root: Path) -> list[Path]:
    """The series of a project: every `patches/<name>/series.yaml` under `root`, by name
    (what `patchctl ci` checks when no --series is given)."""
    patches = root / "patches"
    if not patches.is_dir():
        return []
    return sorted(p.parent.relative_to(root) for p in patches.glob("*/series.yaml"))


@dataclass(frozen=True)
class GateOptions:
    """How far `patchctl ci` goes: `fast` (no upstream) or up to a build with `build`."""

    fast: bool = False
    build: BuildConfig | None = None


def run_gate(
    series_paths: Sequence[Path], options: GateOptions, progress: Progress | None = None
) -> GateReport:
    """`patchctl ci`: every check of every series (see the module docstring)."""
    gates = tuple(gate_series(path, options, progress) for path in series_paths)
    return GateReport(gates, options.fast)


def gate_series(path: Path, options: GateOptions, progress: Progress | None) -> SeriesGate:
    """The checks of one series, in order; a failed series file skips the rest, a failed
    apply skips verify and build."""
    name = where.shown_path(path)
    loaded, stack = _load(path, name)
    checks = [loaded]
    wanted = FAST_CHECKS if options.fast else CHECKS if options.build else CHECKS[:-1]
    if stack is None:
        checks += [_skipped(c, "series.yaml did not load") for c in wanted[1:]]
        return SeriesGate(name, tuple(checks))
    checks.append(check_patches(stack, name))
    checks.append(check_docs_current(stack.series, name))
    if options.fast:
        return SeriesGate(name, tuple(checks))
    applied = check_apply(stack, name, progress)
    checks.append(applied)
    if applied.status != "ok":
        checks += [_skipped(c, "the series did not apply") for c in wanted[4:]]
        return SeriesGate(name, tuple(checks))
    verified = check_verify(stack, name, progress)
    checks.append(verified)
    if options.build is not None:
        checks.append(check_build(stack, name, options.build, progress))
    return SeriesGate(name, tuple(checks))


def _skipped(check: str, why: str) -> CheckResult:
    return CheckResult(check, "skipped", why)


def _result(check: str, failures: Sequence[Failure], passed: str = "") -> CheckResult:
    """The check's result: ok with `passed`, or failed naming its first problem."""
    if not failures:
        return CheckResult(check, "ok", passed)
    first = failures[0].finding
    more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
    return CheckResult(check, "failed", f"{first.path}:{first.line}{more}", tuple(failures))


def _failure(
    name: str, check: str, path: Path, line: int, error: PatchctlError, patch: str | None = None
) -> Failure:
    message = printable(error.one_line())
    finding = Finding(name, check, where.shown_path(path), line, message, error.exit_code, patch)
    return Failure(finding, error)


# ----------------------------------------------------------------------------- series


def _load(path: Path, name: str) -> tuple[CheckResult, Stack | None]:
    """The series and its stack, or the failed check naming series.yaml."""
    try:
        series = load_series(path, check_files=False)
        stack = load_stack(series)
    except PatchctlError as exc:
        file = getattr(exc, "path", None) or series_file(path)
        return _result("series", [_failure(name, "series", Path(file), 1, exc)]), None
    count = len(stack.entries)
    return CheckResult("series", "ok", f"{count} patch(es)"), stack


# ----------------------------------------------------------------------------- patches


def check_patches(stack: Stack, name: str) -> CheckResult:
    """The checks that need no upstream: files, recorded sha256, headers, hunks, the chain
    of recorded trees."""
    failures: list[Failure] = []
    with scratch_repo([]) as git:
        for entry in stack.entries:
            failures += _check_entry(git, entry, name)
    failures += _check_chain(stack, name)
    return _result("patches", failures, f"{len(stack.entries)} patch file(s) well-formed")


def _check_entry(git: Git, entry: Entry, name: str) -> list[Failure]:
    """The problems of one patch file, each on its line."""
    patch, path = entry.patch, entry.file
    if not path.is_file():
        missing = NotFound(
            f"patch {patch.id}: {patch.file} does not exist",
            hint=f"capture it (patchctl capture {patch.id}) or remove its entry",
        )
        line = where.entry_line(_text(entry.series.path), patch.id)
        return [_failure(name, "patches", entry.series.path, line, missing, patch.id)]
    try:
        data = read_patch_file(path)
    except PatchctlError as exc:  # over the size limit, unreadable
        line = where.entry_line(_text(entry.series.path), patch.id)
        return [_failure(name, "patches", entry.series.path, line, exc, patch.id)]
    found: list[Failure] = []
    if patch.sha256 is not None and patch_sha256(data) != patch.sha256:
        error = VerifyFailed(
            f"patch {patch.id}: {patch.file} has sha256 {patch_sha256(data)}, series.yaml "
            f"records {patch.sha256}",
            hint="restore the file's bytes, or refresh/import it again so series.yaml follows",
        )
        found.append(_failure(name, "patches", path, 1, error, patch.id))
    if not patch.imported:
        found += _check_captured(data, entry, name)
    if not found:
        found += _check_readable(git, data, entry, name)
    return found


def _check_captured(data: bytes, entry: Entry, name: str) -> list[Failure]:
    """A patch capture wrote: the header series.yaml gives, and hunks as git writes them."""
    patch, path = entry.patch, entry.file
    found = []
    header = patch_header(patch)
    if not data.startswith(header):
        line = where.first_differing_line(header, data)
        error = VerifyFailed(
            f"patch {patch.id}: line {line} of the header differs from what series.yaml gives "
            "(title, Upstream-Status, Origin)",
            hint=f"recapture it (patchctl capture {patch.id}) or set series.yaml back",
        )
        found.append(_failure(name, "patches", path, line, error, patch.id))
    problem = where.read_patch(data).problem
    if problem is not None:
        line, why = problem
        error = VerifyFailed(
            f"patch {patch.id}: line {line}: {why}",
            hint=f"restore the file, or recapture it (patchctl capture {patch.id})",
        )
        found.append(_failure(name, "patches", path, line, error, patch.id))
    return found


def _check_readable(git: Git, data: bytes, entry: Entry, name: str) -> list[Failure]:
    """`git apply` can read the patch (a corrupt one is refused with its line)."""
    refused = binarypatch.oversized(data)
    code, err = (1, refused.encode() + b"\n") if refused is not None else git.read_patch(data)
    if code == 0:
        return []
    reason = err.decode("utf-8", "backslashreplace").strip().splitlines()
    why = reason[0].removeprefix("error: ") if reason else "git apply cannot read it"
    error = PatchDoesNotApply(
        f"patch {entry.id}: {why}",
        patch=entry.id,
        why=why,
        hint=f"restore the file, or recapture it (patchctl capture {entry.id})",
    )
    line = where.line_in_patch(data, why, entry.root)
    return [_failure(name, "patches", entry.file, line, error, entry.id)]


def _check_chain(stack: Stack, name: str) -> list[Failure]:
    """Each recorded pre_tree is the recorded post_tree before it (the upstream tree for the
    first patch of a series); the first own patch of an extending series starts from a
    composed tree, which only the full check computes."""
    found = []
    for series in ([stack.base] if stack.base is not None else []) + [stack.series]:
        before = series.upstream.tree
        if series is stack.series and stack.base is not None:
            before = None
        for patch in series.patches:
            if before is not None and patch.pre_tree is not None and patch.pre_tree != before:
                error = VerifyFailed(
                    f"patch {patch.id}: recorded pre_tree {patch.pre_tree} is not the tree "
                    f"before it ({before})",
                    hint="the pin or the order changed: `patchctl rebase` or recapture it",
                )
                line = where.entry_line(_text(series.path), patch.id)
                found.append(_failure(name, "patches", series.path, line, error, patch.id))
            before = patch.post_tree
    return found


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


# ----------------------------------------------------------------------------- docs


def check_docs_current(series: Series, name: str) -> CheckResult:
    """The generated docs, rendered in memory, against the committed ones."""
    try:
        rendered = render_docs(series)
    except PatchctlError as exc:
        return _result("docs", [_failure(name, "docs", series.path, 1, exc)])
    failures = []
    for path, data in rendered.items():
        current = path.read_bytes() if path.is_file() else b""
        if current == data:
            continue
        line = where.first_differing_line(data, current)
        error: StaleDocs = DocsOutOfDate([path])
        failures.append(_failure(name, "docs", path, line, error))
    return _result("docs", failures, f"{len(rendered)} generated doc(s) current")


# ----------------------------------------------------------------------------- apply


def check_apply(stack: Stack, name: str, progress: Progress | None) -> CheckResult:
    """`cleanroom apply` of the whole series into its default clean room."""
    from patchctl.ops.cleanroom.apply import cleanroom_apply

    try:
        report = cleanroom_apply(stack.series.path, None, None, False, progress)
    except PatchctlError as exc:
        return _result("apply", [_apply_failure(stack, name, exc)])
    return CheckResult("apply", "ok", f"{len(report.applied)} patch(es) applied strictly")


def _apply_failure(stack: Stack, name: str, exc: PatchctlError) -> Failure:
    """An apply error on the patch file and hunk it names, else on series.yaml."""
    if isinstance(exc, PatchDoesNotApply) and exc.patch is not None:
        try:
            entry = stack.entry(exc.patch)
        except NotFound:
            entry = None
        data = None if entry is None else _read(entry)
        if entry is not None and data is not None:
            line = _conflict_line(data, exc, entry.root)
            return _failure(name, "apply", entry.file, line, exc, entry.id)
    return _failure(name, "apply", stack.series.path, 1, exc)


def _conflict_line(data: bytes, exc: PatchDoesNotApply, root: str) -> int:
    if exc.file is not None:
        return where.hunk_line(data, exc.file, exc.hunk, root)
    return where.line_in_patch(data, exc.why or "", root)


# ----------------------------------------------------------------------------- verify


def check_verify(stack: Stack, name: str, progress: Progress | None) -> CheckResult:
    """`verify --all` against the clean room `apply` just made (docs are the docs check's)."""
    from patchctl.ops.verify import verify_stack
    from patchctl.room.cleanroom import open_cleanroom

    try:
        room = open_cleanroom(stack.series.dir, None)
        report = verify_stack(stack, [room.path], None, progress, room.base_tree())
    except PatchctlError as exc:
        return _result("verify", [_failure(name, "verify", stack.series.path, 1, exc)])
    failures = []
    for patch in report.patches:
        for step in patch.steps:
            if not step.ok:
                failures.append(_step_failure(stack, name, patch.id, step.step, step.detail))
    return _result("verify", failures, f"{len(report.patches)} patch(es) round-trip")


def _step_failure(stack: Stack, name: str, pid: str, step: str, detail: str) -> Failure:
    """A failed verify step on its line: the chain on series.yaml's entry, the others in
    the patch file."""
    entry = stack.entry(pid)
    error = VerifyFailed(
        f"verify failed: patch {pid}, step {step}: {detail}",
        hint="recapture the patch in the clean room (patchctl capture ID) or fix its file",
    )
    data = None if step == "chain" else _read(entry)
    if data is None:
        line = where.entry_line(_text(entry.series.path), pid)
        return _failure(name, "verify", entry.series.path, line, error, pid)
    line = where.line_in_patch(data, detail, entry.root)
    return _failure(name, "verify", entry.file, line, error, pid)


def _read(entry: Entry) -> bytes | None:
    """The patch file's bytes, or None when it cannot be read (then series.yaml is named)."""
    try:
        return read_patch_file(entry.file)
    except (PatchctlError, OSError):
        return None


# ----------------------------------------------------------------------------- build


def check_build(
    stack: Stack, name: str, config: BuildConfig, progress: Progress | None
) -> CheckResult:
    """`patchctl build` of the clean room (a failure names its log)."""
    from patchctl.ops.build.run import build_cleanroom

    try:
        outcome = build_cleanroom(stack.series.path, None, config, progress=progress)
    except PatchctlError as exc:
        return _result("build", [_failure(name, "build", stack.series.path, 1, exc)])
    result = outcome.result
    detail = "" if result is None else f"built in {result.build_dir}"
    return CheckResult("build", "ok", detail)
