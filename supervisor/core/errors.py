"""One error tree for rsup. Each error carries its exit code; the CLI and the socket API
map it in one place (cli.main.run, surfaces.api) instead of one `except` per class.

Exit codes (README, DESIGN.md): 0 ok, 1 the operation failed, 2 usage or invalid spec,
3 rsupd unreachable.
"""

from __future__ import annotations

from rsup.workers.constants import EXIT_FAILED, EXIT_UNREACHABLE, EXIT_USAGE


class RsupError(Exception):
    """Base of every error rsup reports to a person; the message says what to do.

    `exit_code` is the class's, unless one is given for this error (a reply from rsupd
    carries the code the daemon chose). `what` goes in front of the message in the CLI."""

    exit_code = EXIT_FAILED
    what = ""

    def __init__(self, message: str = "", code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.exit_code = code

    @property
    def code(self) -> int:
        return self.exit_code


class UsageError(RsupError):
    """Bad input: a bad spec, an unknown drill, a malformed request."""

    exit_code = EXIT_USAGE


class RequestRefused(RsupError):
    """A valid request that cannot be carried out now (the job is running, unknown...)."""

    exit_code = EXIT_FAILED


class Unreachable(RsupError):
    """rsupd cannot be reached on its socket."""

    exit_code = EXIT_UNREACHABLE


class StateError(RsupError):
    """state.db cannot be opened or used; the message says how to recover."""

    exit_code = EXIT_FAILED


class IllegalTransition(RsupError):
    """A state move the lifecycle does not allow (a bug in rsupd, never user input)."""

    exit_code = EXIT_FAILED
