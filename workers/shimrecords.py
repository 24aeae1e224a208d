"""The records a shim leaves in its attempt folder: shim.json (who to look for after a
daemon restart) and exit.json (how the attempt ended), each replaced atomically, the latter
written into space set aside at the start so that a full disk cannot lose it.

Standard library only, Python 3.9+.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import time
from typing import Any

from rsup.workers import proctree
from rsup.workers.shimargs import Options

EXIT_RESERVE = 16 * 1024  # bytes of exit.json set aside at the start, for a full disk


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


def read_json(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def rusage_fields(usage: resource.struct_rusage) -> dict[str, float]:
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
