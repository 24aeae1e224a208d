"""Shared helpers: a real rsupd in a temp dir, the real CLI, deadline waits, cleanup."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def wait_for(
    cond: Callable[[], Any],
    timeout: float = 20.0,
    what: str | Callable[[], str] = "condition",
    every: float = 0.02,
) -> Any:
    """Poll `cond` every `every` s until it returns something truthy; fail at the deadline.

    `what` may be a function, so the failure can say how things stood at that moment."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what if isinstance(what, str) else what()
            raise AssertionError(f"timed out after {timeout} s waiting for {said}")
        time.sleep(every)


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Rsupd:
    """One real rsupd process with its own state dir and socket."""

    def __init__(
        self, root: Path, env: dict[str, str] | None = None, args: list[str] | None = None
    ) -> None:
        self.root = root
        self.env = env
        self.args = args or []  # more rsupd options (--config FILE)
        self.state = root / "state"
        self.socket = root / "rsupd.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = root / "rsupd.log"

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rsup.supervisor.daemon",
                    "--state-dir",
                    str(self.state),
                    "--socket",
                    str(self.socket),
                    *self.args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(self.env or {})},
            )
        wait_for(lambda: self.cli("status", "--json").returncode == 0, 15, "rsupd to answer")

    def shutdown(self) -> None:
        """Stop every job and the daemon; then kill whatever is left of its state dir."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.cli("stop", "--all", "--force", timeout=60)
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        kill_leftovers(self.state)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(15)

    def cli(
        self, *args: str, user: int | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rsup.supervisor.cli.main", "--socket", str(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            user=user,
        )

    def status(self, name: str) -> dict[str, Any]:
        result = self.cli("status", name, "--json")
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout)[0])

    def events(self, name: str) -> list[dict[str, Any]]:
        result = self.cli("events", name, "--json")
        assert result.returncode == 0, result.stderr
        return list(json.loads(result.stdout))

    def wait_state(self, name: str, *states: str, timeout: float = 30) -> dict[str, Any]:
        return dict(
            wait_for(
                lambda: (s := self.status(name))["state"] in states and s,
                timeout,
                f"job {name} to reach {states}",
            )
        )


def write_spec(folder: Path, name: str, command: list[str], **extra: Any) -> Path:
    import yaml

    spec = {"name": name, "command": command, **extra}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def state_processes(state: Path) -> list[psutil.Process]:
    """Every process naming `state` in its command line or its RSUP_ATTEMPT_DIR."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "environ"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            env = proc.info["environ"] or {}
        except (psutil.Error, TypeError):
            continue
        if str(state) in cmdline or str(state) in env.get("RSUP_ATTEMPT_DIR", ""):
            found.append(proc)
    return found


def kill_leftovers(state: Path) -> None:
    """Kill any shim or job still alive from this test's state dir (a failed test's debris)."""
    for proc in state_processes(state):
        with contextlib.suppress(psutil.Error):
            proc.kill()


@contextlib.contextmanager
def running_rsupd(
    root: Path, env: dict[str, str] | None = None, args: list[str] | None = None
) -> Iterator[Rsupd]:
    """A started rsupd under `root`; on the way out every job, the daemon and any leftover
    process of its state dir are gone."""
    daemon = Rsupd(root, env, args)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.shutdown()


@pytest.fixture
def rsupd(tmp_path: Path) -> Iterator[Rsupd]:
    with running_rsupd(tmp_path) as daemon:
        yield daemon


@pytest.fixture
def py() -> str:
    return sys.executable


def env_without_socket() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RSUP_SOCKET", None)
    return env
