"""Wait for a process to exit without blocking the loop, child or not (pidfd)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from rsup.supervisor.effects.launch import alive_as


async def wait_exit(pid: int, started: int | None) -> None:
    """Return once `pid` (identified by its start time) has exited; reap it if it is ours."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        _reap(pid)
        return
    if not alive_as(pid, started):  # the pid was reused by someone else
        os.close(fd)
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, _settle, done)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    _reap(pid)


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


def _reap(pid: int) -> None:
    # ChildProcessError: not our child (a shim re-adopted after a restart), nothing to reap.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def signal_if_same(pid: int | None, started: int | None, sig: int) -> bool:
    """Send `sig` only if `pid` is still the process we started."""
    if pid is None or not alive_as(pid, started):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def kill_tree(pid: int | None, started: int | None) -> int:
    """Last resort when a shim is gone: SIGKILL a job's leftover process tree."""
    import psutil

    if pid is None or not alive_as(pid, started):
        return 0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(procs, timeout=5)
    return len(procs)


def kill_marked(name: str, value: str) -> int:
    """SIGKILL every process whose environment holds name=value; how many there were.

    A dead shim's adopted orphans (double-forked, setsid'ed) were reparented to init and
    left the job's tree; the variables rsupd gave the attempt still name them.
    """
    import psutil

    procs = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.pid != os.getpid() and proc.environ().get(name) == value:
                procs.append(proc)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(procs, timeout=5)
    return len(procs)


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """True if `event` was set within `timeout`.

    asyncio.wait_for can swallow a cancellation that races with its inner future
    (Python < 3.12); asyncio.wait does not, so tasks using this stay cancellable.
    """
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
    return event.is_set()


async def wait_any(events: list[asyncio.Event], timeout: float | None) -> None:
    """Return when any of `events` is set or `timeout` passes; leaves no waiter behind."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
