"""Where rsup keeps things: socket, state dir, per-job and per-attempt folders."""

from __future__ import annotations

import os
import time
from pathlib import Path

import rsup.workers


def default_socket() -> Path:
    """--socket, else $RSUP_SOCKET, else the user socket, else the system one."""
    if os.environ.get("RSUP_SOCKET"):
        return Path(os.environ["RSUP_SOCKET"])
    system = Path("/run/rsup/rsupd.sock")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.geteuid() != 0:
        user = Path(runtime) / "rsup" / "rsupd.sock"
        # a user with no daemon of their own talks to the system one
        return user if user.exists() or not system.exists() else system
    return system


def default_state_dir() -> Path:
    if os.environ.get("RSUP_STATE_DIR"):
        return Path(os.environ["RSUP_STATE_DIR"])
    if os.environ.get("STATE_DIRECTORY"):  # systemd StateDirectory=
        return Path(os.environ["STATE_DIRECTORY"].split(":")[0])
    if os.geteuid() == 0:
        return Path("/var/lib/rsup")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "rsup"


class Layout:
    """Folders under one state dir."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir.resolve()

    @property
    def db(self) -> Path:
        return self.root / "state.db"

    @property
    def pylib(self) -> Path:
        return self.root / "pylib"

    def job_dir(self, job: str) -> Path:
        return self.root / "jobs" / job

    def attempt_dir(self, job: str, n: int) -> Path:
        return self.job_dir(job) / "attempts" / str(n)

    def removed_dir(self, job: str) -> Path:
        """Where a removed job's folder waits to be deleted (job names never start with '.')."""
        return self.root / "jobs" / f".removed-{job}-{time.time_ns()}"

    def removed_dirs(self) -> list[Path]:
        return sorted((self.root / "jobs").glob(".removed-*"))

    def ensure_pylib(self) -> Path:
        """A folder any interpreter can put on PYTHONPATH to import rsup.workers.

        Jobs run in their own venv, which does not have rsup installed; `rsup` is a
        namespace package there and `rsup/workers` links to this installation's workers.
        """
        target = Path(next(iter(rsup.workers.__path__))).resolve()
        link = self.pylib / "rsup" / "workers"
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() and link.resolve() == target:
            return self.pylib
        tmp = link.with_name(f".workers.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target, target_is_directory=True)
        os.replace(tmp, link)
        return self.pylib
