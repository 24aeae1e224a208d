"""What the bench scripts share: a real rsupd in a temp dir, job submission, percentiles.

Not a bench itself (`make bench` runs bench_*.py only). Progress goes to stderr; each
bench prints its one JSON document on stdout.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
from rsup.supervisor.cli.client import Client  # noqa: E402
from rsup.supervisor.core.spec import load_spec  # noqa: E402

from tests.conftest import FIXTURES, Rsupd, kill_leftovers, wait_for, write_spec  # noqa: E402

__all__ = ["FIXTURES", "REPO", "Bench", "log", "machine", "read_float", "summary", "wait_until"]

CLIENT_TIMEOUT = 120.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def wait_until(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.005) -> Any:
    """conftest.wait_for at a benchmark's pace."""
    return wait_for(cond, timeout, what, every)


def percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks; `ordered` is sorted and not empty."""
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary(values: Sequence[float], digits: int = 2) -> dict[str, Any]:
    """n, min, p50, p90, p99, max and mean of `values` (milliseconds, usually)."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    stats = {
        "min": ordered[0],
        "p50": percentile(ordered, 0.5),
        "p90": percentile(ordered, 0.9),
        "p99": percentile(ordered, 0.99),
        "max": ordered[-1],
        "mean": sum(ordered) / len(ordered),
    }
    return {"n": len(ordered), **{k: round(v, digits) for k, v in stats.items()}}


def machine() -> dict[str, Any]:
    """Where the figures were taken; other load on the machine skews them."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
    }


def read_float(path: Path) -> float | None:
    """A timestamp a job wrote, once it is complete (jobs write it with one write)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


class Bench:
    """A temp dir with a real rsupd in it; `with Bench() as b:` cleans everything up."""

    def __init__(self, prefix: str) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.jobs = self.root / "jobs"
        self.jobs.mkdir()
        self.daemon = Rsupd(self.root)
        self.client = Client(self.daemon.socket, timeout=CLIENT_TIMEOUT)

    def __enter__(self) -> Bench:
        signal.signal(signal.SIGTERM, _raise_exit)
        log(f"starting rsupd in {self.root}")
        self.daemon.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int:
        assert self.daemon.proc is not None
        return self.daemon.proc.pid

    def process(self) -> psutil.Process:
        return psutil.Process(self.pid)

    def script(self, name: str, text: str) -> Path:
        """Write a job script into the temp dir."""
        path = self.root / name
        path.write_text(text)
        return path

    def submit(self, name: str, command: list[str], **extra: Any) -> dict[str, Any]:
        """Submit a job as `rsup start` does (spec file, load_spec, JSON), minus the CLI."""
        extra.setdefault("device", "cpu")
        extra.setdefault("probe", {"enabled": False})
        spec = load_spec(write_spec(self.jobs, name, command, **extra))
        return dict(self.client.call("start", spec=spec.model_dump(mode="json")))

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.client.call("status", name=name)[0])

    def events(self, name: str, after: int = 0) -> list[dict[str, Any]]:
        return list(self.client.call("events", name=name, after=after))

    def attempt_dir(self, name: str, n: int) -> Path:
        return self.daemon.state / "jobs" / name / "attempts" / str(n)

    def stop_all(self) -> None:
        self.client.call("stop", all=True, force=True, wait=True)

    def close(self) -> None:
        proc = self.daemon.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(Exception):
                self.stop_all()
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(15)
        kill_leftovers(self.daemon.state)
        shutil.rmtree(self.root, ignore_errors=True)
        log("cleaned up")
