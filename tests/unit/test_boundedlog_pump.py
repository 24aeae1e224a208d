"""BoundedLog.pump: pipe -> output.log by splice, or read + write, with the same outcome."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rsup.workers import boundedlog
from rsup.workers.boundedlog import BoundedLog, Rotation

MARKER = re.compile(rb"\n\[rsup: dropped (\d+) bytes of output here\]\n")
CHUNK = 1 << 20


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def drain(log: BoundedLog, r: int) -> int:
    moved = 0
    while True:
        try:
            n = log.pump(r, CHUNK)
        except BlockingIOError:
            return moved
        if not n:
            return moved
        moved += n


def feed(log: BoundedLog, pipe: tuple[int, int], data: bytes, piece: int = 50_000) -> None:
    r, w = pipe
    for start in range(0, len(data), piece):
        os.write(w, data[start : start + piece])
        drain(log, r)


def lines(n: int) -> bytes:
    return b"".join(b"line %07d of the flood, padded to look like training output\n" % i
                    for i in range(n))  # fmt: skip


@pytest.mark.parametrize("splice", [True, False])
def test_pump_copies_byte_for_byte(tmp_path: Path, pipe: tuple[int, int], splice: bool) -> None:
    log = BoundedLog(str(tmp_path / "output.log"), 1 << 30, lambda r: None)
    log.splice_ok = splice and log.splice_ok
    data = lines(20_000)
    feed(log, pipe, data)
    log.close()
    assert (tmp_path / "output.log").read_bytes() == data


def test_pump_says_empty_and_end(tmp_path: Path, pipe: tuple[int, int]) -> None:
    r, w = pipe
    log = BoundedLog(str(tmp_path / "output.log"), 1 << 20, lambda r: None)
    with pytest.raises(BlockingIOError):
        log.pump(r, CHUNK)  # empty, a writer still there
    os.write(w, b"last words\n")
    os.close(w)
    assert log.pump(r, CHUNK) == 11
    assert log.pump(r, CHUNK) == 0  # every writer gone
    log.close()
    assert (tmp_path / "output.log").read_bytes() == b"last words\n"


def test_note_after_a_spliced_partial_line_starts_a_new_line(
    tmp_path: Path, pipe: tuple[int, int]
) -> None:
    log = BoundedLog(str(tmp_path / "output.log"), 1 << 20, lambda r: None)
    feed(log, pipe, b"epoch 3 50%")
    log.note("rsup: stop requested")
    feed(log, pipe, b"done\n")
    log.note("rsup: bye")
    log.close()
    assert (tmp_path / "output.log").read_bytes() == (
        b"epoch 3 50%\nrsup: stop requested\ndone\nrsup: bye\n"
    )


@pytest.mark.parametrize("splice", [True, False])
def test_pump_past_the_bound_keeps_head_and_tail_and_counts_the_drop(
    tmp_path: Path, pipe: tuple[int, int], splice: bool
) -> None:
    bound = 300_000
    rotations: list[Rotation] = []
    log = BoundedLog(str(tmp_path / "output.log"), bound, rotations.append)
    log.splice_ok = splice and log.splice_ok
    data = lines(50_000)  # ~3.3 MB through a 300 kB bound: several rewrites
    feed(log, pipe, data, piece=60_000)
    log.close()
    out = (tmp_path / "output.log").read_bytes()
    assert len(out) <= bound
    markers = list(MARKER.finditer(out))
    assert len(markers) == 1
    head, tail = out[: markers[0].start()], out[markers[0].end() :]
    dropped = int(markers[0].group(1))
    assert head == data[: log.head_bytes]
    assert data.endswith(tail) and tail.startswith(b"line ")  # on a line start
    assert len(head) + dropped + len(tail) == len(data)
    assert len(rotations) >= 2
    assert rotations[-1].dropped_bytes_total == dropped == log.dropped
    assert rotations[-1].inode == os.stat(tmp_path / "output.log").st_ino


@pytest.mark.parametrize("err", [errno.EINVAL, errno.ENOSYS])
def test_refused_splice_falls_back_to_read_and_write(
    tmp_path: Path, pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch, err: int
) -> None:
    calls: list[Any] = []

    def refuse(*args: Any) -> int:
        calls.append(args)
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(boundedlog, "_SPLICE", refuse)
    log = BoundedLog(str(tmp_path / "output.log"), 1 << 20, lambda r: None)
    log.splice_ok = True
    data = lines(2_000)
    feed(log, pipe, data)
    log.close()
    assert (tmp_path / "output.log").read_bytes() == data
    assert len(calls) == 1 and not log.splice_ok  # asked once, then read and write


def test_a_failing_splice_drops_and_counts_like_a_failing_write(
    tmp_path: Path, pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*args: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(boundedlog, "_SPLICE", full)
    log = BoundedLog(str(tmp_path / "output.log"), 1 << 20, lambda r: None)
    log.splice_ok = True
    monkeypatch.setattr(boundedlog, "_write_all", lambda fd, data: (_ for _ in ()).throw(
        OSError(errno.ENOSPC, "No space left on device")))  # fmt: skip
    feed(log, pipe, b"x" * 1000)
    assert log.dropped == 1000 and log.splice_ok  # a full disk is no reason to stop splicing
    log.close()
