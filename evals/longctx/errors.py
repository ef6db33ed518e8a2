"""The harness's errors: the evaluations' base (evals.errors: message + hint + exit code),
three more kinds.

Exit codes 5, 6 and 15 come from evals.errors; the harness adds 20-22.
"""

from __future__ import annotations

from evals.errors import ChecksumMismatch, ConfigError, EvalError, NotFound

__all__ = [
    "BadInput",
    "ChecksumMismatch",
    "ConfigError",
    "HarnessError",
    "NotFound",
    "ServerFailed",
    "UnsupportedFlags",
]


class HarnessError(EvalError):
    """A failure of the long-context harness the user can act on."""


class BadInput(HarnessError):
    """A file given to the harness (corpus, results, token cache) is not what it claims."""

    exit_code = 20


class ServerFailed(HarnessError):
    """llama-server did not start, died, or answered an HTTP request with an error."""

    exit_code = 21

    def __init__(self, message: str, *, log_tail: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.log_tail = log_tail

    def details(self) -> dict[str, object]:
        return {"log_tail": self.log_tail}


class UnsupportedFlags(HarnessError):
    """A method needs command-line flags that this llama-server build does not have."""

    exit_code = 22

    def __init__(self, message: str, *, flags: tuple[str, ...], hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.flags = flags

    def details(self) -> dict[str, object]:
        return {"flags": list(self.flags)}
