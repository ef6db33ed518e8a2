"""The one error hierarchy of patchctl: each class carries the process exit code.

The core raises these and never prints or exits; `cli/app.py` is the only place that turns
them into a one-line message on stderr and an exit status (see docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Protocol

EXIT_OK = 0
EXIT_USAGE = 2  # raised by typer/click itself
EXIT_INTERNAL = 4  # a bug: the handler prints a traceback under --debug
EXIT_INTERRUPTED = 130


class JsonReport(Protocol):
    """A report an error carries into its `--json` form (verify's VerifyReport)."""

    def to_json(self) -> dict[str, object]: ...


class PatchctlError(Exception):
    """A failure the user can act on: `message` says what happened, `hint` what to do."""

    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.attached: dict[str, JsonReport] = {}

    def attach(self, name: str, report: JsonReport) -> PatchctlError:
        """Carry `report` into this error's `--json` form as `name` (`patchctl ci` attaches
        its whole report to the first failure it found, whose exit code it exits with)."""
        self.attached[name] = report
        return self

    def __str__(self) -> str:
        return self.message

    def one_line(self) -> str:
        """The message and hint on one line (newlines folded), for stderr."""
        text = self.message if self.hint is None else f"{self.message} (hint: {self.hint})"
        return " ".join(text.split())

    def details(self) -> dict[str, object]:
        """Extra structured fields for `--json` output; subclasses add theirs."""
        return {}

    def to_json(self) -> dict[str, object]:
        """The error as a JSON-ready mapping with a stable `error` kind and exit code."""
        return {
            "error": type(self).__name__,
            "exit_code": self.exit_code,
            "message": self.message,
            "hint": self.hint,
            **self.details(),
            **{name: report.to_json() for name, report in self.attached.items()},
        }


class SeriesChanged(PatchctlError):
    """series.yaml changed on disk while a command that writes it was working (a hand edit)."""


class NothingToCapture(PatchctlError):
    """The working tree equals the tree before the patch: there is no patch to write."""


class SdistError(PatchctlError):
    """An sdist cannot be exported as asked (its version cannot be marked, a submodule, ...)."""


class PatchDoesNotApply(PatchctlError):
    """A patch conflicts with the tree it is applied to."""

    exit_code = 3

    def __init__(
        self,
        message: str,
        *,
        patch: str | None = None,
        file: str | None = None,
        hunk: int | None = None,
        why: str | None = None,
        stderr: bytes = b"",
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.patch = patch
        self.file = file
        self.hunk = hunk
        self.why = why
        self.stderr = stderr

    def details(self) -> dict[str, object]:
        return {"patch": self.patch, "file": self.file, "hunk": self.hunk, "why": self.why}


class ConflictsLeft(PatchDoesNotApply):
    """`rebase --continue` refused: conflict markers are still in the work tree; names every
    file, every marker line and every conflict block left, not only the first."""

    def __init__(
        self, message: str, *, patch: str, left: list[dict[str, object]], hint: str
    ) -> None:
        first = left[0]["file"] if left else None
        super().__init__(
            message, patch=patch, file=str(first), why="unresolved conflict", hint=hint
        )
        self.left = left

    def details(self) -> dict[str, object]:
        return {**super().details(), "left": self.left}


class RebaseStopped(PatchDoesNotApply):
    """A rebase stopped at a patch that needs the user (a conflict, or a patch that became
    empty); carries the whole rebase report, so `--json` prints one document."""

    def __init__(self, message: str, *, report: JsonReport, patch: str, hint: str) -> None:
        super().__init__(message, patch=patch, hint=hint)
        self.report = report

    def details(self) -> dict[str, object]:
        return {**super().details(), "report": self.report.to_json()}


class ConfigError(PatchctlError):
    """series.yaml (or another config file) is invalid; names the file and the key."""

    exit_code = 5

    def __init__(
        self,
        message: str,
        *,
        path: Path | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> None:
        where = "" if path is None else f"{path}: "
        where += "" if key is None else f"{key}: "
        super().__init__(where + message, hint=hint)
        self.path = path
        self.key = key

    def details(self) -> dict[str, object]:
        return {"path": None if self.path is None else str(self.path), "key": self.key}


class SplitRefused(ConfigError):
    """ConfigError (exit 5): a `split` request that cannot be carried out as given (an unknown
    pattern, a file claimed twice, an empty part, ...), refused before any write."""


class ChecksumMismatch(PatchctlError):
    """A downloaded or archived upstream does not have the pinned sha256."""

    exit_code = 6


class UnsafeArchive(PatchctlError):
    """An archive member would escape the extraction directory or is a device/fifo."""

    exit_code = 7


class DirtyTree(PatchctlError):
    """Refusing to touch a tree with unsaved work."""

    exit_code = 8


class GitFailed(PatchctlError):
    """A git command failed unexpectedly."""

    exit_code = 9

    def __init__(
        self,
        cmd: Sequence[str],
        returncode: int,
        stderr: bytes,
        *,
        hint: str | None = None,
    ) -> None:
        first = stderr.decode("utf-8", "backslashreplace").strip().splitlines()
        reason = first[0] if first else "no error output"
        shown = " ".join(cmd)
        super().__init__(f"`{shown}` failed with exit code {returncode}: {reason}", hint=hint)
        self.cmd = tuple(cmd)
        self.returncode = returncode
        self.stderr = stderr

    def details(self) -> dict[str, object]:
        return {"cmd": list(self.cmd), "returncode": self.returncode}


class PatchDrift(PatchDoesNotApply):
    """A hunk would need an offset or fuzz: the base is not the one the patch was made on."""

    exit_code = 10


class AlreadyApplied(PatchDoesNotApply):
    """The patch is already present in the tree (its reverse applies cleanly)."""

    exit_code = 11


class VerifyFailed(PatchctlError):
    """Round-trip verification found a difference."""

    exit_code = 12


class PatchChanged(VerifyFailed):
    """A patch file's bytes differ from the sha256 series.yaml records for it (exit 12)."""


class ResolutionInvalid(VerifyFailed):
    """A recorded conflict resolution that does not read, hash or belong where it is (exit 12)."""


class RoundTripFailed(VerifyFailed):
    """VerifyFailed (exit 12) carrying the whole report, so `--json` prints one document."""

    def __init__(self, message: str, *, report: JsonReport, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.report = report

    def details(self) -> dict[str, object]:
        return {"report": self.report.to_json()}


class BuildFailed(PatchctlError):
    """The compiler or build system failed."""

    exit_code = 13


class BuildStepFailed(BuildFailed):
    """A build step exited non-zero; carries the log path and the relevant excerpt."""

    def __init__(
        self,
        message: str,
        *,
        step: str,
        returncode: int,
        log: Path,
        excerpt: str,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.step = step
        self.returncode = returncode
        self.log = log
        self.excerpt = excerpt

    def details(self) -> dict[str, object]:
        return {
            "step": self.step,
            "returncode": self.returncode,
            "log": str(self.log),
            "excerpt": self.excerpt,
        }


class PrefixFailed(BuildFailed):
    """BuildFailed (exit 13) from `check-prefixes`: a prefix of the series did not apply,
    build or pass the command; carries the whole report, so `--json` prints one document."""

    def __init__(self, message: str, *, report: JsonReport, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.report = report

    def details(self) -> dict[str, object]:
        return {"report": self.report.to_json()}


class ToolchainMissing(PatchctlError):
    """A required tool (cosmocc, nvcc, cmake, ...) is not installed."""

    exit_code = 14


class NotFound(PatchctlError):
    """A file, patch, clean room or id that must exist does not."""

    exit_code = 15


class StaleDocs(PatchctlError):
    """Generated docs are out of date."""

    exit_code = 16


class DocsOutOfDate(StaleDocs):
    """StaleDocs (exit 16) naming the stale files (also in `--json` details)."""

    def __init__(self, stale: list[Path], extra: dict[str, object] | None = None) -> None:
        super().__init__(
            f"generated docs are out of date: {', '.join(map(str, stale))}",
            hint="run `patchctl docs` and commit the result",
        )
        self.stale = stale
        self.extra = extra or {}

    def details(self) -> dict[str, object]:
        return {"stale": [str(p) for p in self.stale], **self.extra}


ALL_ERRORS: tuple[type[PatchctlError], ...] = (
    PatchctlError,
    PatchDoesNotApply,
    ConfigError,
    ChecksumMismatch,
    UnsafeArchive,
    DirtyTree,
    GitFailed,
    PatchDrift,
    AlreadyApplied,
    VerifyFailed,
    BuildFailed,
    ToolchainMissing,
    NotFound,
    StaleDocs,
)
