"""One live attempt: the watcher's reports stored, drills fired, limits and hangs acted on.

The watcher (effects.watcher) reads; this module writes what it reported to the store,
hands progress to the drills, and raises `hung` or `limit_hit` for the runner, which stops
the attempt. Budgets are the core's (core.budget); the runner's step decides what follows.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from rsup.supervisor.core import budget
from rsup.supervisor.core.hang import HangVerdict
from rsup.supervisor.core.job import Attempt
from rsup.supervisor.effects import drills as drilling
from rsup.supervisor.effects.inotify import dir_watch
from rsup.supervisor.effects.procwait import wait_event
from rsup.supervisor.effects.store import Store
from rsup.supervisor.effects.watcher import (
    DRILL_FIRED,
    EVENT,
    JOB_PID,
    PROGRESS,
    AttemptWatcher,
    OutputListener,
    Report,
)
from rsup.supervisor.recognize.diagnosis import Diagnosis
from rsup.supervisor.recognize.ranks import RankHang, RankTracker
from rsup.workers import constants as C

POLL = 0.5  # how often the files are read when inotify cannot be had
# With inotify, new output wakes the monitor at once; otherwise it wakes for the hang check,
# at a thirtieth of the silence limit in force, kept within these bounds.
TICK_MIN, TICK_MAX = 1.0, 5.0
PROGRESS_WRITE_EVERY = 1.0  # throttle job.progress writes to the store
BUDGET_EVERY = 5.0  # seconds between runtime/cost checks
QUIET_SHOWN = 60.0  # seconds of silence after which `rsup status` says how long, and the limits
# Faults that often leave the process wedged in the driver instead of ending it.
WEDGING = frozenset({C.GPU_MEMORY_FAULT, C.HIP_RUNTIME_INIT, C.SEGFAULT_ABORT})


class AttemptMonitor:
    def __init__(
        self, store: Store, job: str, attempt: Attempt, output_listeners: list[OutputListener]
    ) -> None:
        record = store.get_job(job)
        if record is None:
            raise KeyError(job)
        self.store, self.job, self.attempt = store, job, attempt
        self.watcher = AttemptWatcher(record, attempt, output_listeners)
        self.drills = drilling.Drills(store, job, attempt.n, Path(attempt.dir), record.kind)
        self.hung = asyncio.Event()
        self.hang_report: Report | None = None  # stored once its stacks are taken
        self.wedged = asyncio.Event()  # a fatal fault, then neither exit nor advance
        self.fault_grace = record.spec.hang.fault_grace
        self.fault_deadline: float | None = None
        self.fault_advances = 0  # the watcher's advance count when the fault was seen
        self.limit_hit = asyncio.Event()
        self.limit_reason: str | None = None
        self.limit_pending: str | None = None  # reached, waiting for a checkpoint that is due
        self.next_budget_check = 0.0
        self.next_hang_check = 0.0
        self.last_progress_write = 0.0
        self.progress_unsaved = False

    # what the runner reads at the end ---------------------------------------------------

    @property
    def hang_verdict(self) -> HangVerdict | None:
        return self.watcher.hang_verdict

    @property
    def hang_rank(self) -> RankHang | None:
        return self.watcher.hang_rank

    @property
    def ranks(self) -> RankTracker | None:
        return self.watcher.ranks

    @property
    def advanced(self) -> bool:
        return self.watcher.advanced

    @property
    def completed(self) -> bool:
        return self.watcher.completed

    @property
    def progress_seen(self) -> bool:
        return self.watcher.progress_seen

    @property
    def drills_fired(self) -> list[str]:
        return self.drills.fired

    def diagnosis(self) -> Diagnosis:
        return self.watcher.diagnosis()

    # the loop ---------------------------------------------------------------------------

    def add_drill(self, drill: dict[str, Any]) -> None:
        self.drills.add(drill)
        self.poll()  # aim with what the job has said up to now (ranks' pids)
        self._fire_drills()

    async def run(self) -> None:
        wake = asyncio.Event()
        watch = dir_watch().watch(Path(self.attempt.dir), wake.set)
        try:
            while True:
                for reports in self.watcher.poll_steps():
                    self._handle(reports)
                    await asyncio.sleep(0)  # requests get in between slices of a flood
                self._save_progress(force=False)
                period = self.watcher.detector.check_every(TICK_MIN, TICK_MAX)
                self._handle(self.watcher.check_checkpoint())
                self._check_hang(period)
                self._check_wedged()
                self._check_budget()
                blind = watch is None or watch.lost
                await wait_event(wake, POLL if blind else period)
                wake.clear()
        finally:
            if watch is not None:
                watch.close()

    def poll(self) -> None:
        self._handle(self.watcher.poll())
        self._save_progress(force=False)

    def drain(self) -> None:
        """Store what is left once the attempt has ended."""
        self._handle(self.watcher.check_checkpoint())
        self._handle(self.watcher.close())
        self._save_progress(force=True)
        detector = self.watcher.detector
        if detector.learned:  # the job's rhythm, for its next attempt
            self.store.update_job(self.job, hang_timeout=detector.timeout)

    # acting on reports -------------------------------------------------------------------

    def _handle(self, reports: list[Report]) -> None:
        for report in reports:
            if report.kind == EVENT:
                fields = dict(report.fields)
                name = fields.pop("event")
                wedging = fields.get("category") in WEDGING and not fields.get("survivable")
                if name == "fault_detected" and wedging:
                    self._fault_seen()
                if name == "checkpoint_saved" and self.limit_pending is not None:
                    self._hit_limit(f"{self.limit_pending}; stopped after the checkpoint of "
                                    f"epoch {fields.get('epoch')}")  # fmt: skip
                self.store.emit(self.job, self.attempt.n, name, **fields)
            elif report.kind == PROGRESS:
                self.progress_unsaved = True
                self._save_progress(bool(report.fields.get("force")))
                self._fire_drills()
            elif report.kind == JOB_PID:
                self.store.update_attempt(self.job, self.attempt.n, job_pid=report.fields["pid"])
                self._fire_drills()
            elif report.kind == DRILL_FIRED:
                self.drills.worker_fired(report.fields["kind"], self._epoch())

    def _epoch(self) -> int | None:
        progress = self.watcher.progress or {}
        epoch = progress.get("epoch")
        if isinstance(epoch, int):
            return epoch
        fraction = progress.get("epoch_float")  # HF Trainer logs epochs as 1.25, 2.0...
        return int(fraction) if isinstance(fraction, float) else None

    def _fire_drills(self) -> None:
        if not self.drills.pending or self.drills.kind == "ultralytics":
            return
        w = self.watcher
        self.drills.fire_due(self._epoch(), drilling.target(w.job_pid, w.job_start, w.ranks),
                             w.ranks)  # fmt: skip

    def _save_progress(self, force: bool) -> None:
        """Store the latest progress at most once a second (at once when forced): the
        last report of a burst is written a moment later, never dropped."""
        now = time.monotonic()
        due = force or now - self.last_progress_write >= PROGRESS_WRITE_EVERY
        if self.progress_unsaved and due:
            self.last_progress_write, self.progress_unsaved = now, False
            self.store.update_job(self.job, progress=self.watcher.progress)

    def _check_hang(self, period: float) -> None:
        """At most once a `period`: a job printing fast wakes the monitor far more often."""
        now = time.monotonic()
        if self.hung.is_set() or now < self.next_hang_check:
            return
        self.next_hang_check = now + period
        report = self.watcher.check_hang()
        if report is None:
            self._show_quiet(now)
            return
        self.hang_report = report  # the runner stores it with the job's stacks
        if self.watcher.detector.learned:
            self.store.update_job(self.job, hang_timeout=self.watcher.detector.timeout)
        self.hung.set()

    def _show_quiet(self, now: float) -> None:
        """A job silent for a while says so in its status, with the limits in force:
        "silent 12m, hang limit 30m (busy 90m)". Written when it starts and when it ends."""
        detector = self.watcher.detector
        silent = detector.silent_for(now)
        progress = self.watcher.progress or {}
        if silent < QUIET_SHOWN:
            if "quiet" in progress:
                self.watcher.progress = {k: v for k, v in progress.items() if k != "quiet"}
                self.progress_unsaved = True
                self._save_progress(force=True)
            return
        since = round(time.time() - silent, 1)
        if abs(((progress.get("quiet") or {}).get("since") or 0) - since) < 1.0:
            return  # the same silence, already shown
        quiet = {"since": since, "limit_s": round(detector.limit(), 1), "why": detector.why(),
                 "busy_limit_s": round(detector.busy_limit(), 1)}  # fmt: skip
        self.watcher.progress = {**progress, "quiet": quiet}
        self.progress_unsaved = True
        self._save_progress(force=True)

    def _fault_seen(self) -> None:
        if self.fault_deadline is None:
            self.fault_deadline = time.monotonic() + self.fault_grace
            self.fault_advances = self.watcher.advances

    def _check_wedged(self) -> None:
        """A fatal GPU fault or runtime abort that neither ends the job nor is followed by
        an advance within hang.fault_grace: the process is wedged; stop it."""
        if self.fault_deadline is None or self.wedged.is_set():
            return
        if self.watcher.advances > self.fault_advances:  # it lived through the fault
            self.fault_deadline = None
            return
        if time.monotonic() >= self.fault_deadline:
            self.store.emit(self.job, self.attempt.n, "fault_stuck", grace=self.fault_grace,
                            message=f"the job printed a fatal fault and neither exited nor "
                            f"advanced within {self.fault_grace:g} s (hang.fault_grace); "
                            f"stopping it")  # fmt: skip
            self.wedged.set()

    def _check_budget(self) -> None:
        now = time.time()
        if self.limit_hit.is_set() or now < self.next_budget_check:
            return
        self.next_budget_check = now + BUDGET_EVERY
        job = self.store.get_job(self.job)
        if job is None:
            return
        used = budget.spent(job.spec, self.store.first_started(self.job, job.run_from), now)
        reason = budget.over_limit(job.spec, used)
        if reason is None:
            return
        progress = self.watcher.progress
        grace = float((progress or {}).get("epoch_seconds") or 0) * 1.1
        if self.limit_pending is None and budget.checkpoint_due(progress, now, grace):
            self.limit_pending = reason
            self.store.emit(self.job, self.attempt.n, "limit_reached", reason=reason,
                            waiting_for_checkpoint=True, **used.as_dict())  # fmt: skip
            self.next_budget_check = now + grace  # then stop anyway
        elif self.limit_pending is None or now >= self.next_budget_check:
            self._hit_limit(reason)

    def _hit_limit(self, reason: str) -> None:
        self.limit_reason = reason
        self.store.emit(self.job, self.attempt.n, "limit_stop", reason=reason)
        self.limit_hit.set()
