"""inotify on the daemon's own asyncio loop: one descriptor, no threads.

Each attempt folder being followed is one inotify watch; a change in it calls that
attempt's callbacks on the loop itself. Reading is done by the loop's reader callback, so
nothing crosses threads and nothing is created or torn down per attempt but the watch.

Where inotify cannot be had (no libc symbol, watch limit reached), `watch` returns None
and the caller keeps to its own polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import struct
import weakref
from collections.abc import Callable
from pathlib import Path

import structlog

log = structlog.get_logger("rsupd")

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

MASK = (
    IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
    | IN_DELETE_SELF
)  # fmt: skip
HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
READ_SIZE = 64 * 1024

Wake = Callable[[], None]


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1, libc.inotify_add_watch, libc.inotify_rm_watch  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


class DirWatch:
    """Folder watches for one event loop; callbacks run on that loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)  # not a strong ref: dir_watch() closes us when it goes
        self.libc = _libc()
        self.fd = -1
        self.wakes: dict[int, list[Wake]] = {}  # wd -> callbacks (one folder, many followers)
        self.warned = False
        if self.libc is not None:
            self.fd = self.libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd >= 0:
            loop.add_reader(self.fd, self._drain)
        else:
            error = os.strerror(ctypes.get_errno()) if self.libc else "no inotify in libc"
            self._warn("inotify unavailable; attempt files are polled", error=error)

    def watch(self, folder: Path, wake: Wake) -> Watch | None:
        """Call `wake` whenever something in `folder` changes; None when inotify is not to
        be had (the caller polls)."""
        if self.fd < 0 or self.libc is None:
            return None
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(folder), MASK)
        if wd < 0:  # ENOSPC (max_user_watches), ENOENT, EACCES: the caller polls instead
            self._warn("cannot watch a folder; polling it instead", folder=str(folder),
                       error=os.strerror(ctypes.get_errno()))  # fmt: skip
            return None
        wakes = self.wakes.setdefault(wd, [])  # the same folder twice gives the same wd
        wakes.append(wake)
        return Watch(self, wd, wakes, wake)

    def _warn(self, message: str, **fields: str) -> None:
        if not self.warned:  # once: a full watch table would otherwise log every attempt
            self.warned = True
            log.warning(message, **fields)

    def close(self) -> None:
        if self.fd >= 0:
            loop = self.loop()
            if loop is not None and not loop.is_closed():
                loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
        self.wakes.clear()

    def _drain(self) -> None:
        woken: dict[int, list[Wake]] = {}  # callbacks as they were when the event came
        overflow = False
        while True:
            try:
                data = os.read(self.fd, READ_SIZE)
            except (BlockingIOError, InterruptedError):
                break
            if not data:
                break
            offset = 0
            while offset + HEADER.size <= len(data):
                wd, mask, _cookie, length = HEADER.unpack_from(data, offset)
                offset += HEADER.size + length
                if mask & IN_Q_OVERFLOW:
                    overflow = True
                    continue
                if wd not in woken:
                    woken[wd] = list(self.wakes.get(wd, ()))
                if mask & IN_IGNORED:
                    self.wakes.pop(wd, None)  # the folder is gone; the kernel dropped the wd
        if overflow:  # events were lost: wake everyone, they read their files anyway
            woken.update((wd, list(wakes)) for wd, wakes in self.wakes.items())
        for wakes in woken.values():
            for wake in wakes:
                wake()


class Watch:
    """One follower's watch on a folder."""

    def __init__(self, owner: DirWatch, wd: int, wakes: list[Wake], wake: Wake) -> None:
        self.owner, self.wd, self.wakes, self.wake = owner, wd, wakes, wake

    @property
    def lost(self) -> bool:
        """The kernel dropped the watch (the folder was removed or unmounted)."""
        return self.owner.wakes.get(self.wd) is not self.wakes

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.wakes.remove(self.wake)
        owner = self.owner
        if not self.wakes and owner.wakes.get(self.wd) is self.wakes:
            del owner.wakes[self.wd]
            if owner.libc is not None and owner.fd >= 0:
                owner.libc.inotify_rm_watch(owner.fd, self.wd)  # EINVAL if already gone: fine


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, DirWatch] = (
    weakref.WeakKeyDictionary()
)


def dir_watch() -> DirWatch:
    """The running loop's DirWatch (made on first use, closed with the loop's last ref)."""
    loop = asyncio.get_running_loop()
    found = _watches.get(loop)
    if found is None:
        found = _watches[loop] = DirWatch(loop)
        weakref.finalize(loop, found.close)
    return found
