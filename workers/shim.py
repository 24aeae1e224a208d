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

import contextlib
import enum
import fcntl
import math
import os
import resource
import select
import signal
import subprocess
import sys
import time
import traceback
from typing import Any

from rsup.workers import proctree
from rsup.workers.boundedlog import BoundedLog
from rsup.workers.constants import EXIT_JSON, SHIM_EXIT_OK, SHIM_JSON
from rsup.workers.shimargs import Options, parse_args
from rsup.workers.shimrecords import (
    exit_record,
    reserve,
    rusage_fields,
    shim_record,
    write_json_atomic,
)
from rsup.workers.shimsignals import SignalQueue, signal_name
from rsup.workers.shimstart import join_cgroup, open_log, spawn, spawn_failed

READ_CHUNK = 1024 * 1024
PIPE_SIZE = 1024 * 1024  # a bigger pipe lets a chatty job run on while we write
PIPE_MAX_SIZE = "/proc/sys/fs/pipe-max-size"  # the most an unprivileged F_SETPIPE_SZ gets
PUMP_MAX = 16 * READ_CHUNK  # bound a burst of copying so signals are still seen promptly
# Coalescing: after a wake that found little in the pipe, stop listening to it for REST
# seconds. A writer wakes its reader only when it writes into an empty pipe that a reader
# waits on, so a job printing line by line then writes into the pipe as cheaply as into a
# file, and the next wake moves a REST's worth of lines in one splice. A wake that found
# more than a quarter of the pipe means the job outpaces the rest: listen again at once.
# The first line after a silence still wakes the shim at once (a fatal line is not held).
REST = 0.004
SCAN_FIRST, SCAN_MAX = 0.02, 0.5  # seconds between looks at a tree that is ending
ORPHAN_GRACE_MAX = 5.0
KILL_TIMEOUT = 10.0  # SIGKILL passes before giving up on a process stuck in the kernel
DRAIN_TIMEOUT = 2.0  # a writer outside the tree could hold the pipe open for ever
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # named only from Python 3.10
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)

# rsup's own notes in output.log as it stops the tree. They name the signals rsup sends,
# never what ended the job: the harmless entry "rsup-shim-note" in signatures.yaml must
# match each of them (a unit test formats every one and reads it).
NOTE_STOP = (
    "rsup: stop requested ({got}): sent {sent} to {n} process(es);"
    " any still running in {grace:g} s get SIGKILL"
)
NOTE_FORCE = "rsup: forced stop requested (SIGUSR1): killing every process"
NOTE_ORPHANS = (
    "rsup: the job exited, leaving {n} process(es) behind:"
    " sent SIGTERM; any still running in {grace:g} s get SIGKILL"
)
NOTE_OUTLIVED = "rsup: {n} process(es) outlived the grace: sending SIGKILL"
NOTE_STUCK = (
    "rsup: process(es) {pids} survived SIGKILL for {timeout:g} s"
    " (stuck in the kernel, e.g. in a GPU driver); giving up on them"
)
NOTES = (NOTE_STOP, NOTE_FORCE, NOTE_ORPHANS, NOTE_OUTLIVED, NOTE_STUCK)


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
        self.pipe_size = grow_pipe(self.pipe_fd)
        self.resting_until: float | None = None  # not listening to the pipe until then
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
            if self.resting_until is not None and time.monotonic() >= self.resting_until:
                self._pump()
            self._reap()
            self._settle()

    def _timeout_ms(self, now: float) -> int | None:
        rest = math.inf if self.resting_until is None else self.resting_until
        if self.phase is Phase.RUNNING and rest == math.inf:
            return None  # SIGCHLD, a stop request or output wakes us
        wake = min(self.deadline, rest)
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
            NOTE_STOP.format(
                got=signal_name(signum),
                sent=signal_name(self.opts.stop_signal),
                n=len(sent),
                grace=self.opts.grace,
            )
        )
        # RUNNING -> STOPPING
        self._move(Phase.STOPPING, time.monotonic() + self.opts.grace)

    def handle_force(self) -> None:
        """SIGUSR1: SIGKILL the whole tree now."""
        self.stop_requested = self.forced = True
        if self.phase in (Phase.RUNNING, Phase.STOPPING, Phase.ORPHANS):
            self.log.note(NOTE_FORCE)
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
        self.log.note(NOTE_ORPHANS.format(n=len(left), grace=grace))
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
            self.log.note(NOTE_OUTLIVED.format(n=len(left)))
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
            self.log.note(NOTE_STUCK.format(pids=pids, timeout=KILL_TIMEOUT))
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
        """Move what the pipe holds into output.log, then rest or listen again."""
        if self.pipe_fd is None:
            self.resting_until = None
            return
        moved = 0
        while moved < PUMP_MAX:
            try:
                n = self.log.pump(self.pipe_fd, READ_CHUNK)
            except BlockingIOError:
                break  # the pipe is empty
            if not n:
                self._close_pipe()  # every writer is gone (or closed its stdout)
                return
            moved += n
            if n < READ_CHUNK:
                break  # it had less: do not chase a job's every write with tiny moves
        if 0 < moved < self.pipe_size // 4:
            if self.resting_until is None:
                self.poller.modify(self.pipe_fd, 0)
            self.resting_until = time.monotonic() + REST
        elif self.resting_until is not None:
            self.poller.modify(self.pipe_fd, select.POLLIN)
            self.resting_until = None

    def _close_pipe(self) -> None:
        self.resting_until = None
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
            "rusage": rusage_fields(self.rusage or resource.getrusage(resource.RUSAGE_CHILDREN)),
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


def grow_pipe(fd: int) -> int:
    """Make the job's pipe PIPE_SIZE (or the system's pipe-max-size, if lower) so a
    chatty job runs on while the shim rests; the size it has (failures are harmless)."""
    sizes = [PIPE_SIZE]
    with contextlib.suppress(OSError, ValueError), open(PIPE_MAX_SIZE) as f:
        sizes.append(min(PIPE_SIZE, int(f.read())))
    for size in sizes:
        try:
            return int(fcntl.fcntl(fd, F_SETPIPE_SZ, size))
        except OSError:
            continue
    try:
        return int(fcntl.fcntl(fd, F_GETPIPE_SZ))
    except OSError:
        return 64 * 1024  # Linux's default


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
