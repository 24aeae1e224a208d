"""Tell rsup how a job is doing: one JSON line per event in the attempt's events.jsonl.

Any training script can use it, from any interpreter (Python 3.9+, standard library only)::

    from rsup.workers import heartbeat
    heartbeat.progress(epoch=3, epochs=100, batch=17, batches=250)
    heartbeat.checkpoint("runs/last.pt", epoch=3)
    heartbeat.beat()

Outside rsup (no ``RSUP_EVENTS_FILE`` in the environment) every call is a no-op, so a
script keeps working when started by hand. Each line is written with one ``write`` on
a file opened with O_APPEND, so lines from several ranks never interleave.
"""

import json
import os
import time
from typing import Any, Optional

from rsup.workers.constants import ENV_EVENTS_FILE

_fd: Optional[int] = None
_fd_path: Optional[str] = None


def _events_fd() -> Optional[int]:
    global _fd, _fd_path
    path = os.environ.get(ENV_EVENTS_FILE)
    if not path:
        return None
    if _fd is None or _fd_path != path:
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _fd_path = path
    return _fd


def _rank(name: str = "RANK") -> Optional[int]:
    raw = os.environ.get(name)
    return int(raw) if raw is not None and raw.isdigit() else None


def emit(event: str, **fields: Any) -> None:
    """Append one event line; a no-op when not running under rsup."""
    fd = _events_fd()
    if fd is None:
        return
    record: dict[str, Any] = {"ts": time.time(), "event": event, "pid": os.getpid()}
    rank = _rank()
    if rank is not None:
        record["rank"] = rank
    local = _rank("LOCAL_RANK")  # with the rank, it names a node's error files (ranks.py)
    if local is not None:
        record["local_rank"] = local
    record.update(fields)
    line = json.dumps(record, default=str, separators=(",", ":")) + "\n"
    os.write(fd, line.encode("utf-8"))


def beat(**fields: Any) -> None:
    """Say the job is alive without claiming progress."""
    emit("heartbeat", **fields)


def progress(**fields: Any) -> None:
    """Report forward progress (epoch, batch, step, losses...)."""
    emit("progress", **fields)


def checkpoint(path: str, **fields: Any) -> None:
    """Report that a checkpoint was written (absolute path recorded)."""
    emit("checkpoint_saved", path=os.path.abspath(path), **fields)
