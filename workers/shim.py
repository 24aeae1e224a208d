"""The shim: one per attempt, between the daemon and the job.

    python -m rsup.workers.shim --attempt-dir DIR [--grace S] [--stop-signal SIG]
        [--max-log-bytes N] [--cwd DIR] [--user UID --group GID --groups G1,G2] -- ARGV...

It starts the job in a session of its own, adopts every orphan below it (child
subreaper), copies the job's stdout and stderr to output.log within a size bound,
and ends the whole process tree, leaving neither survivor nor zombie. Everything it
has to say lands in files of the attempt folder (shim.json, output.log,
rotation.json, exit.json): the daemon holds no pipe to it and may come and go.

Signals: SIGTERM, SIGINT or SIGHUP ask for a stop (the stop signal to the tree, up
to --grace seconds, then SIGKILL); SIGUSR1 forces one (SIGKILL at once).

Standard library only, Python 3.9+.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import fcntl
import json
import math
import os
import resource
import select
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from types import FrameType
from typing import Any, NoReturn

from rsup.workers import proctree
from rsup.workers.boundedlog import MIN_MAX_BYTES, BoundedLog, Rotation
from rsup.workers.constants import (
    EXIT_JSON,
    OUTPUT_LOG,
    ROTATION_JSON,
    SHIM_EXIT_BAD_ARGS,
    SHIM_EXIT_OK,
    SHIM_EXIT_SPAWN_FAILED,
    SHIM_JSON,
)

READ_CHUNK = 1024 * 1024
PIPE_SIZE = 1024 * 1024  # a bigger pipe lets a chatty job run on while we write
READS_PER_WAKE = 16  # bound a burst of reads so signals are still seen promptly
SCAN_FIRST, SCAN_MAX = 0.02, 0.5  # seconds between looks at a tree that is ending
ORPHAN_GRACE_MAX = 5.0
KILL_TIMEOUT = 10.0  # SIGKILL passes before giving up on a process stuck in the kernel
DRAIN_TIMEOUT = 2.0  # a writer outside the tree could hold the pipe open for ever
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # named only from Python 3.10
EXIT_NOT_FOUND = 127  # shell conventions for a command that cannot start
EXIT_CANNOT_EXECUTE = 126
EXIT_RESERVE = 16 * 1024  # bytes of exit.json set aside at the start, for a full disk


@dataclass(frozen=True)
class Options:
    attempt_dir: str
    grace: float
    stop_signal: int
    max_log_bytes: int
    cwd: str
    user: int | str | None
    group: int | str | None
    groups: list[int | str] | None
    argv: list[str]
    cgroup: str | None = None

    def path(self, name: str) -> str:
        return os.path.join(self.attempt_dir, name)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(SHIM_EXIT_BAD_ARGS, f"{self.prog}: error: {message}\n")


def _signal_number(text: str) -> int:
    name = text.strip().upper()
    if name.isdigit():
        return int(name)
    try:
        return int(signal.Signals[name if name.startswith("SIG") else "SIG" + name])
    except KeyError:
        raise argparse.ArgumentTypeError(f"unknown signal {text!r}") from None


def _id(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def _groups(text: str) -> list[int | str]:
    return [_id(g.strip()) for g in text.split(",") if g.strip()]


def parse_args(args: list[str]) -> Options:
    """Parse the command line; exits SHIM_EXIT_BAD_ARGS on a mistake."""
    parser = _Parser(prog="python -m rsup.workers.shim")
    parser.add_argument("--attempt-dir", required=True)
    parser.add_argument("--grace", type=float, default=30.0)
    parser.add_argument("--stop-signal", type=_signal_number, default=int(signal.SIGTERM))
    parser.add_argument("--max-log-bytes", type=int, default=256 * 1024 * 1024)
    parser.add_argument("--cwd", default=".")
    parser.add_argument("--user", type=_id)
    parser.add_argument("--group", type=_id)
    parser.add_argument("--groups", type=_groups)
    parser.add_argument("--cgroup", help="a cgroup v2 folder the shim and its job join")
    if "--" not in args:
        parser.error("the job's command must follow '--'")
    split = args.index("--")
    ns = parser.parse_args(args[:split])
    if not args[split + 1 :]:
        parser.error("empty job command after '--'")
    if not os.path.isdir(ns.attempt_dir):
        parser.error(f"--attempt-dir {ns.attempt_dir!r} is not a directory")
    if ns.grace < 0 or not math.isfinite(ns.grace):
        parser.error("--grace must be a number of seconds >= 0")
    if ns.max_log_bytes < MIN_MAX_BYTES:
        parser.error(f"--max-log-bytes must be at least {MIN_MAX_BYTES}")
    return Options(
        os.path.abspath(ns.attempt_dir), ns.grace, ns.stop_signal, ns.max_log_bytes,
        ns.cwd, ns.user, ns.group, ns.groups, args[split + 1 :], ns.cgroup,
    )  # fmt: skip


def reserve(path: str, size: int = EXIT_RESERVE) -> str | None:
    """Blocks for a record written at the end, when the disk may be full; None if none."""
    tmp = f"{path}.reserved{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b" " * size)  # JSON may end in blanks: the record overwrites them
        finally:
            os.close(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return None
    return tmp


def write_json_atomic(path: str, record: dict[str, Any], reserved: str | None = None) -> None:
    """Replace `path` with `record` so a reader sees the old file or the whole new one."""
    tmp = reserved or f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | (0 if reserved else os.O_TRUNC), 0o644)
    try:
        data = (json.dumps(record) + "\n").encode()
        view, offset = memoryview(data), 0
        while offset < len(data):  # over the blanks of a reservation: no new block needed
            offset += os.pwrite(fd, view[offset:], offset)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash
    finally:
        os.close(dir_fd)


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


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


class Phase(str, enum.Enum):
    RUNNING = "running"  # the job's main process is alive (or not yet reaped)
    STOPPING = "stopping"  # stop signal sent to the tree; waiting up to --grace
    ORPHANS = "orphans"  # the job ended; SIGTERM sent to what it left behind
    KILLING = "killing"  # SIGKILL passes until no descendant remains
    DRAINING = "draining"  # the tree is gone; reading the pipe to its end
    DONE = "done"


MOVES: dict[Phase, frozenset[Phase]] = {
    Phase.RUNNING: frozenset({Phase.STOPPING, Phase.ORPHANS, Phase.KILLING, Phase.DRAINING}),
    Phase.STOPPING: frozenset({Phase.KILLING, Phase.DRAINING}),
    Phase.ORPHANS: frozenset({Phase.KILLING, Phase.DRAINING}),
    Phase.KILLING: frozenset({Phase.DRAINING}),
    Phase.DRAINING: frozenset({Phase.DONE}),
    Phase.DONE: frozenset(),
}


def signal_name(sig: int | None) -> str | None:
    if sig is None:
        return None
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"SIG{sig}"


class Shim:
    """The job's process tree, from the spawn to the last reaped descendant."""

    def __init__(
        self, opts: Options, signals: SignalQueue, log: BoundedLog, proc: subprocess.Popen[bytes]
    ) -> None:
        self.opts, self.signals, self.log, self.proc = opts, signals, log, proc
        self.pid = os.getpid()
        self.job_pid = proc.pid
        self.phase = Phase.RUNNING
        self.deadline = math.inf  # when the current phase stops waiting
        self.next_scan, self.scan_interval = 0.0, SCAN_FIRST
        self.status: int | None = None
        self.rusage: resource.struct_rusage | None = None
        self.stop_requested = self.forced = False
        self.signalled: dict[tuple[int, int], proctree.Proc] = {}
        self.survivors: list[proctree.Proc] = []
        assert proc.stdout is not None
        self.pipe_fd: int | None = proc.stdout.fileno()
        os.set_blocking(self.pipe_fd, False)
        # Above the system's pipe-max-size this fails, and the default size still works.
        with contextlib.suppress(OSError):
            fcntl.fcntl(self.pipe_fd, F_SETPIPE_SZ, PIPE_SIZE)
        self.poller = select.poll()
        self.poller.register(self.signals.fd, select.POLLIN)
        self.poller.register(self.pipe_fd, select.POLLIN)

    # The loop ---------------------------------------------------------------------

    def run(self) -> None:
        """Copy output and answer signals until the tree is gone and the pipe drained."""
        while self.phase is not Phase.DONE:
            for fd, _ in self.poller.poll(self._timeout_ms(time.monotonic())):
                if fd == self.signals.fd:
                    self._dispatch(self.signals.take())
                elif fd == self.pipe_fd:
                    self._pump()
            self._reap()
            self._settle()

    def _timeout_ms(self, now: float) -> int | None:
        if self.phase is Phase.RUNNING:
            return None  # SIGCHLD or a stop request wakes us
        wake = self.deadline
        if self.phase in (Phase.STOPPING, Phase.ORPHANS):
            wake = min(wake, self.next_scan)
        return max(0, math.ceil(min(wake - now, 3600.0) * 1000))

    def _dispatch(self, signums: list[int]) -> None:
        for signum in signums:
            if signum == signal.SIGUSR1:
                self.handle_force()
            elif signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                self.handle_stop(signum)
            elif signum == signal.SIGCHLD:
                self.next_scan = 0.0  # a death: the tree may be empty now, look at once

    def _settle(self) -> None:
        """Advance through phases until one has to wait for time, a signal or output."""
        while True:
            before = self.phase
            self._advance(time.monotonic())
            if self.phase is before or self.phase is Phase.DONE:
                return

    def _advance(self, now: float) -> None:
        if self.phase is Phase.RUNNING and self.status is not None:
            self._job_ended(now)
        elif self.phase in (Phase.STOPPING, Phase.ORPHANS):
            if now >= self.next_scan or now >= self.deadline:
                self._check_tree(now)
        elif self.phase is Phase.KILLING:
            self._kill_all()
        elif self.phase is Phase.DRAINING and (self.pipe_fd is None or now >= self.deadline):
            self._close_pipe()
            self._move(Phase.DONE)

    def _move(self, phase: Phase, deadline: float = math.inf) -> None:
        if phase not in MOVES[self.phase]:
            raise RuntimeError(f"illegal move {self.phase.value} -> {phase.value}")
        self.phase, self.deadline = phase, deadline

    # Signals to the shim ---------------------------------------------------------

    def handle_stop(self, signum: int) -> None:
        """SIGTERM/SIGINT/SIGHUP: stop signal to the whole tree, SIGKILL after grace."""
        self.stop_requested = True
        if self.phase is not Phase.RUNNING:
            return  # already ending; a repeated request changes nothing
        sent = self._signal(proctree.living_descendants(self.pid), self.opts.stop_signal)
        self.log.note(
            f"rsup: stop requested ({signal_name(signum)}): sent"
            f" {signal_name(self.opts.stop_signal)} to {len(sent)} process(es);"
            f" any still running in {self.opts.grace:g} s get SIGKILL"
        )
        # RUNNING -> STOPPING
        self._move(Phase.STOPPING, time.monotonic() + self.opts.grace)

    def handle_force(self) -> None:
        """SIGUSR1: SIGKILL the whole tree now."""
        self.stop_requested = self.forced = True
        if self.phase in (Phase.RUNNING, Phase.STOPPING, Phase.ORPHANS):
            self.log.note("rsup: forced stop requested (SIGUSR1): killing every process")
            # RUNNING/STOPPING/ORPHANS -> KILLING
            self._move(Phase.KILLING)

    # The tree ----------------------------------------------------------------------

    def _reap(self) -> None:
        """Collect every exited child: the job's status is kept, orphans' dropped."""
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.job_pid:
                self.status, self.rusage = status, usage
                self.proc.returncode = os.waitstatus_to_exitcode(status)

    def _job_ended(self, now: float) -> None:
        left = proctree.living_descendants(self.pid)
        if not left:
            # RUNNING -> DRAINING: the usual end, nothing left behind
            self._move(Phase.DRAINING, now + DRAIN_TIMEOUT)
            return
        grace = min(self.opts.grace, ORPHAN_GRACE_MAX)
        self._signal(left, signal.SIGTERM)
        self.log.note(
            f"rsup: the job exited, leaving {len(left)} process(es) behind:"
            f" sent SIGTERM; any still running in {grace:g} s get SIGKILL"
        )
        # RUNNING -> ORPHANS
        self._move(Phase.ORPHANS, now + grace)

    def _check_tree(self, now: float) -> None:
        # Look often at first (most trees end fast), then less: /proc scans cost CPU.
        self.next_scan = now + self.scan_interval
        self.scan_interval = min(self.scan_interval * 1.5, SCAN_MAX)
        left = proctree.living_descendants(self.pid)
        if not left:
            # STOPPING/ORPHANS -> DRAINING: everyone obeyed
            self._move(Phase.DRAINING, now + DRAIN_TIMEOUT)
        elif now >= self.deadline:
            self.log.note(f"rsup: {len(left)} process(es) outlived the grace: sending SIGKILL")
            # STOPPING/ORPHANS -> KILLING
            self._move(Phase.KILLING)
        else:
            # Forked after our signal: give them the same chance, once each.
            sig = self.opts.stop_signal if self.phase is Phase.STOPPING else signal.SIGTERM
            self._signal([p for p in left if p.key not in self.signalled], sig, group=False)

    def _kill_all(self) -> None:
        if self.status is None:
            self.forced = True  # the job's own process needs SIGKILL
        killed, self.survivors = proctree.kill_all(self.pid, self.job_pid, self._reap, KILL_TIMEOUT)
        self._remember(killed)
        if self.survivors:
            pids = " ".join(str(p.pid) for p in self.survivors)
            self.log.note(
                f"rsup: process(es) {pids} survived SIGKILL for {KILL_TIMEOUT:g} s"
                " (stuck in the kernel, e.g. in a GPU driver); giving up on them"
            )
        # KILLING -> DRAINING
        self._move(Phase.DRAINING, time.monotonic() + DRAIN_TIMEOUT)

    def _signal(
        self, procs: list[proctree.Proc], sig: int, group: bool = True
    ) -> list[proctree.Proc]:
        sent = proctree.send(procs, sig, self.job_pid if group else None)
        # A stopped process acts on its signal only once continued (systemd does the same).
        proctree.send(procs, signal.SIGCONT, self.job_pid if group else None)
        self._remember(sent)
        return sent

    def _remember(self, procs: list[proctree.Proc]) -> None:
        for proc in procs:
            self.signalled.setdefault(proc.key, proc)

    # Output ------------------------------------------------------------------------

    def _pump(self) -> None:
        assert self.pipe_fd is not None
        for _ in range(READS_PER_WAKE):
            try:
                data = os.read(self.pipe_fd, READ_CHUNK)
            except BlockingIOError:
                return
            if not data:
                self._close_pipe()  # every writer is gone (or closed its stdout)
                return
            self.log.write(data)
            if len(data) < READ_CHUNK:
                return  # the pipe is empty: spare a read that would only say so

    def _close_pipe(self) -> None:
        if self.pipe_fd is not None:
            self.poller.unregister(self.pipe_fd)
            assert self.proc.stdout is not None
            self.proc.stdout.close()
            self.pipe_fd = None

    # The record ----------------------------------------------------------------------

    def exit_fields(self) -> dict[str, Any]:
        """This attempt's part of exit.json (see `exit_record`)."""
        status = self.status
        code = sig = None
        if status is not None and os.WIFEXITED(status):
            code = os.WEXITSTATUS(status)
        elif status is not None and os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
        return {
            "exit_code": code,
            "signal": sig,
            "signal_name": signal_name(sig),
            "stop_requested": self.stop_requested,
            "forced": self.forced,
            "killed_descendants": sum(1 for pid, _ in self.signalled if pid != self.job_pid),
            "rusage": _rusage(self.rusage or resource.getrusage(resource.RUSAGE_CHILDREN)),
            "job_pid": self.job_pid,
            "log_dropped_bytes": self.log.dropped,
            "survivors": [p.pid for p in self.survivors],
        }

    def abandon(self) -> None:
        """After a bug in the shim: leave no process behind."""
        self.log.note("rsup: internal error in the shim, killing the job:")
        for line in traceback.format_exc().splitlines():
            self.log.note(f"rsup:   {line}")
        killed, self.survivors = proctree.kill_all(self.pid, self.job_pid, self._reap, KILL_TIMEOUT)
        self._remember(killed)


def _rusage(usage: resource.struct_rusage) -> dict[str, float]:
    return {"utime": usage.ru_utime, "stime": usage.ru_stime, "maxrss_kb": usage.ru_maxrss}


def exit_record(started: float, clock_started: float, **fields: Any) -> dict[str, Any]:
    """exit.json: every key always present, `fields` filling in what is known."""
    record: dict[str, Any] = {
        "exit_code": None, "signal": None, "signal_name": None,
        "stop_requested": False, "forced": False, "killed_descendants": 0,
        "started": started, "ended": time.time(),
        "duration": time.monotonic() - clock_started,
        "rusage": {"utime": 0.0, "stime": 0.0, "maxrss_kb": 0},
        "job_pid": None, "spawn_error": None, "log_dropped_bytes": 0, "survivors": [],
    }  # fmt: skip
    record.update(fields)
    return record


def shim_record(opts: Options, job_pid: int, started: float) -> dict[str, Any]:
    """shim.json: who to look for after a daemon restart, with pid-reuse guards."""
    pid = os.getpid()
    return {
        "shim_pid": pid,
        "shim_start_time": proctree.start_time(pid),
        "job_pid": job_pid,
        "job_start_time": proctree.start_time(job_pid),
        "started": started,
        "argv": opts.argv,
        "cwd": os.path.abspath(opts.cwd),
    }


def join_cgroup(opts: Options) -> str | None:
    """Move the shim into the attempt's cgroup before the job starts, so the job and
    everything it forks (setsid'ed or not) is in it; the reason when that failed."""
    if opts.cgroup is None:
        return None
    try:
        with open(os.path.join(opts.cgroup, "cgroup.procs"), "w") as procs:
            procs.write(f"{os.getpid()}\n")
    except OSError as exc:
        return f"rsup: could not join cgroup {opts.cgroup} ({exc}); the tree kill remains"
    return None


def spawn(opts: Options) -> subprocess.Popen[bytes]:
    """Start the job in a session of its own, stdout and stderr into one pipe."""
    ids: dict[str, Any] = {}
    if opts.user is not None:
        ids["user"] = opts.user
    if opts.group is not None:
        ids["group"] = opts.group
    if opts.groups is not None:
        ids["extra_groups"] = opts.groups  # also when empty: drop our own groups
    return subprocess.Popen(
        opts.argv, cwd=opts.cwd, start_new_session=True, close_fds=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **ids,
    )  # fmt: skip


def open_log(opts: Options) -> BoundedLog:
    """output.log, continuing the rotation count of an earlier shim on the same attempt."""
    rotation_path = opts.path(ROTATION_JSON)
    prior = _read_json(rotation_path)

    def on_rotate(rotation: Rotation) -> None:
        write_json_atomic(rotation_path, rotation.as_json())

    return BoundedLog(
        opts.path(OUTPUT_LOG),
        opts.max_log_bytes,
        on_rotate,
        generation=int(prior.get("generation", 0)),
        dropped_total=int(prior.get("dropped_bytes_total", 0)),
    )


def spawn_failed(
    opts: Options, log: BoundedLog, exc: BaseException, started: float, reserved: str | None
) -> int:
    """Record a job that could not even start, with the exit code a shell would give."""
    log.note(f"rsup: cannot start job: {exc}")
    log.note(f"rsup: the command was {opts.argv!r}, in {os.path.abspath(opts.cwd)!r}")
    code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_CANNOT_EXECUTE
    record = exit_record(started, time.monotonic(), exit_code=code, spawn_error=str(exc))
    write_json_atomic(opts.path(EXIT_JSON), record, reserved)
    return SHIM_EXIT_SPAWN_FAILED


def main(args: list[str] | None = None) -> int:
    """Run one attempt; returns the shim's exit status (the job's is in exit.json)."""
    opts = parse_args(sys.argv[1:] if args is None else args)
    signals = SignalQueue()  # before the spawn: a stop sent while we start is kept
    log = open_log(opts)
    problem = proctree.set_child_subreaper()
    if problem is not None:
        log.note(f"rsup: warning: cannot adopt orphans ({problem}); some may outlive the job")
    trouble = join_cgroup(opts)
    if trouble is not None:
        log.note(trouble.rstrip("\n"))
    started, clock_started = time.time(), time.monotonic()
    reserved = reserve(opts.path(EXIT_JSON))
    try:
        proc = spawn(opts)
    except (OSError, KeyError, ValueError, subprocess.SubprocessError) as exc:
        return spawn_failed(opts, log, exc, started, reserved)
    shim = Shim(opts, signals, log, proc)
    try:
        write_json_atomic(opts.path(SHIM_JSON), shim_record(opts, proc.pid, started))
        shim.run()
    except Exception:
        shim.abandon()
        raise
    finally:
        record = exit_record(started, clock_started, **shim.exit_fields())
        write_json_atomic(opts.path(EXIT_JSON), record, reserved)
    log.close()
    return SHIM_EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
