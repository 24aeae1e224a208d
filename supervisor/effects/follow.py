"""Follow a file as another process appends to it (and, for output.log, rotates it)."""

from __future__ import annotations

import os
from pathlib import Path

from rsup.workers import constants as C

CHUNK = 1 << 20


class Follower:
    """Reads what was appended since the last call; survives the shim's log rotation."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self.fd: int | None = None
        self.inode: int | None = None

    def read(self) -> bytes:
        """Everything new since the last call (possibly empty)."""
        if self.fd is None and not self._open():
            return b""
        data = self._read_to_eof()
        if self._rotated():
            data += self._read_to_eof()  # what reached the old file after our last read
            self._reopen_after_rotation()
            data += self._read_to_eof()
        return data

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _open(self) -> bool:
        try:
            self.fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        self.inode = os.fstat(self.fd).st_ino
        return True

    def _read_to_eof(self) -> bytes:
        assert self.fd is not None
        parts = []
        while chunk := os.pread(self.fd, CHUNK, self.offset):
            parts.append(chunk)
            self.offset += len(chunk)
        return b"".join(parts)

    def _rotated(self) -> bool:
        try:
            return os.stat(self.path).st_ino != self.inode
        except FileNotFoundError:
            return False

    def _reopen_after_rotation(self) -> None:
        rotation = self.path.with_name(C.ROTATION_JSON)
        try:
            import json

            resume = int(json.loads(rotation.read_text())["resume_offset"])
        except (OSError, ValueError, KeyError, TypeError):
            resume = 0
        self.close()
        if self._open():
            self.offset = resume
