"""Run the staged GPU probe as a child and enforce a timeout per stage (rsupd's side).

The probe (``python -m rsup.workers.probe``) runs in the job's interpreter, in its own
process group, and announces each stage on a JSON line. Lines are read as they come on the
event loop, so a hung GPU costs rsupd nothing. A stage's clock starts at its start line;
when it overruns, or the probe dies, the whole process group gets SIGKILL (DataLoader
workers included) and the report says which stage, how, and what stderr said last.

This module never imports torch.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsup.supervisor.effects.paths import Layout
from rsup.supervisor.probe.config import ProbeConfigError as ProbeConfigError
from rsup.supervisor.probe.config import ProbeTimeouts, load_timeouts
from rsup.supervisor.probe.config import parse_timeout_overrides as parse_timeout_overrides
from rsup.supervisor.probe.results import CPU as CPU
from rsup.supervisor.probe.results import FAILED as FAILED
from rsup.supervisor.probe.results import GPU as GPU
from rsup.supervisor.probe.results import GPU_WITH_REMEDIES as GPU_WITH_REMEDIES
from rsup.supervisor.probe.results import OK as OK
from rsup.supervisor.probe.results import SKIPPED as SKIPPED
from rsup.supervisor.probe.results import STATUSES, single_verdict
from rsup.supervisor.probe.results import TIMEOUT as TIMEOUT
from rsup.supervisor.probe.results import ProbeReport as ProbeReport
from rsup.supervisor.probe.results import StageResult as StageResult
from rsup.workers import proctree
from rsup.workers.probe import normalize_device, plan_stages

STDERR_KEEP = 40  # stderr lines kept while the probe runs
STDERR_QUOTE = 10  # of those, quoted in the error of a killed or crashed stage
LINE_LIMIT = 4 << 20
EXIT_GRACE = 5.0  # seconds the probe gets to exit after closing stdout
DRAIN_GRACE = 2.0  # seconds to read the rest of stderr once the group is dead
GROUP_GRACE = 10.0  # seconds the killed group gets to finish dying


# --- the child ---------------------------------------------------------------------


@functools.cache
def _private_pylib() -> Path:
    root = Path(tempfile.mkdtemp(prefix="rsup-probe-"))
    atexit.register(shutil.rmtree, root, True)
    return Layout(root).ensure_pylib()


def probe_env(env: Mapping[str, str] | None, pylib: Path | None = None) -> dict[str, str]:
    """The probe's environment: `env` (default: ours) with rsup.workers on PYTHONPATH.

    The job's interpreter need not have rsup installed; `pylib` is a folder from
    ``Layout.ensure_pylib()`` (a private temporary one when not given).
    """
    child = dict(os.environ if env is None else env)
    first = str(pylib or _private_pylib())
    child["PYTHONPATH"] = os.pathsep.join(p for p in (first, child.get("PYTHONPATH")) if p)
    return child


def probe_argv(
    python: str, device: str, stage_files: Sequence[str], only: Sequence[str], skip: Sequence[str]
) -> list[str]:
    argv = [python, "-m", "rsup.workers.probe", "--device", device, "--json"]
    for flag, values in (("--stage-file", stage_files), ("--only", only), ("--skip", skip)):
        for value in values:
            argv += [flag, value]
    return argv


class _Tracker:
    """Follows the probe's lines: which stage runs, since when, and until when it may."""

    def __init__(self, plan: list[str], timeouts: ProbeTimeouts, now: float) -> None:
        self.plan = plan
        self.timeouts = timeouts
        self.results: dict[str, StageResult] = {}
        self.current: str | None = None
        self.started = now
        self.limit = timeouts.startup
        self.deadline = now + self.limit

    def feed(self, raw: bytes, now: float) -> None:
        record = _record(raw)
        if record is None:
            return
        name = str(record["stage"])
        if name not in self.plan:
            self.plan.append(name)
        if record.get("status") == "start":
            self.current, self.started = name, now
            self.limit = self.timeouts.for_stage(name)
        else:
            self.results[name] = _result(name, record)
            self.current, self.started, self.limit = None, now, self.timeouts.startup
        self.deadline = now + self.limit

    def blame(self) -> str | None:
        """The running stage, else the next one due."""
        if self.current is not None:
            return self.current
        return next((n for n in self.plan if n not in self.results), None)

    def finish(self, last: StageResult | None) -> list[StageResult]:
        if last is not None:
            self.results[last.name] = last
        reason = f"not run: the probe ended in stage {last.name}" if last else "not run"
        return [self.results.get(n) or StageResult(n, SKIPPED, 0.0, reason) for n in self.plan]


def _record(raw: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(raw)
    except ValueError:
        return None  # not protocol: ignore
    if not isinstance(record, dict) or not isinstance(record.get("stage"), str):
        return None
    return record


def _result(name: str, record: Mapping[str, Any]) -> StageResult:
    status = record.get("status")
    details = record.get("details")
    error = record.get("error")
    return StageResult(
        name=name,
        status=status if status in STATUSES else FAILED,
        seconds=float(record.get("seconds") or 0.0),
        error=None if error is None else str(error),
        details=dict(details) if isinstance(details, dict) else {},
    )


@dataclass(frozen=True)
class _Ending:
    """How following the probe stopped: a deadline passed, or its stdout closed."""

    timed_out: bool
    stage: str | None  # the stage to blame: the running one, else the next one due
    running: bool  # whether that stage had started
    seconds: float
    limit: float
    returncode: int | None = None


async def _follow(
    proc: asyncio.subprocess.Process, tracker: _Tracker, clock: Callable[[], float]
) -> _Ending:
    assert proc.stdout is not None
    while True:
        remaining = tracker.deadline - clock()
        if remaining <= 0:
            running = tracker.current is not None
            return _Ending(True, tracker.blame(), running, clock() - tracker.started, tracker.limit)
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), remaining)
        except asyncio.TimeoutError:
            continue
        except ValueError:
            continue  # a line over LINE_LIMIT: not protocol
        if not line:
            break
        tracker.feed(line, clock())
        if tracker.blame() is None:  # every stage reported: no need to watch it exit
            return _Ending(False, None, False, 0.0, tracker.limit, proc.returncode)
    stage, seconds = tracker.current, clock() - tracker.started
    try:
        returncode: int | None = await asyncio.wait_for(proc.wait(), EXIT_GRACE)
    except asyncio.TimeoutError:
        returncode = None
    return _Ending(False, stage, stage is not None, seconds, tracker.limit, returncode)


async def _collect(stream: asyncio.StreamReader | None, tail: deque[str]) -> None:
    if stream is None:
        return
    while line := await stream.readline():
        tail.append(line.decode("utf-8", "replace").rstrip())


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the probe's process group (its pgid is its pid), reap the probe, and wait
    (bounded) until no member is left: a dying process holds its GPU memory until then."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()
    deadline = time.monotonic() + GROUP_GRACE
    while time.monotonic() < deadline and group_alive(proc.pid):
        await asyncio.sleep(0.02)


def group_alive(pgid: int) -> bool:
    """Whether process group `pgid` still has a member that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return any(p.pgrp == pgid and p.alive for p in proctree.snapshot().values())


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "it closed its output but did not exit"
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode)
        except ValueError:
            return f"killed by signal {-returncode}"
        return f"killed by {sig.name} ({signal.strsignal(sig) or sig.name})"
    return f"exited with code {returncode}"


def _ending_result(ending: _Ending, tail: Sequence[str]) -> StageResult | None:
    """The stage to blame for a timeout or an early exit (None when the probe finished)."""
    if ending.timed_out and ending.stage is None:
        return None  # every stage reported; only the exit was slow
    if ending.timed_out:
        started = "gave no result" if ending.running else "did not start"
        message = f"{started} within {ending.limit:g} s; the probe was killed"
        status, crashed = TIMEOUT, False
    elif ending.stage is not None:
        message = f"the probe died during this stage: {_describe_exit(ending.returncode)}"
        status, crashed = FAILED, True
    else:
        return None
    return StageResult(ending.stage or "?", status, round(ending.seconds, 4),
                       _with_tail(message, tail), crashed=crashed)  # fmt: skip


def _early_exit(tracker: _Tracker, ending: _Ending, tail: Sequence[str]) -> StageResult | None:
    """A probe that ended cleanly between stages but before the plan was done."""
    missing = tracker.blame()
    if ending.timed_out or ending.stage is not None or missing is None:
        return None
    message = f"the probe ended before this stage: {_describe_exit(ending.returncode)}"
    crashed = ending.returncode is None or ending.returncode < 0
    return StageResult(missing, FAILED, 0.0, _with_tail(message, tail), crashed=crashed)


def _with_tail(message: str, tail: Sequence[str]) -> str:
    if not tail:
        return message
    return message + "\nlast stderr lines:\n" + "\n".join(list(tail)[-STDERR_QUOTE:])


async def run_probe(
    device: str = "cpu",
    *,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    stage_files: Sequence[str | os.PathLike[str]] = (),
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    timeouts: ProbeTimeouts | None = None,
    overrides: Mapping[str, float] | None = None,
    pylib: Path | None = None,
) -> ProbeReport:
    """Probe `device` in a child of `python` (default: ours) with `env` (default: ours)."""
    device = normalize_device(device)
    python = python or sys.executable
    files = [os.path.abspath(f) for f in stage_files]
    limits = (timeouts or load_timeouts()).with_overrides(overrides or {})
    clock = time.monotonic
    started = clock()
    tracker = _Tracker([e.name for e in plan_stages(files, only, skip)], limits, started)
    try:
        proc = await _spawn(probe_argv(python, device, files, only, skip), probe_env(env, pylib))
    except OSError as exc:  # no such interpreter, or not executable
        stages = tracker.finish(StageResult(tracker.plan[0], FAILED, 0.0,
                                            f"cannot start {python}: {exc}"))  # fmt: skip
        return ProbeReport(device, stages, CPU, python=python)
    tail: deque[str] = deque(maxlen=STDERR_KEEP)
    reader = asyncio.create_task(_collect(proc.stderr, tail))
    try:
        ending = await _follow(proc, tracker, clock)
    finally:
        await _kill_group(proc)
        await _drain(reader)
    last = _ending_result(ending, tail) or _early_exit(tracker, ending, tail)
    stages = tracker.finish(last)
    ok = not any(s.failed for s in stages)
    return ProbeReport(device, stages, single_verdict(device, ok), python=python,
                       seconds=round(clock() - started, 4), pid=proc.pid)  # fmt: skip


async def _spawn(argv: Sequence[str], env: Mapping[str, str]) -> asyncio.subprocess.Process:
    """The probe in a new session, so that its pid is the pgid of all it starts."""
    return await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True, limit=LINE_LIMIT,
    )  # fmt: skip


async def _drain(reader: asyncio.Task[None]) -> None:
    # A grandchild that left the group may still hold stderr open: stop reading then.
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(reader, DRAIN_GRACE)


def run_probe_sync(device: str = "cpu", **options: Any) -> ProbeReport:
    """Blocking :func:`run_probe` for the CLI and tests; not for use inside a running loop."""
    return asyncio.run(run_probe(device, **options))


def format_report(report: ProbeReport) -> str:
    """The stage table (stage, result, seconds, first line of the error) and the verdict."""
    lines = [f"{'stage':<18} {'result':<8} {'seconds':>8}"]
    for s in report.stages:
        error = (s.error or "").splitlines()[0] if s.error else ""
        lines.append(f"{s.name:<18} {s.how:<8} {s.seconds:>8.2f}  {error}".rstrip())
    lines.append(f"verdict: {report.verdict} on {report.device}")
    if report.env:
        lines.append("env: " + " ".join(f"{k}={v}" for k, v in sorted(report.env.items())))
    flags = [name for name, on in sorted(report.flags.items()) if on]
    if flags:
        lines.append("flags: " + ", ".join(flags))
    return "\n".join(lines)
