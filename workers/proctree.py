"""Find and end every process below the shim, read straight from /proc.

Standard library only, Linux only. A process belongs to the tree when its chain of
parents (the ppid field of /proc/<pid>/stat) reaches the root pid; with the root a
child subreaper, orphans and double-forked daemons are reparented to it and so
stay in the tree. This is also rsup's one parser of /proc/<pid>/stat (`split_stat`,
`stat_fields`), which rsupd imports.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

PR_SET_CHILD_SUBREAPER = 36

# Exiting processes and zombies: signals no longer matter to them.
_DEAD_STATES = ("Z", "X", "x")


@dataclass(frozen=True)
class Proc:
    """One line of /proc/<pid>/stat, the fields the shim needs."""

    pid: int
    ppid: int
    pgrp: int
    state: str
    start_time: int  # field 22, clock ticks after boot: with pid, an identity

    @property
    def alive(self) -> bool:
        return self.state not in _DEAD_STATES

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start_time)


def split_stat(raw: bytes) -> list[bytes]:
    """Fields of a /proc/<pid>/stat line after the command name (which may hold spaces
    and ')'). fields[0] is the state (field 3 in proc(5)); raises ValueError when the
    line has no ')'."""
    return raw[raw.rindex(b")") + 2 :].split()


def _read_stat(pid: int) -> bytes | None:
    """The raw /proc/<pid>/stat line, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read()
    except OSError:
        return None


def stat_fields(pid: int) -> list[bytes] | None:
    """Fields of /proc/<pid>/stat after the command name (which may hold spaces); None when
    the process is gone. fields[0] is the state (field 3 in proc(5))."""
    raw = _read_stat(pid)
    return None if raw is None else split_stat(raw)


def parse_stat(pid: int, raw: bytes) -> Proc:
    """Parse a /proc/<pid>/stat line; the command name may hold spaces and ')'."""
    fields = split_stat(raw)
    # fields[0] is field 3 of proc(5): state, ppid, pgrp, ..., starttime is field 22.
    return Proc(
        pid=pid,
        ppid=int(fields[1]),
        pgrp=int(fields[2]),
        state=fields[0].decode("ascii", "replace"),
        start_time=int(fields[19]),
    )


def read_proc(pid: int) -> Proc | None:
    """The process `pid` as /proc shows it now, or None when it is gone."""
    raw = _read_stat(pid)
    if raw is None:
        return None
    try:
        return parse_stat(pid, raw)
    except (ValueError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: guards a saved pid against reuse."""
    proc = read_proc(pid)
    return None if proc is None else proc.start_time


def snapshot() -> dict[int, Proc]:
    """Every process on the machine (thread-group leaders; threads share their fate)."""
    procs: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            proc = read_proc(int(name))
            if proc is not None:
                procs[proc.pid] = proc
    return procs


def descendants(root: int, procs: dict[int, Proc] | None = None) -> list[Proc]:
    """Every process whose parent chain reaches `root` (root excluded), zombies included."""
    if procs is None:
        procs = snapshot()
    children: dict[int, list[Proc]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc)
    found: list[Proc] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def living_descendants(root: int) -> list[Proc]:
    return [p for p in descendants(root) if p.alive]


def send(procs: Iterable[Proc], sig: int, pgid: int | None) -> list[Proc]:
    """Signal process group `pgid` at once and each process outside it one by one.

    killpg reaches a member forked after our scan, which a per-pid pass would miss;
    members of the group are not signalled twice, so a handler runs once.
    Returns the processes signalled.
    """
    procs = list(procs)
    if pgid is not None and any(p.pgrp == pgid for p in procs):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for proc in procs:
        if pgid is None or proc.pgrp != pgid:
            # The pid cannot have been reused since the scan unless a parent in the
            # tree reaped it in between: a window of microseconds, accepted.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, sig)
    return procs


def kill_all(
    root: int, pgid: int | None, reap: Callable[[], None], timeout: float
) -> tuple[list[Proc], list[Proc]]:
    """SIGKILL every descendant of `root`, pass after pass, until none is left.

    Repeated passes catch processes forked while we kill. Gives up after `timeout`
    seconds (a process stuck in uninterruptible sleep, e.g. inside a GPU driver,
    cannot die). Returns (processes signalled, survivors).
    """
    deadline = time.monotonic() + timeout
    signalled: dict[tuple[int, int], Proc] = {}
    pause = 0.002
    while True:
        reap()
        alive = living_descendants(root)
        if not alive or time.monotonic() >= deadline:
            return list(signalled.values()), alive
        for proc in send(alive, signal.SIGKILL, pgid):
            signalled[proc.key] = proc
        time.sleep(pause)  # let the kernel tear them down before the next scan
        pause = min(pause * 2, 0.05)


def set_child_subreaper() -> str | None:
    """Adopt orphaned descendants (prctl PR_SET_CHILD_SUBREAPER); returns an error or None."""
    return prctl(PR_SET_CHILD_SUBREAPER, 1)


def prctl(option: int, value: int) -> str | None:
    """prctl(2) with one argument; returns an error or None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(option, value, 0, 0, 0) != 0:
            return os.strerror(ctypes.get_errno())
    except (OSError, AttributeError) as exc:
        return str(exc)
    return None
