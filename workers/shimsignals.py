"""Signals in the shim: handlers only record them; the main loop acts on them.

Standard library only, Python 3.9+.
"""

from __future__ import annotations

import os
import signal
from types import FrameType


class SignalQueue:
    """Signals as data: handlers only record them, the main loop acts on them."""

    HANDLED = (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)

    def __init__(self) -> None:
        self.fd, self._write_fd = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._write_fd, False)
        self._pending: list[int] = []
        # The wakeup byte ends a blocking poll(); the byte is the signal number.
        signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        for sig in self.HANDLED:
            signal.signal(sig, self._record)
        # `systemctl kill -s USR2 rsupd` reaches every process of the unit, shims included;
        # a handler (not SIG_IGN, which the job would inherit) keeps the shim alive.
        signal.signal(signal.SIGUSR2, _ignore)

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self._pending.append(signum)

    def take(self) -> list[int]:
        """Signals received since the last call, each once, in order of arrival."""
        raw = b""
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except BlockingIOError:
                break
            if not chunk:
                break
            raw += chunk
        # Both sources: the pipe may overflow, and a handler may not have run yet.
        got, self._pending = self._pending, []
        return list(dict.fromkeys([*raw, *got]))


def _ignore(signum: int, frame: FrameType | None) -> None:
    pass


def signal_name(sig: int | None) -> str | None:
    if sig is None:
        return None
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"SIG{sig}"
