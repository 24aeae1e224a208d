"""How a shim starts its job: the cgroup, output.log, the spawn, and a job that cannot start.

Standard library only, Python 3.9+.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from rsup.workers.boundedlog import BoundedLog, Rotation
from rsup.workers.constants import EXIT_JSON, OUTPUT_LOG, ROTATION_JSON, SHIM_EXIT_SPAWN_FAILED
from rsup.workers.shimargs import Options
from rsup.workers.shimrecords import exit_record, read_json, write_json_atomic

EXIT_NOT_FOUND = 127  # shell conventions for a command that cannot start
EXIT_CANNOT_EXECUTE = 126


def join_cgroup(opts: Options) -> str | None:
    """Move the shim into the attempt's cgroup before the job starts, so the job and
    everything it forks (setsid'ed or not) is in it; the reason when that failed."""
    if opts.cgroup is None:
        return None
    try:
        with open(os.path.join(opts.cgroup, "cgroup.procs"), "w") as procs:
            procs.write(f"{os.getpid()}\n")
    except OSError as exc:
        return f"rsup: could not join cgroup {opts.cgroup} ({exc}); the tree kill remains"
    return None


def spawn(opts: Options) -> subprocess.Popen[bytes]:
    """Start the job in a session of its own, stdout and stderr into one pipe."""
    ids: dict[str, Any] = {}
    if opts.user is not None:
        ids["user"] = opts.user
    if opts.group is not None:
        ids["group"] = opts.group
    if opts.groups is not None:
        ids["extra_groups"] = opts.groups  # also when empty: drop our own groups
    return subprocess.Popen(
        opts.argv, cwd=opts.cwd, start_new_session=True, close_fds=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **ids,
    )  # fmt: skip


def open_log(opts: Options) -> BoundedLog:
    """output.log, continuing the rotation count of an earlier shim on the same attempt."""
    rotation_path = opts.path(ROTATION_JSON)
    prior = read_json(rotation_path)

    def on_rotate(rotation: Rotation) -> None:
        write_json_atomic(rotation_path, rotation.as_json())

    return BoundedLog(
        opts.path(OUTPUT_LOG),
        opts.max_log_bytes,
        on_rotate,
        generation=int(prior.get("generation", 0)),
        dropped_total=int(prior.get("dropped_bytes_total", 0)),
    )


def spawn_failed(
    opts: Options, log: BoundedLog, exc: BaseException, started: float, reserved: str | None
) -> int:
    """Record a job that could not even start, with the exit code a shell would give."""
    log.note(f"rsup: cannot start job: {exc}")
    log.note(f"rsup: the command was {opts.argv!r}, in {os.path.abspath(opts.cwd)!r}")
    code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_CANNOT_EXECUTE
    record = exit_record(started, time.monotonic(), exit_code=code, spawn_error=str(exc))
    write_json_atomic(opts.path(EXIT_JSON), record, reserved)
    return SHIM_EXIT_SPAWN_FAILED
