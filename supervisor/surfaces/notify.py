"""sd_notify: tell systemd when rsupd is ready, what it is doing, and that its loop is alive.

Everything here is a no-op when NOTIFY_SOCKET is unset (rsupd started by hand or by tests).
The watchdog ping is an asyncio task in rsupd's own loop: a loop that is blocked stops
pinging, and systemd restarts the daemon (the jobs live on under their shims).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

import sdnotify
from rsup.supervisor.core.states import JobState

# Always shown, so a glance at `systemctl status` answers "is anything wrong?".
ALWAYS = (JobState.RUNNING, JobState.BACKOFF, JobState.FAILED)
# Shown only while some job is in them.
TRANSIENT = (JobState.QUEUED, JobState.PROBING, JobState.STARTING, JobState.STOPPING)

# Variables systemd gives rsupd alone; its jobs must not inherit them.
# PYTHONTRACEMALLOC: for rsupd's memory report; a job would crawl under it.
SYSTEMD_ONLY_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM",
                    "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "PYTHONTRACEMALLOC")  # fmt: skip


def status_line(states: Iterable[JobState]) -> str:
    """One line such as "3 running, 1 backoff, 0 failed" (plus "1 starting" and the like)."""
    counts = Counter(states)
    parts = [f"{counts[s]} {s.value}" for s in ALWAYS]
    parts += [f"{counts[s]} {s.value}" for s in TRANSIENT if counts[s]]
    return ", ".join(parts)


def watchdog_interval(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds between pings: half of WATCHDOG_USEC, or None when no watchdog is asked for."""
    env = os.environ if environ is None else environ
    pid = env.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None  # the watchdog is meant for another process (we were started by it)
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec / 2 / 1_000_000 if usec > 0 else None


def job_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """rsupd's environment without what was meant for rsupd alone (for the jobs)."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k not in SYSTEMD_ONLY_ENV}


class Notifier:
    """Datagrams to $NOTIFY_SOCKET (sdnotify handles the abstract '@' names)."""

    def __init__(self) -> None:
        self.enabled = bool(os.environ.get("NOTIFY_SOCKET"))
        self._sd = sdnotify.SystemdNotifier() if self.enabled else None
        sock = getattr(self._sd, "socket", None)
        if sock is not None:
            sock.setblocking(False)  # systemd reads at once; a full queue costs a message

    def send(self, message: str) -> None:
        if self._sd is not None:
            self._sd.notify(message)


class SystemdLink:
    """READY, STATUS, WATCHDOG, RELOADING and STOPPING for one rsupd."""

    def __init__(
        self, notifier: Notifier, states: Callable[[], Iterable[JobState]], debounce: float
    ) -> None:
        self.notifier = notifier
        self.states = states
        self.debounce = debounce
        self.interval = watchdog_interval() if notifier.enabled else None
        self.last_status: str | None = None
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start pinging the watchdog and keeping STATUS= current (only under systemd)."""
        if not self.notifier.enabled:
            return
        loop = asyncio.get_running_loop()
        if self.interval is not None:
            self._tasks.append(loop.create_task(self._watchdog(self.interval), name="watchdog"))
        self._tasks.append(loop.create_task(self._status_loop(), name="sd-status"))

    def changed(self) -> None:
        """Engine listener: some job changed state; STATUS= follows after the debounce."""
        self._dirty.set()

    def ready(self) -> None:
        self.notifier.send(f"READY=1\nSTATUS={self._status()}")

    def reloading(self) -> None:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.notifier.send(f"RELOADING=1\nMONOTONIC_USEC={usec}\nSTATUS=reloading configuration")

    def stopping(self) -> None:
        self.notifier.send("STOPPING=1\nSTATUS=stopping; the jobs keep running under their shims")

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    def _status(self) -> str:
        self.last_status = status_line(self.states())
        return self.last_status

    async def _watchdog(self, interval: float) -> None:
        while True:
            self.notifier.send("WATCHDOG=1")
            await asyncio.sleep(interval)

    async def _status_loop(self) -> None:
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.debounce)  # coalesce a burst of changes into one update
            self._dirty.clear()
            previous = self.last_status
            if self._status() != previous:
                self.notifier.send(f"STATUS={self.last_status}")
