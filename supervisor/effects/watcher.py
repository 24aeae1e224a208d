"""Watch one live attempt: its output (faults), its events (progress) and its silence (hangs)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import structlog
from rsup.supervisor.core import budget
from rsup.supervisor.core.hang import HangConfig, HangDetector, HangVerdict
from rsup.supervisor.core.job import Attempt, Job
from rsup.supervisor.core.slowdown import SlowdownWatch
from rsup.supervisor.effects import devices, launch
from rsup.supervisor.effects.follow import Follower
from rsup.supervisor.effects.inotify import dir_watch
from rsup.supervisor.effects.proctime import tree_cpu
from rsup.supervisor.effects.procwait import signal_if_same, wait_event
from rsup.supervisor.effects.store import Store
from rsup.supervisor.recognize import kernlog, ranks
from rsup.supervisor.recognize.classify import Diagnosis, LiveClassifier
from rsup.workers import constants as C

log = structlog.get_logger("rsupd")
POLL = 0.5  # how often the files are read when inotify cannot be had
# With inotify, new output wakes the monitor at once; otherwise it wakes for the hang check,
# at a thirtieth of the silence limit in force, kept within these bounds.
TICK_MIN, TICK_MAX = 1.0, 5.0
PROGRESS_WRITE_EVERY = 1.0  # throttle job.progress writes to the store
DRILLS_JSON = "drills.json"
BUDGET_EVERY = 5.0  # seconds between runtime/cost checks
FEED_SLICE = 256 * 1024  # output classified between two turns of the loop (a flood is MBs)
# What the Ultralytics worker says that is worth keeping with the job's events.
WORKER_EVENTS = frozenset(
    {
        "run_started",
        "run_incomplete",
        "run_failed",
        "checkpoint_restored",
        "checkpoint_invalid",
        "last_good_kept",
    }
)


OutputListener = Callable[[str, int, bytes], None]


class AttemptMonitor:
    def __init__(
        self, store: Store, job: str, attempt: Attempt, output_listeners: list[OutputListener]
    ) -> None:
        self.store, self.job, self.attempt = store, job, attempt
        self.output_listeners = output_listeners
        adir = Path(attempt.dir)
        self.output = Follower(adir / C.OUTPUT_LOG)
        self.events = Follower(adir / C.EVENTS_JSONL)
        self.classifier = LiveClassifier()
        self.hung = asyncio.Event()
        self.limit_hit = asyncio.Event()
        self.slowdown = SlowdownWatch()
        self.limit_reason: str | None = None
        self.limit_pending: str | None = None  # reached, waiting for a checkpoint that is due
        self.next_budget_check = 0.0
        self.next_hang_check = 0.0
        self.hang_verdict: HangVerdict | None = None
        self.advanced = False
        self.completed = False
        self.progress_seen = False
        self.progress: dict[str, Any] | None = None
        self.faults_emitted: set[str] = set()
        self.drills_fired: list[str] = []
        self.pending = b""
        self.backlog, self.fed = b"", 0  # output read but not classified yet
        self.job_pid: int | None = None
        self.job_start: int | None = None
        self.last_progress_write = 0.0
        self.progress_unsaved = False
        record = store.get_job(job) or _missing(job)
        self.kind = record.kind
        self.detector = HangDetector(_hang_config(record), time.monotonic())
        self.ranks = ranks.tracker_for(record.spec, self.detector.config)  # torchrun only
        self.hang_rank: ranks.RankHang | None = None
        self.drills = [d for d in record.drills if not d.get("fired")]
        if self.kind == "ultralytics" and self.drills:
            self._write_drills()

    # drills ------------------------------------------------------------------

    def add_drill(self, drill: dict[str, Any]) -> None:
        self.drills.append(drill)
        if self.kind == "ultralytics":
            self._write_drills()
        else:
            self.poll()  # aim with what the job has said up to now (ranks' pids)
            self._fire_due()

    def _write_drills(self) -> None:
        path = Path(self.attempt.dir) / DRILLS_JSON
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.drills))
        tmp.replace(path)

    def _fire_due(self) -> None:
        """Command jobs: rsupd does the drill itself (SIGKILL or SIGSTOP of the job)."""
        epoch = (self.progress or {}).get("epoch")
        for drill in list(self.drills):
            due = drill.get("at_epoch") is None or (
                epoch is not None and epoch >= drill["at_epoch"]
            )
            target = self._drill_target()
            if due and target is not None:
                sig = signal.SIGKILL if drill["kind"] == "kill" else signal.SIGSTOP
                self._mark_fired(drill, target[0])
                signal_if_same(target[0], target[1], sig)

    def _drill_target(self) -> tuple[int, int | None] | None:
        """The process a kill/hang drill hits: the job, or for torchrun its highest rank
        (the agent itself is not what fails in the field)."""
        rank_pids = self.ranks.pids() if self.ranks is not None else {}
        if rank_pids:
            pid = rank_pids[max(rank_pids)]
            return pid, launch.start_time(pid)
        return (self.job_pid, self.job_start) if self.job_pid is not None else None

    def _mark_fired(self, drill: dict[str, Any], pid: int | None = None) -> None:
        if drill["kind"] not in self.drills_fired:
            self.drills_fired.append(drill["kind"])
        self.drills = [d for d in self.drills if d.get("id") != drill.get("id")]
        job = self.store.get_job(self.job)
        if job is None:
            return
        drills = [{**d, "fired": True} if d.get("id") == drill.get("id") else d for d in job.drills]
        self.store.update_job(self.job, drills=drills)
        self.store.emit(
            self.job,
            self.attempt.n,
            "drill_fired",
            kind=drill["kind"],
            at_epoch=drill.get("at_epoch"),
            epoch=(self.progress or {}).get("epoch"),
            pid=pid,
            rank=self._rank_of(pid),
        )

    def _rank_of(self, pid: int | None) -> int | None:
        if self.ranks is None or pid is None:
            return None
        return next((rank for rank, p in self.ranks.pids().items() if p == pid), None)

    async def run(self) -> None:
        wake = asyncio.Event()
        watch = dir_watch().watch(Path(self.attempt.dir), wake.set)
        try:
            while True:
                for _ in self.poll_steps():
                    await asyncio.sleep(0)  # requests get in between slices of a flood
                period = self.detector.check_every(TICK_MIN, TICK_MAX)
                self._check_hang(period)
                self._check_budget()
                blind = watch is None or watch.lost
                await wait_event(wake, POLL if blind else period)
                wake.clear()
        finally:
            if watch is not None:
                watch.close()

    def drain(self) -> None:
        """Read what is left once the attempt has ended."""
        self.poll()
        self._save_progress(force=True)
        if self.detector.learned:  # the job's rhythm, for its next attempt
            self.store.update_job(self.job, hang_timeout=self.detector.timeout)
        for finding in self.classifier.close():
            self._fault(finding.signature, finding.category, finding.line, finding.text)
        if self.ranks is not None:
            self.ranks.read_error_files(Path(self.attempt.dir) / ranks.LOG_DIR)
            failure = self.ranks.first_failure()
            if failure is not None:
                self.store.emit(self.job, self.attempt.n, "rank_failed",
                                message=failure.describe(), **asdict(failure))  # fmt: skip
        self.output.close()
        self.events.close()

    def diagnosis(self) -> Diagnosis:
        return self.classifier.verdict()

    def poll(self) -> None:
        for _ in self.poll_steps():
            pass

    def poll_steps(self) -> Iterator[None]:
        """Read what is new and classify it a slice at a time, yielding after each slice."""
        self._note_pid()
        # Events first: progress reported before a fatal line must not count as progress
        # after it (that would mark an OOM as survived).
        lines = self.events.read()
        if lines:
            self.detector.progress(time.monotonic())
            self._events(lines)
        data = self.output.read()
        if data:
            self.detector.progress(time.monotonic())
            for listener in self.output_listeners:
                listener(self.job, self.attempt.n, data)
            if self.ranks is not None:
                self.ranks.feed_output(data, time.monotonic())
            self.backlog, self.fed = self.backlog[self.fed :] + data, 0
        while self.fed < len(self.backlog):
            piece = self.backlog[self.fed : self.fed + FEED_SLICE]
            self.fed += len(piece)  # before the yield: a cancelled poll never feeds it twice
            for finding in self.classifier.feed(piece):
                self._fault(finding.signature, finding.category, finding.line, finding.text)
            yield
        self.backlog, self.fed = b"", 0
        self._save_progress(force=False)

    def _note_pid(self) -> None:
        if self.job_pid is not None:
            return
        info = launch.shim_info(Path(self.attempt.dir))
        if info and info.get("job_pid"):
            self.job_pid, self.job_start = int(info["job_pid"]), info.get("job_start_time")
            self.store.update_attempt(self.job, self.attempt.n, job_pid=self.job_pid)
            if self.drills and self.kind != "ultralytics":
                self._fire_due()

    def _fault(self, signature: str, category: str, line: int | None, text: str) -> None:
        if signature in self.faults_emitted:
            return
        self.faults_emitted.add(signature)
        self.store.emit(
            self.job,
            self.attempt.n,
            "fault_detected",
            category=category,
            signature=signature,
            line=line,
            text=text[:500],
        )

    def _events(self, data: bytes) -> None:
        data = self.pending + data
        *complete, self.pending = data.split(b"\n")
        for raw in complete:
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict):
                self._event(record)

    def _event(self, record: dict[str, Any]) -> None:
        if self.ranks is not None:
            self.ranks.feed_event(record, time.monotonic())
        kind = record.pop("event", None)
        record.pop("ts", None)
        if kind == "progress":
            self._progress(record, force=False)
        elif kind == "epoch_end":
            self.advanced = True
            eta = _eta(record)
            if eta is not None:
                record["eta_s"] = eta
            self._slowdown(record)
            self._progress(record, force=True)
            self.store.emit(self.job, self.attempt.n, "progress", **record)
        elif kind == "checkpoint_saved":
            self.advanced = True
            if self.limit_pending is not None:
                self._hit_limit(f"{self.limit_pending}; stopped after the checkpoint of epoch "
                                f"{record.get('epoch')}")  # fmt: skip
            self.store.emit(self.job, self.attempt.n, "checkpoint_saved", **record)
        elif kind == "run_completed":
            self.completed = True
            self.store.emit(self.job, self.attempt.n, "run_completed", **record)
        elif kind == "drill_fired":
            self.drills_fired.append(str(record.get("kind")))
            match = [d for d in self.drills if d.get("kind") == record.get("kind")]
            if match:
                self._mark_fired(match[0])
        elif kind in WORKER_EVENTS:
            self.store.emit(self.job, self.attempt.n, kind, **record)

    def _progress(self, record: dict[str, Any], force: bool) -> None:
        self.progress_seen = True
        self.classifier.note_progress()
        self.progress = {**(self.progress or {}), **record, "at": time.time()}
        if self.drills and self.kind != "ultralytics":
            self._fire_due()
        self.progress_unsaved = True
        self._save_progress(force)

    def _save_progress(self, force: bool) -> None:
        """Store the latest progress at most once a second (at once when forced): the
        last report of a burst is written a moment later, never dropped."""
        now = time.monotonic()
        due = force or now - self.last_progress_write >= PROGRESS_WRITE_EVERY
        if self.progress_unsaved and due:
            self.last_progress_write, self.progress_unsaved = now, False
            self.store.update_job(self.job, progress=self.progress)

    def _check_hang(self, period: float) -> None:
        """At most once a `period`: a job printing fast wakes the monitor far more often."""
        now = time.monotonic()
        if self.hung.is_set() or now < self.next_hang_check:
            return
        self.next_hang_check = now + period
        # A rank silent while its own process idles is hung even when its peers spin in
        # a collective (NCCL) and keep the tree busy.
        rank = self.ranks.check_hang(now, ranks.sample_process) if self.ranks else None
        verdict = self.detector.check(now, self._tree_cpu()) or (rank.verdict if rank else None)
        if verdict is None:
            return
        self.hang_verdict, self.hang_rank = verdict, rank
        evidence = self._hang_evidence(verdict.silent_for)
        if rank is not None:
            evidence.update(rank=rank.rank, rank_pid=rank.pid, silent_ranks=list(rank.silent),
                            rank_message=rank.describe())  # fmt: skip
        self.store.emit(
            self.job,
            self.attempt.n,
            "hang_detected",
            silent_for=round(verdict.silent_for, 2),
            limit=verdict.limit,
            cpu_cores=round(verdict.cpu_cores, 3),
            busy=verdict.busy,
            message=verdict.describe(),
            **evidence,
        )
        if self.detector.learned:
            self.store.update_job(self.job, hang_timeout=self.detector.timeout)
        self.hung.set()

    def _slowdown(self, record: dict[str, Any]) -> None:
        seconds = record.get("epoch_seconds")
        if not isinstance(seconds, (int, float)) or seconds <= 0:
            return
        message = self.slowdown.epoch(float(seconds))
        record["slow"] = self.slowdown.alerted
        if message:
            self.store.emit(self.job, self.attempt.n, "slowdown", message=message,
                            epoch=record.get("epoch"))  # fmt: skip

    def _check_budget(self) -> None:
        now = time.time()
        if self.limit_hit.is_set() or now < self.next_budget_check:
            return
        self.next_budget_check = now + BUDGET_EVERY
        job = self.store.get_job(self.job)
        if job is None:
            return
        used = budget.spent(job.spec, self.store.first_started(self.job), now)
        reason = budget.over_limit(job.spec, used)
        if reason is None:
            return
        grace = float((self.progress or {}).get("epoch_seconds") or 0) * 1.1
        if self.limit_pending is None and budget.checkpoint_due(self.progress, now, grace):
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

    def _hang_evidence(self, silent_for: float) -> dict[str, Any]:
        """GPU utilization and kernel lines, where readable: a hung GPU at 0 % next to
        an amdgpu ring timeout says more than silence alone."""
        now = time.time()
        evidence: dict[str, Any] = {}
        gpus = [g for g in devices.telemetry() if g.get("index") == self._device_index()]
        if gpus:
            evidence["gpu"] = gpus[0]
        kernel = kernlog.gpu_trouble(now - silent_for, now)
        if kernel:
            evidence["kernel"] = kernel
        return evidence

    def _device_index(self) -> str | None:
        job = self.store.get_job(self.job)
        device = job.device if job else None
        return devices.index_of(device) if device and devices.is_gpu(device) else None

    def _tree_cpu(self) -> float | None:
        # The shim is the subreaper of the whole tree (setsid'ed grandchildren included).
        shim = self.attempt.shim_pid
        if shim is None or not launch.alive_as(shim, self.attempt.shim_start_time):
            return None
        return tree_cpu(shim)


def _eta(record: dict[str, Any]) -> float | None:
    """Seconds left at this epoch's pace."""
    seconds, epoch, epochs = (record.get(k) for k in ("epoch_seconds", "epoch", "epochs"))
    if not all(isinstance(v, (int, float)) for v in (seconds, epoch, epochs)):
        return None
    return float(round(float(seconds) * max(0, int(epochs) - int(epoch)), 1))  # type: ignore[arg-type]


def _hang_config(job: Job) -> HangConfig:
    hang = job.spec.hang
    return HangConfig(
        timeout=hang.timeout,
        startup_timeout=hang.startup_timeout,
        hard_factor=hang.hard_limit_factor,
        adapted=job.hang_timeout,
    )


def _missing(job: str) -> Any:
    raise KeyError(job)
