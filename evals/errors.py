"""The evaluations' error base: a message the user can act on, a hint, an exit code.

The shape (message + hint + exit code, a one-line form for stderr, a JSON form for ``--json``) is
the same as patchctl's, so a harness error reads like a patchctl error, but the classes are the
evaluations' own: nothing here imports patchctl. The exit codes keep the values the harness had
when it shared patchctl's table (internal error 4, config 5, checksum 6, not found 15; the
harness's own 20-22 are in ``evals.longctx.errors``).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

EXIT_INTERNAL = 4  # a bug: the message is the exception's last line

__all__ = ["EXIT_INTERNAL", "ChecksumMismatch", "ConfigError", "EvalError", "NotFound"]


class EvalError(Exception):
    """A failure the user can act on: `message` says what happened, `hint` what to do."""

    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

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
        }


class ConfigError(EvalError):
    """A setting, flag or named plan that cannot be used as given; names the file and the key."""

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


class ChecksumMismatch(EvalError):
    """A file's sha256 is not the pinned one; nothing was kept."""

    exit_code = 6


class NotFound(EvalError):
    """A named model, file or tool does not exist."""

    exit_code = 15
