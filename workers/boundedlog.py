"""output.log with a size bound: keep the head of a job's output and a rolling tail.

The head holds versions and configuration, the tail holds the failure; the middle
goes. When the file would pass its bound it is rewritten as
``head + marker + tail`` into a temporary file in the same folder, which then
replaces output.log. Before the replace, the caller is told the new file's
generation, inode and size (``resume_offset``) so that a reader tailing the file can
finish the old inode and continue the new one where new bytes start.

`pump` moves bytes from a pipe straight into the file: os.splice (Linux, Python 3.10+)
while they fit under the bound, so they never pass through Python; a read and `write`
when splice is missing or refused (EINVAL, ENOSYS, ...) and whenever the next bytes
would pass the bound, so a rewrite (and its accounting) happens exactly as for `write`.

Standard library only, Python 3.9+.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

MAX_HEAD_BYTES = 4 * 1024 * 1024
MARKER = b"\n[rsup: dropped %d bytes of output here]\n"
MARKER_RESERVE = 64  # longest marker: 20 digits
COPY_CHUNK = 1024 * 1024
ALIGN_WINDOW = 64 * 1024  # look this far for a line start, so the tail starts on one
MIN_MAX_BYTES = 16 * 1024
_SPLICE: Callable[..., int] | None = getattr(os, "splice", None)  # Python 3.10+, Linux
SPLICE_F_MOVE = getattr(os, "SPLICE_F_MOVE", 1)
SPLICE_F_NONBLOCK = getattr(os, "SPLICE_F_NONBLOCK", 2)  # an empty pipe: EAGAIN, no wait
# Splice cannot do this here (old kernel, file system, an O_APPEND target): read instead.
NO_SPLICE = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF, errno.EXDEV})


@dataclass(frozen=True)
class Rotation:
    """What a reader of output.log needs after a rewrite."""

    generation: int
    resume_offset: int  # size of the new file: bytes after it are new output
    dropped_bytes_total: int
    inode: int

    def as_json(self) -> dict[str, int]:
        return {
            "generation": self.generation,
            "resume_offset": self.resume_offset,
            "dropped_bytes_total": self.dropped_bytes_total,
            "inode": self.inode,
        }


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class BoundedLog:
    """Append-only log file that never grows past `max_bytes`."""

    def __init__(
        self,
        path: str,
        max_bytes: int,
        on_rotate: Callable[[Rotation], None],
        generation: int = 0,
        dropped_total: int = 0,
    ) -> None:
        if max_bytes < MIN_MAX_BYTES:
            raise ValueError(f"max_bytes must be at least {MIN_MAX_BYTES}")
        self.path = path
        self.max_bytes = max_bytes
        self.head_bytes = min(max_bytes // 8, MAX_HEAD_BYTES)
        # Half the rest: the next rewrite is far away, so rewrites stay rare.
        self.tail_bytes = (max_bytes - self.head_bytes - MARKER_RESERVE) // 2
        self.generation = generation
        self.dropped_total = dropped_total  # in this file, across writers (the marker)
        self.dropped = 0  # lost by this writer: rewrites and failed writes
        self._on_rotate = on_rotate
        # O_APPEND: a second shim on the same attempt adds to, never clobbers, the file.
        self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._marker_len = 0  # the marker this writer put in, not real output
        self._ends_line: bool | None = True  # None: spliced, look at the file's last byte
        # Splice refuses an O_APPEND target: a second descriptor without it, writing at
        # the size we keep (this writer is the file's only one while it runs).
        self._splice_fd: int | None = None
        self.splice_ok = _SPLICE is not None

    def write(self, data: bytes) -> None:
        """Append `data`, rewriting the file first when it would pass the bound."""
        if not data:
            return
        try:
            if self._size + len(data) > self.max_bytes:
                self._rotate(data)
            else:
                self._append(data)
        except OSError:
            # A full disk must not stop the job: its output is dropped and counted.
            self.dropped += len(data)
            self._size = os.fstat(self._fd).st_size
        self._ends_line = data.endswith(b"\n")

    def pump(self, src: int, limit: int) -> int:
        """Move up to `limit` bytes from the non-blocking pipe `src` into the log.

        Returns how many bytes left the pipe (written, or dropped and counted as `write`
        does), 0 at its end; BlockingIOError when it is empty."""
        room = self.max_bytes - self._size
        if self.splice_ok and room > 0:
            moved = self._splice(src, min(limit, room))
            if moved is not None:
                return moved
        data = os.read(src, limit)
        self.write(data)
        return len(data)

    def note(self, line: str) -> None:
        """Write a line of our own, starting a new line if the job left one open."""
        prefix = "" if self._ends_line_now() else "\n"
        self.write(f"{prefix}{line}\n".encode("utf-8", "replace"))

    def close(self) -> None:
        self._drop_splice_fd()
        os.close(self._fd)

    def _splice(self, src: int, count: int) -> int | None:
        """Splice `count` bytes at most; None when splice cannot (read the bytes instead)."""
        assert _SPLICE is not None
        try:
            if self._splice_fd is None:
                self._splice_fd = self._open_splice_fd()
            moved = _SPLICE(src, self._splice_fd, count, None, self._size,
                            SPLICE_F_MOVE | SPLICE_F_NONBLOCK)  # fmt: skip
        except BlockingIOError:
            raise  # the pipe is empty
        except OSError as exc:
            if exc.errno in NO_SPLICE:
                self.splice_ok = False  # for good: read and write from now on
                self._drop_splice_fd()
            return None  # e.g. a full disk: `write` drops and counts the bytes
        if moved:
            self._size += moved
            self._ends_line = None
        return int(moved)

    def _open_splice_fd(self) -> int:
        fd = os.open(self.path, os.O_WRONLY)
        if os.fstat(fd).st_ino != os.fstat(self._fd).st_ino:  # replaced by someone else
            os.close(fd)
            raise OSError(errno.EXDEV, f"{self.path} is not the file being written")
        return fd

    def _drop_splice_fd(self) -> None:
        if self._splice_fd is not None:
            os.close(self._splice_fd)
            self._splice_fd = None

    def _ends_line_now(self) -> bool:
        if self._ends_line is None:
            try:
                last = os.pread(self._fd, 1, self._size - 1) if self._size else b""
            except OSError:
                last = b""
            self._ends_line = last in (b"\n", b"")
        return self._ends_line

    def _append(self, data: bytes) -> None:
        _write_all(self._fd, data)
        self._size += len(data)

    def _rotate(self, data: bytes) -> None:
        # The logical stream is the file followed by `data`.
        total = self._size + len(data)
        head = min(self.head_bytes, total)
        tail_start = self._line_start(data, total - self.tail_bytes, total)
        dropped = tail_start - head - self._marker_len
        marker = MARKER % (self.dropped_total + dropped)
        tmp = f"{self.path}.rotating"
        fd = os.open(tmp, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for piece in self._pieces(data, 0, head):
                _write_all(fd, piece)
            _write_all(fd, marker)
            for piece in self._pieces(data, tail_start, total):
                _write_all(fd, piece)
            st = os.fstat(fd)
            rotation = Rotation(
                self.generation + 1, st.st_size, self.dropped_total + dropped, st.st_ino
            )
            # Told before the replace: whoever sees the new inode finds its offset.
            self._on_rotate(rotation)
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            _unlink(tmp)
            raise
        os.close(self._fd)
        self._drop_splice_fd()  # it writes to the old inode
        self._fd, self._size, self._marker_len = fd, st.st_size, len(marker)
        self.generation, self.dropped_total = rotation.generation, rotation.dropped_bytes_total
        self.dropped += dropped

    def _line_start(self, data: bytes, start: int, total: int) -> int:
        window = b"".join(self._pieces(data, start, min(start + ALIGN_WINDOW, total)))
        newline = window.find(b"\n")
        if newline < 0 or start + newline + 1 >= total:
            return start  # no line break near: cut mid-line rather than keep too much
        return start + newline + 1

    def _pieces(self, data: bytes, start: int, end: int) -> Iterator[bytes | memoryview]:
        """Bytes [start, end) of the file followed by `data`, in chunks."""
        pos = start
        file_end = min(end, self._size)
        while pos < file_end:
            chunk = os.pread(self._fd, min(COPY_CHUNK, file_end - pos), pos)
            if not chunk:
                raise OSError(f"{self.path} shrank under us")
            yield chunk
            pos += len(chunk)
        if end > self._size:
            yield memoryview(data)[max(start - self._size, 0) : end - self._size]


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
