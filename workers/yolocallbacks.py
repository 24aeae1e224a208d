"""Ultralytics callbacks of the YOLO worker: progress events, last-good copies, fault drills.

The callbacks run inside the training loop, so each one does a few attribute reads and,
at most twice a second, one ``write``. Reporting never breaks training: a failure there
is printed once and ignored. Drills are the exception: they are meant to break it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rsup.workers import heartbeat
from rsup.workers.yolockpt import LastGoodKeeper, write_atomic

if TYPE_CHECKING:
    from collections.abc import Callable

DRILL_KINDS = ("kill", "hang", "oom")
DRILLS_FIRED = "drills-fired.json"
# More than any address space: every allocator refuses it, on every device.
PROGRESS_INTERVAL = 0.5
VAL_BEAT_INTERVAL = 5.0
DRILLS_FILE_INTERVAL = 1.0


@dataclass(frozen=True)
class Drill:
    """A fault to inject: `kind` in the middle of epoch `at_epoch` (1-based; None: the current)."""

    kind: str
    at_epoch: int | None = None

    @property
    def key(self) -> str:
        """Identity of a drill: it fires once per kind and epoch."""
        return f"{self.kind}@{'any' if self.at_epoch is None else self.at_epoch}"


def parse_drills(raw: Any) -> list[Drill]:
    """Drills from JSON data: a list of {kind, at_epoch}, or {"drills": [...]}."""
    if isinstance(raw, dict):
        raw = raw.get("drills", [])
    if not isinstance(raw, list):
        raise ValueError("drills must be a list of {kind, at_epoch} objects")
    drills = []
    for item in raw:
        kind = item.get("kind") if isinstance(item, dict) else None
        if kind not in DRILL_KINDS:
            raise ValueError(f"drill kind must be one of {', '.join(DRILL_KINDS)}: {item!r}")
        at_epoch = item.get("at_epoch")
        if at_epoch is not None and (type(at_epoch) is not int or at_epoch < 1):
            raise ValueError(f"drill at_epoch must be a positive integer or null: {item!r}")
        drills.append(Drill(kind, at_epoch))
    return drills


def _read_fired(path: str) -> set[str]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return set()
    return {str(k) for k in data} if isinstance(data, list) else set()


class DrillBook:
    """Pending drills, the live drills file, and the record of drills already fired."""

    def __init__(self, drills: list[Drill], drills_file: str | None, record_dir: str) -> None:
        self._record = os.path.join(record_dir, DRILLS_FIRED)
        self._fired = _read_fired(self._record)
        self._pending: list[Drill] = []
        self._file = drills_file
        self._file_mtime: float | None = None
        self._next_poll = 0.0
        self.add(drills)

    @property
    def pending(self) -> list[Drill]:
        """Drills not fired yet, in arrival order."""
        return list(self._pending)

    def add(self, drills: list[Drill]) -> None:
        """Queue drills that neither fired nor wait already."""
        known = self._fired | {d.key for d in self._pending}
        for drill in drills:
            if drill.key not in known:
                self._pending.append(drill)
                known.add(drill.key)

    def poll(self, now: float) -> None:
        """Read the live drills file when its mtime changed; stat at most once a second."""
        if self._file is None or now < self._next_poll:
            return
        self._next_poll = now + DRILLS_FILE_INTERVAL
        try:
            mtime = os.stat(self._file).st_mtime
            if mtime == self._file_mtime:
                return
            with open(self._file, encoding="utf-8") as f:
                raw = json.load(f)
            self._file_mtime = mtime
        except (OSError, ValueError):  # absent, or caught mid-write: next poll sees it
            return
        try:
            self.add(parse_drills(raw))
        except ValueError as exc:
            print(f"rsup: ignoring bad drills file {self._file}: {exc}", file=sys.stderr)

    def due(self, epoch: int, batch: int, middle: int) -> Drill | None:
        """The drill to fire now: its epoch reached and the epoch at or past its middle batch."""
        if batch < middle:
            return None
        for drill in self._pending:
            if drill.at_epoch is None or epoch >= drill.at_epoch:
                return drill
        return None

    def mark_fired(self, drill: Drill) -> None:
        """Record the drill as fired, on disk, so that no later attempt fires it again."""
        self._pending.remove(drill)
        self._fired.add(drill.key)
        try:
            os.makedirs(os.path.dirname(self._record), exist_ok=True)
            write_atomic(self._record, json.dumps(sorted(self._fired)).encode("utf-8"))
        except OSError as exc:  # the drill still fires; the daemon does not resend it either
            print(f"rsup: cannot record the drill in {self._record}: {exc}", file=sys.stderr)


def execute_drill(kind: str, device: Any) -> None:
    """Do the real thing: SIGKILL or SIGSTOP this process, or a failing allocation on `device`."""
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "hang":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif kind == "oom":
        # The allocator's own error on a GPU (torch.OutOfMemoryError, "CUDA/HIP out of
        # memory"); on the CPU the same error class, standing for the GPU's.
        heartbeat.raise_oom(device)


def _float(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _metric(metrics: dict[str, Any], name: str) -> float | None:
    for key in (f"metrics/{name}(B)", f"metrics/{name}"):
        if key in metrics:
            return _float(metrics[key])
    return None


def epoch_fields(trainer: Any) -> dict[str, Any]:
    """Losses and validation metrics of the epoch the trainer just finished."""
    metrics = dict(trainer.metrics or {})
    losses: dict[str, Any] = {}
    if trainer.tloss is not None:
        for key, value in trainer.label_loss_items(trainer.tloss, prefix="train").items():
            losses[key.split("/", 1)[-1]] = _float(value)
    val_losses = {k.split("/", 1)[1]: _float(v) for k, v in metrics.items() if k.startswith("val/")}
    return {
        "losses": losses,
        "val_losses": val_losses,
        "precision": _metric(metrics, "precision"),
        "recall": _metric(metrics, "recall"),
        "mAP50": _metric(metrics, "mAP50"),
        "mAP50-95": _metric(metrics, "mAP50-95"),
        "fitness": _float(trainer.fitness),
        "epoch_seconds": _float(trainer.epoch_time),
    }


@dataclass
class RunFacts:
    """What the reporter says in run_started."""

    resumed: bool
    overrides: dict[str, Any]
    last_good_dir: str
    checkpoint: str | None = None


class Reporter:
    """Turns Ultralytics callbacks into events.jsonl lines and fires the drills."""

    def __init__(self, facts: RunFacts, drills: DrillBook) -> None:
        self.facts = facts
        self.drills = drills
        self.epoch = 0  # 1-based epoch in progress
        self.epochs = 0
        self.batch = 0
        self.batches = 0
        self.middle = 1
        self.epochs_done = 0  # 1-based epoch whose end was reported last
        self.stopped_early = False
        self._epoch_open = False
        self._next_progress = 0.0
        self._next_val_beat = 0.0
        self._warned: set[str] = set()
        self.keeper = LastGoodKeeper(facts.last_good_dir, self.on_kept)

    def callbacks(self) -> dict[str, Callable[[Any], None]]:
        """Ultralytics event name -> callback."""
        return {
            "on_train_start": self.on_train_start,
            "on_train_epoch_start": self.on_train_epoch_start,
            "on_train_batch_end": self.on_train_batch_end,
            "on_model_save": self.on_model_save,
            "on_fit_epoch_end": self.on_fit_epoch_end,
            "on_val_batch_end": self.on_val_batch_end,
        }

    def attach(self, model: Any) -> None:
        """Register every callback on an ultralytics.YOLO model."""
        for event, callback in self.callbacks().items():
            model.add_callback(event, callback)

    def _warn(self, where: str, exc: BaseException) -> None:
        if where not in self._warned:
            self._warned.add(where)
            print(f"rsup: {where} reporting failed ({exc!r}); training goes on", file=sys.stderr)

    def _emit(self, event: str, **fields: Any) -> None:
        try:
            heartbeat.emit(event, **fields)
        except OSError as exc:  # a full disk must not stop the training
            self._warn(event, exc)

    def on_train_start(self, trainer: Any) -> None:
        """run_started: where the run starts and with which settings."""
        try:
            self._emit(
                "run_started",
                resumed=self.facts.resumed,
                start_epoch=int(trainer.start_epoch) + 1,
                epochs=int(trainer.epochs),
                overrides=self.facts.overrides,
                run_dir=str(trainer.save_dir),
                checkpoint=self.facts.checkpoint,
                batch=trainer.batch_size,
                device=str(trainer.device),
                workers=trainer.args.workers,
            )
        except Exception as exc:
            self._warn("run_started", exc)

    def on_train_epoch_start(self, trainer: Any) -> None:
        """Reset the batch count (also called again when Ultralytics retries an epoch)."""
        self.epoch = int(trainer.epoch) + 1
        self.epochs = int(trainer.epochs)
        self.batches = len(trainer.train_loader)
        self.batch = 0
        self.middle = max(1, (self.batches + 1) // 2)
        self._epoch_open = True
        self._next_progress = 0.0

    def on_train_batch_end(self, trainer: Any) -> None:
        """progress (throttled, last batch always), then any drill that is due."""
        self.batch += 1
        now = time.monotonic()
        if self.batch >= self.batches or now >= self._next_progress:
            self._next_progress = now + PROGRESS_INTERVAL
            self._emit(
                "progress",
                epoch=self.epoch,
                epochs=self.epochs,
                batch=self.batch,
                batches=self.batches,
            )
        self.drills.poll(now)
        drill = self.drills.due(self.epoch, self.batch, self.middle)
        if drill is not None:
            self.fire(drill, trainer)

    def fire(self, drill: Drill, trainer: Any) -> None:
        """Announce the drill (event and log line), record it, then execute it."""
        # A rehearsal starts from a settled state: the last save is kept as last-good.
        self.keeper.flush()
        self.drills.mark_fired(drill)
        self._emit(
            "drill_fired",
            kind=drill.kind,
            epoch=self.epoch,
            at_epoch=drill.at_epoch,
            batch=self.batch,
            batches=self.batches,
        )
        print(
            f"rsup drill: {drill.kind} at epoch {self.epoch}/{self.epochs}, "
            f"batch {self.batch}/{self.batches}",
            file=sys.stderr,
            flush=True,
        )
        sys.stdout.flush()
        execute_drill(drill.kind, trainer.device)

    def on_model_save(self, trainer: Any) -> None:
        """checkpoint_saved now; the check and the last-good copy follow off the loop."""
        path = str(trainer.last)
        epoch = int(trainer.epoch) + 1
        self._emit("checkpoint_saved", path=path, epoch=epoch)
        try:
            self.keeper.submit(path, epoch)
        except OSError as exc:
            self._warn("last-good copy", exc)

    def on_kept(self, path: str, epoch: int, copy: str | None, error: str | None) -> None:
        """From the keeper's thread: last_good_kept, or checkpoint_invalid with the reason."""
        if copy is not None:
            self._emit("last_good_kept", path=copy, source=path, epoch=epoch)
            return
        print(
            f"rsup: {path} of epoch {epoch} is not usable ({error}); last-good unchanged",
            file=sys.stderr,
        )
        self._emit("checkpoint_invalid", path=path, epoch=epoch, error=error)

    def close(self) -> None:
        """Wait for the last-good copy in flight."""
        if not self.keeper.close():
            print("rsup: the last-good copy did not finish in time", file=sys.stderr)

    def on_fit_epoch_end(self, trainer: Any) -> None:
        """epoch_end with losses and metrics (not for the extra call of the final validation)."""
        if not self._epoch_open:
            return
        self._epoch_open = False
        self.epochs_done = self.epoch
        self.stopped_early = bool(trainer.stop) and self.epoch < int(trainer.epochs)
        try:
            fields = epoch_fields(trainer)
        except Exception as exc:
            self._warn("epoch_end", exc)
            fields = {}
        self._emit("epoch_end", epoch=self.epoch, epochs=int(trainer.epochs), **fields)

    def on_val_batch_end(self, validator: Any) -> None:
        """A heartbeat every few seconds while validation runs (no batch progress then)."""
        now = time.monotonic()
        if now >= self._next_val_beat:
            self._next_val_beat = now + VAL_BEAT_INTERVAL
            self._emit("heartbeat", phase="val", epoch=self.epoch)
