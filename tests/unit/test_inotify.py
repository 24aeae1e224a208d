"""The loop's own inotify: real kernel watches, callbacks on the loop, no threads."""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path

from rsup.supervisor.effects.inotify import DirWatch, dir_watch

DEADLINE = 5.0


async def _woken(event: asyncio.Event) -> bool:
    try:
        await asyncio.wait_for(event.wait(), DEADLINE)
    except TimeoutError:
        return False
    return True


def test_a_write_in_the_folder_wakes_every_follower_on_the_loop(tmp_path: Path) -> None:
    async def scenario() -> None:
        threads = threading.active_count()
        first, second = asyncio.Event(), asyncio.Event()
        where: list[threading.Thread] = []
        watch = dir_watch()
        assert watch is dir_watch()  # one per loop
        first_watch = watch.watch(tmp_path, first.set)
        second_watch = watch.watch(tmp_path, lambda: (where.append(threading.current_thread()),
                                                     second.set()))  # fmt: skip
        assert first_watch is not None and second_watch is not None
        (tmp_path / "output.log").write_bytes(b"a line\n")
        assert await _woken(first) and await _woken(second)
        assert where[0] is threading.main_thread()  # called on the loop's own thread
        assert threading.active_count() == threads  # and no thread was started for it

        first_watch.close()  # the other follower of the same folder keeps its watch
        first.clear(), second.clear()
        (tmp_path / "output.log").write_bytes(b"another\n")
        assert await _woken(second)
        assert not first.is_set()

        second_watch.close()
        assert watch.wakes == {}  # the kernel watch is removed with its last follower
        second_watch.close()  # twice is harmless

    asyncio.run(scenario())


def test_a_removed_folder_drops_its_watch(tmp_path: Path) -> None:
    folder = tmp_path / "attempt"
    folder.mkdir()

    async def scenario() -> None:
        woken = asyncio.Event()
        watch = dir_watch()
        lost = watch.watch(folder, woken.set)
        assert lost is not None and not lost.lost
        shutil.rmtree(folder)
        assert await _woken(woken)
        for _ in range(100):  # IN_IGNORED follows the delete event
            if not watch.wakes:
                break
            await asyncio.sleep(0.01)
        assert watch.wakes == {}
        assert lost.lost  # the monitor goes back to polling
        lost.close()  # after the kernel dropped it: no error

    asyncio.run(scenario())


def test_a_folder_that_cannot_be_watched_says_poll(tmp_path: Path) -> None:
    async def scenario() -> None:
        assert dir_watch().watch(tmp_path / "missing", lambda: None) is None

    asyncio.run(scenario())


def test_closing_releases_the_descriptor(tmp_path: Path) -> None:
    async def scenario() -> None:
        watch = DirWatch(asyncio.get_running_loop())
        fd = watch.fd
        assert fd >= 0
        watch.close()
        assert watch.fd == -1
        assert watch.watch(tmp_path, lambda: None) is None
        assert (
            not Path(f"/proc/self/fd/{fd}").exists()
            or Path(f"/proc/self/fd/{fd}").readlink().name != "anon_inode:inotify"
        )

    asyncio.run(scenario())
