"""Tell rsup how a job is doing: one JSON line per event in the attempt's events.jsonl.

Any training script can use it, from any interpreter (Python 3.9+, standard library only)::

    from rsup.workers import heartbeat
    heartbeat.progress(step=1700, total=25000, epoch=3, epochs=100, loss=0.41)
    heartbeat.epoch_end(epoch=3, epochs=100, seconds=412.0, loss=0.39)
    heartbeat.checkpoint("runs/last.pt", epoch=3)
    heartbeat.step(step=1701, epoch=3)   # progress, and where `rsup inject NAME oom` fires
    heartbeat.beat()

rsup shows epoch and step with their totals, the loss and an ETA in `rsup status`; an
advance of step or epoch, a checkpoint or a beat keeps the hang clock from running out.

Outside rsup (no ``RSUP_EVENTS_FILE`` in the environment) every call is a no-op, so a
script keeps working when started by hand. Each line is written with one ``write`` on
a file opened with O_APPEND, so lines from several ranks never interleave.
"""

import json
import os
import time
from typing import Any, Optional

from rsup.workers.constants import ENV_ATTEMPT_DIR, ENV_EVENTS_FILE

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


def progress(
    step: Optional[int] = None,
    total: Optional[int] = None,
    epoch: Optional[int] = None,
    epochs: Optional[int] = None,
    loss: Optional[float] = None,
    **fields: Any,
) -> None:
    """Report forward progress: step of total, epoch of epochs, loss, any other metric.
    rsup derives the ETA from how fast step (or epoch) advances."""
    given = {"step": step, "total": total, "epoch": epoch, "epochs": epochs, "loss": loss}
    emit("progress", **{k: v for k, v in given.items() if v is not None}, **fields)


def epoch_end(
    epoch: int, epochs: Optional[int] = None, seconds: Optional[float] = None, **metrics: Any
) -> None:
    """An epoch is done (1-based): counts as an advance; `seconds` gives the ETA and the
    slowdown check their pace."""
    emit("epoch_end", epoch=epoch, epochs=epochs, epoch_seconds=seconds, **metrics)


def step(step: Optional[int] = None, epoch: Optional[int] = None, **fields: Any) -> None:
    """Progress, and the point where an `rsup inject NAME oom` drill raises a real
    allocation failure (torch's own out-of-memory error) once its epoch is reached."""
    progress(step=step, epoch=epoch, **fields)
    drill = _oom_drill_due(epoch)
    if drill is not None:
        emit("drill_fired", kind="oom", id=drill.get("id"), epoch=epoch)
        _raise_oom()


def checkpoint(path: str, **fields: Any) -> None:
    """Report that a checkpoint was written (absolute path recorded)."""
    emit("checkpoint_saved", path=os.path.abspath(path), **fields)


OOM_DRILL_BYTES = 1 << 52  # no machine has this much memory: the allocator itself fails
_fired: "set[Any]" = set()


def _oom_drill_due(epoch: Optional[int]) -> "Optional[dict[str, Any]]":
    """The oom drill rsupd wrote to this attempt's drills.json, when it is due."""
    folder = os.environ.get(ENV_ATTEMPT_DIR)
    if not folder:
        return None
    try:
        with open(os.path.join(folder, "drills.json"), encoding="utf-8") as f:
            drills = json.load(f)
    except (OSError, ValueError):
        return None
    for drill in drills if isinstance(drills, list) else []:
        if not isinstance(drill, dict) or drill.get("kind") != "oom" or drill.get("id") in _fired:
            continue
        at = drill.get("at_epoch")
        if at is None or (epoch is not None and epoch >= at):
            _fired.add(drill.get("id"))
            return drill
    return None


def _raise_oom() -> None:
    import torch

    raise_oom("cuda" if torch.cuda.is_available() else "cpu")


def raise_oom(device: Any) -> None:
    """A real allocation failure on the job's GPU: torch's own out-of-memory error.

    Without a GPU there is no GPU allocator to fail (the CPU's says the host is out of
    RAM, another fault): the drill then raises the GPU error class with a message that
    says it stands for one (a test double for the GPU)."""
    import torch

    if str(device) != "cpu":
        block = torch.empty((OOM_DRILL_BYTES,), dtype=torch.uint8, device=device)
        del block
        raise RuntimeError(f"oom drill: an allocation of {OOM_DRILL_BYTES} bytes did not fail")
    error = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    raise error(
        f"CUDA out of memory. Tried to allocate {OOM_DRILL_BYTES >> 30} GiB (rsup oom drill "
        "on a machine without a GPU: this error stands for the GPU allocator's)"
    )
