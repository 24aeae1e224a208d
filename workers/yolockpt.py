"""Checkpoints of the YOLO worker: checks, last-good copies, and where a run starts from.

Ultralytics writes last.pt with a plain write (a kill mid-write leaves it truncated) and
appends the results.csv row before it saves, so a resume must be chosen with care:

- a resumable last.pt (valid zip, optimizer state, epochs left) is resumed;
- a truncated or corrupt one is replaced by the newest valid last-good copy;
- a finished run (optimizer stripped, or last epoch saved) is never resumed.

Standard library only at import time; torch is imported lazily to read a checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
import threading
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    KeptCallback = Callable[[str, int, str | None, str | None], None]

LAST_GOOD = "last-good.pt"
LAST_GOOD_PREV = "last-good.prev.pt"

FRESH = "fresh"
RESUME = "resume"
FINISHED = "finished"


def _zip_bytes_ok(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return archive.testzip() is None
    except Exception:  # any decoding failure means a damaged archive
        return False


def zip_ok(path: str) -> bool:
    """True when path is a complete zip archive (torch.save format) with all CRCs matching."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None
    except Exception:  # truncated files raise BadZipFile, EOFError, OSError, zlib.error...
        return False


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: str, data: bytes) -> str:
    """Write data to a temporary file beside path, on disk; return the temporary path."""
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return tmp


def write_atomic(path: str, data: bytes) -> None:
    """Write data to path so that readers see the old file or the whole new one, never part."""
    os.replace(_write_synced(path, data), path)
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


def store_last_good(data: bytes, last_good_dir: str) -> str | None:
    """Keep checkpoint bytes that pass the zip check as last_good_dir/last-good.pt.

    The previous copy becomes last-good.prev.pt (two are kept). Returns the new copy's
    path, or None when the bytes are damaged (nothing is replaced then).
    """
    if not _zip_bytes_ok(data):
        return None
    os.makedirs(last_good_dir, exist_ok=True)
    current = os.path.join(last_good_dir, LAST_GOOD)
    tmp = _write_synced(current, data)
    if os.path.exists(current):
        os.replace(current, os.path.join(last_good_dir, LAST_GOOD_PREV))
    os.replace(tmp, current)
    _fsync_dir(last_good_dir)
    return current


def keep_last_good(checkpoint: str, last_good_dir: str) -> str | None:
    """Check a checkpoint file and keep it as last-good; None when it is damaged."""
    with open(checkpoint, "rb") as f:
        return store_last_good(f.read(), last_good_dir)


class LastGoodKeeper:
    """Keeps checkpoints as last-good from a background thread.

    The file is read at once (Ultralytics rewrites last.pt in place later); the check,
    the fsync'd copy and the rotation happen off the training loop. `on_kept(path,
    epoch, copy or None, error or None)` is called from that thread after each one.
    """

    def __init__(self, last_good_dir: str, on_kept: KeptCallback) -> None:
        self._dir = last_good_dir
        self._on_kept = on_kept
        self._cond = threading.Condition()
        self._job: tuple[bytes, str, int] | None = None
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, checkpoint: str, epoch: int) -> None:
        """Queue a copy of the checkpoint as it is now; a newer one replaces a waiting one."""
        with open(checkpoint, "rb") as f:
            data = f.read()
        with self._cond:
            self._job = (data, checkpoint, epoch)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="last-good", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _next_job(self) -> tuple[bytes, str, int] | None:
        with self._cond:
            while self._job is None and not self._closed:
                self._cond.wait()
            job, self._job = self._job, None
            self._busy = job is not None
            return job

    def _done(self) -> None:
        with self._cond:
            self._busy = False
            self._cond.notify_all()

    def _loop(self) -> None:
        # Lowest priority for this thread alone (Linux nice is per thread): the copy yields
        # to the training threads; the fsync waits on the disk, not on the CPU.
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        while True:
            job = self._next_job()
            if job is None:
                return
            data, checkpoint, epoch = job
            kept, error = None, None
            try:
                kept = store_last_good(data, self._dir)
                error = None if kept else "zip check failed"
            except OSError as exc:
                error = str(exc)
            try:
                self._on_kept(checkpoint, epoch, kept, error)
            except Exception as exc:  # reporting must not end the copies
                print(f"rsup: last-good report failed: {exc!r}", file=sys.stderr)
            self._done()

    def flush(self, timeout: float = 60.0) -> bool:
        """Wait until no copy is queued or running; False if that took longer than timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._job is None and not self._busy, timeout)

    def close(self, timeout: float = 300.0) -> bool:
        """Finish the queued copy and stop the thread; False if it did not end in time."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True


def remove_stale_temps(folder: str) -> None:
    """Delete temporary files a killed process left while writing into folder."""
    if not os.path.isdir(folder):
        return
    for name in os.listdir(folder):
        if name.startswith(".") and name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))


def last_good_candidates(last_good_dir: str) -> list[str]:
    """The last-good copies that exist, newest first."""
    paths = [os.path.join(last_good_dir, n) for n in (LAST_GOOD, LAST_GOOD_PREV)]
    return [p for p in paths if os.path.isfile(p)]


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint says about its run."""

    path: str
    epoch: int  # 0-based index of the last completed epoch; -1 once the optimizer was stripped
    epochs: int  # epochs the run was asked for
    has_optimizer: bool
    save_dir: str | None

    @property
    def finished(self) -> bool:
        """A finished run: optimizer stripped by Ultralytics, or its final epoch saved."""
        return not self.has_optimizer or self.epoch < 0 or self.epoch + 1 >= self.epochs

    @property
    def epochs_done(self) -> int:
        """Completed epochs, counted the way results.csv counts them (1-based)."""
        return self.epoch + 1


def _torch_load(path: str) -> Any:
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except TypeError:  # torch without the weights_only argument
        return torch.load(path, map_location="cpu")


def read_checkpoint(path: str) -> CheckpointInfo | None:
    """Read a checkpoint's run state; None when it is damaged or not an Ultralytics checkpoint."""
    if not zip_ok(path):
        return None
    try:
        ckpt = _torch_load(path)
    except Exception:  # a file that passes the CRCs can still fail to unpickle
        return None
    if not isinstance(ckpt, dict):
        return None
    args = ckpt.get("train_args") or {}
    try:
        epoch = int(ckpt.get("epoch", -1))
        epochs = int(args.get("epochs", 0))
    except (TypeError, ValueError):
        return None
    save_dir = args.get("save_dir")
    return CheckpointInfo(
        path=path,
        epoch=epoch,
        epochs=epochs,
        has_optimizer=ckpt.get("optimizer") is not None,
        save_dir=str(save_dir) if save_dir else None,
    )


@dataclass(frozen=True)
class StartPlan:
    """How the worker starts: fresh, resume from `checkpoint`, or nothing to do (finished)."""

    action: str  # FRESH | RESUME | FINISHED
    reason: str
    checkpoint: str | None = None
    info: CheckpointInfo | None = None
    restored_from: str | None = None  # the last-good copy that replaced a damaged last.pt


def _same_run(info: CheckpointInfo, run_dir: str) -> bool:
    if info.save_dir is None:
        return True
    return os.path.realpath(info.save_dir) == os.path.realpath(run_dir)


def _plan_for(info: CheckpointInfo, last: str, restored_from: str | None) -> StartPlan:
    if info.finished:
        why = "optimizer stripped" if not info.has_optimizer or info.epoch < 0 else "final epoch"
        return StartPlan(FINISHED, f"run already finished ({why})", last, info, restored_from)
    reason = f"resuming after epoch {info.epochs_done}/{info.epochs}"
    if restored_from:
        reason += f" from last-good copy {restored_from}"
    return StartPlan(RESUME, reason, last, info, restored_from)


def plan_start(run_dir: str, last_good_dir: str) -> StartPlan:
    """Decide how to start, restoring a last-good copy over a damaged last.pt when needed."""
    last = os.path.join(run_dir, "weights", "last.pt")
    damaged = False
    if os.path.isfile(last):
        info = read_checkpoint(last)
        if info is not None:
            return _plan_for(info, last, None)
        damaged = True
    for candidate in last_good_candidates(last_good_dir):
        info = read_checkpoint(candidate)
        if info is None or not _same_run(info, run_dir):
            continue
        with open(candidate, "rb") as f:
            data = f.read()
        os.makedirs(os.path.dirname(last), exist_ok=True)
        write_atomic(last, data)
        return _plan_for(dataclasses.replace(info, path=last), last, candidate)
    if damaged:
        os.replace(last, last + ".damaged")  # kept for inspection; a fresh run writes a new one
        return StartPlan(FRESH, f"{last} is damaged and no valid last-good copy exists")
    return StartPlan(FRESH, "no checkpoint yet")


def _row_epoch(line: str) -> int | None:
    head = line.split(",", 1)[0].strip()
    try:
        return int(float(head))
    except ValueError:
        return None


def trim_results(csv_path: str, max_epoch: int) -> int:
    """Keep one results.csv row per epoch <= max_epoch (the last written wins).

    Rows of epochs the checkpoint does not hold are dropped so the resumed run writes
    them once. Rewrites the file atomically; returns how many rows were removed.
    """
    if not os.path.isfile(csv_path):
        return 0
    with open(csv_path, encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    if not lines:
        return 0
    header, rows = lines[0], lines[1:]
    kept: dict[int, str] = {}
    for row in rows:
        epoch = _row_epoch(row)
        if epoch is not None and epoch <= max_epoch:
            kept[epoch] = row
    if len(kept) == len(rows) and list(kept) == sorted(kept):
        return 0
    text = "\n".join([header] + [kept[e] for e in sorted(kept)]) + "\n"
    write_atomic(csv_path, text.encode("utf-8"))
    return len(rows) - len(kept)
