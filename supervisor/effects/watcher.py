"""Read one live attempt's files and say what was seen: fault lines, progress, checkpoints,
silence. The watcher only reads and reports; it sends no signal and writes no state
(effects.monitor stores what it reports, the drills and the runner act on it)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rsup.supervisor.core.hang import HangConfig, HangDetector, HangVerdict
from rsup.supervisor.core.job import Attempt, Job
from rsup.supervisor.core.slowdown import SlowdownWatch
from rsup.supervisor.effects import checkpoints, devices, launch
from rsup.supervisor.effects.follow import Follower
from rsup.supervisor.effects.proctime import tree_cpu
from rsup.supervisor.recognize import kernlog, progress, ranks
from rsup.supervisor.recognize.classify import LiveClassifier
from rsup.supervisor.recognize.diagnosis import Diagnosis, Finding
from rsup.workers import constants as C

FEED_SLICE = 256 * 1024  # output classified between two turns of the loop (a flood is MBs)
# What the Ultralytics worker says that is worth keeping with the job's events.
WORKER_EVENTS = frozenset({"run_started", "run_incomplete", "run_failed", "checkpoint_restored",
                           "checkpoint_invalid", "last_good_kept", "run_completed",
                           "checkpoint_saved"})  # fmt: skip

OutputListener = Callable[[str, int, bytes], None]

# Report kinds
EVENT = "event"  # an event to store as it is: fields["event"] names it
PROGRESS = "progress"  # the job's progress changed (fields: force)
JOB_PID = "job_pid"  # the shim said which pid the job has
DRILL_FIRED = "drill_fired"  # the Ultralytics worker fired a drill itself (fields: kind)


@dataclass(frozen=True)
class Report:
    kind: str
    fields: dict[str, Any] = field(default_factory=dict)


def event(name: str, **fields: Any) -> Report:
    return Report(EVENT, {"event": name, **fields})


class AttemptWatcher:
    """What one attempt's output.log and events.jsonl say, and how long it has been silent."""

    def __init__(self, job: Job, attempt: Attempt, output_listeners: list[OutputListener]):
        self.job, self.attempt = job, attempt
        self.output_listeners = output_listeners
        adir = Path(attempt.dir)
        self.output = Follower(adir / C.OUTPUT_LOG)
        self.events = Follower(adir / C.EVENTS_JSONL)
        self.classifier = LiveClassifier()
        self.slowdown = SlowdownWatch()
        self.detector = HangDetector(hang_config(job), time.monotonic())
        self.ranks = ranks.tracker_for(job.spec, self.detector.config)  # torchrun only
        self.hang_verdict: HangVerdict | None = None
        self.hang_rank: ranks.RankHang | None = None
        self.advanced = self.completed = self.progress_seen = False
        self.advances = 0  # epochs, steps or checkpoints that moved the job forward
        self.position: tuple[float, ...] = ()  # the furthest (epoch, step) reported
        self.pace_start: tuple[float, float] | None = None  # (time, step) of the first report
        self.output_pace: tuple[float, float] | None = None  # (time, fraction done) first seen
        self.last_milestone: dict[str, Any] | None = None  # the last progress point stored
        self.progress: dict[str, Any] | None = None
        self.faults_seen: set[tuple[str, bool]] = set()  # (signature, survivable) reported
        self.pending = b""
        self.backlog, self.fed = b"", 0  # output read but not classified yet
        self.job_pid: int | None = None
        self.job_start: int | None = None
        self.checkpoint = checkpoints.stamp(job.spec.checkpoint)  # the one before this attempt

    def diagnosis(self) -> Diagnosis:
        return self.classifier.verdict()

    def poll_steps(self) -> Iterator[list[Report]]:
        """Read what is new and classify it a slice at a time: the reports of each slice."""
        reports = self._note_pid()
        # Events first: progress reported before a fatal line must not count as progress
        # after it (that would mark an OOM as survived).
        lines = self.events.read()
        if lines:
            self.detector.progress(time.monotonic())
            reports += self._events(lines)
        data = self.output.read()
        if data:
            reports += self._output_progress(data)
            for listener in self.output_listeners:
                listener(self.job.name, self.attempt.n, data)
            if self.ranks is not None:
                self.ranks.feed_output(data, time.monotonic())
            self.backlog, self.fed = self.backlog[self.fed :] + data, 0
        while self.fed < len(self.backlog):
            piece = self.backlog[self.fed : self.fed + FEED_SLICE]
            self.fed += len(piece)  # before the yield: a cancelled poll never feeds it twice
            reports += self._faults(self.classifier.feed(piece))
            yield reports
            reports = []
        self.backlog, self.fed = b"", 0
        if reports:
            yield reports

    def poll(self) -> list[Report]:
        return [r for step in self.poll_steps() for r in step]

    def close(self) -> list[Report]:
        """What is left once the attempt has ended."""
        reports = self.poll() + self._faults(self.classifier.close())
        if self.ranks is not None:
            self.ranks.read_error_files(Path(self.attempt.dir) / ranks.LOG_DIR)
            failure = self.ranks.first_failure()
            if failure is not None:
                reports.append(event("rank_failed", message=failure.describe(), **asdict(failure)))
        self.output.close()
        self.events.close()
        return reports

    def check_checkpoint(self) -> list[Report]:
        """A new or newer checkpoint on disk is progress, heartbeat or not."""
        now = checkpoints.stamp(self.job.spec.checkpoint)
        if now is None or (self.checkpoint is not None and now[1] <= self.checkpoint[1]):
            return []  # none yet, or none newer than the last one seen
        self.checkpoint = now
        self.advanced = True
        self.advances += 1
        self.detector.progress(time.monotonic())
        return [event("checkpoint_saved", path=now[0], seen="on disk")]

    def check_hang(self) -> Report | None:
        """A `hang_detected` report once the job is past its silence limit, else None."""
        now = time.monotonic()
        if self.hang_verdict is not None:
            return None
        # A rank silent while its own process idles is hung even when its peers spin in
        # a collective (NCCL) and keep the tree busy.
        rank = self.ranks.check_hang(now, ranks.sample_process) if self.ranks else None
        verdict = self.detector.check(now, self._tree_cpu()) or (rank.verdict if rank else None)
        if verdict is None:
            return None
        self.hang_verdict, self.hang_rank = verdict, rank
        evidence = self._hang_evidence(verdict.silent_for)
        if rank is not None:
            evidence.update(rank=rank.rank, rank_pid=rank.pid, silent_ranks=list(rank.silent),
                            rank_message=rank.describe())  # fmt: skip
        return event("hang_detected", silent_for=round(verdict.silent_for, 2), limit=verdict.limit,
                     limit_why=verdict.why, cpu_cores=round(verdict.cpu_cores, 3),
                     busy=verdict.busy, message=verdict.describe(), **evidence)  # fmt: skip

    # reading -----------------------------------------------------------------

    def _note_pid(self) -> list[Report]:
        if self.job_pid is not None:
            return []
        info = launch.shim_info(Path(self.attempt.dir))
        if not info or not info.get("job_pid"):
            return []
        self.job_pid, self.job_start = int(info["job_pid"]), info.get("job_start_time")
        return [Report(JOB_PID, {"pid": self.job_pid})]

    def _faults(self, findings: list[Finding]) -> list[Report]:
        reports = []
        for f in findings:
            # once per signature, and once more when a line it reads is fatal after lines it
            # read were survivable (a failure a later line shows the job did not live through)
            if (f.signature, f.survivable) not in self.faults_seen:
                self.faults_seen.add((f.signature, f.survivable))
                fields = {"signature": f.signature, "line": f.line, "text": f.text[:500]}
                if f.survivable:  # the job may live through it: no reason to stop it early
                    fields["survivable"] = True
                reports.append(event("fault_detected", category=f.category, **fields))
        return reports

    def _events(self, data: bytes) -> list[Report]:
        data = self.pending + data
        *complete, self.pending = data.split(b"\n")
        reports: list[Report] = []
        for raw in complete:
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict):
                reports += self._event(record)
        return reports

    def _event(self, record: dict[str, Any]) -> list[Report]:
        if self.ranks is not None:
            self.ranks.feed_event(record, time.monotonic())
        kind = record.pop("event", None)
        record.pop("ts", None)
        if kind == "progress":
            self._note_position(record)
            return self._progress(record, force=False)
        if kind == "epoch_end":
            self.advanced = True
            self.advances += 1
            eta = _eta(record)
            if eta is not None:
                record["eta_s"] = eta
            reports = self._slowdown(record)
            return [*reports, *self._progress(record, force=True), event("progress", **record)]
        if kind == "checkpoint_saved":
            self.advanced = True
            self.advances += 1
            if isinstance(record.get("epoch"), int):  # what a restart resumes after
                self.progress = {**(self.progress or {}), "saved_epoch": record["epoch"]}
                return [Report(PROGRESS, {"force": True}), event(kind, **record)]
        elif kind == "run_completed":
            self.completed = True
        elif kind == "drill_fired":
            return [Report(DRILL_FIRED, {"kind": str(record.get("kind"))})]
        return [event(str(kind), **record)] if kind in WORKER_EVENTS else []

    def _output_progress(self, data: bytes) -> list[Report]:
        """Progress the job printed (tqdm, HF, Lightning, Epoch N/M). Output keeps the job
        alive unless it is nothing but redraws of a bar whose counter did not move."""
        found = progress.latest(data)
        moved = False
        if found:
            where = progress.position(found)
            moved = bool(where) and where > self.position
            if moved:
                self.advances += 1 if self.position else 0
                self.position = where
        if moved or not progress.only_progress(data):
            self.detector.progress(time.monotonic())
        if not found:
            return []
        if found.get("eta_s") is None:
            eta = self._output_pace(found)
            if eta is not None:
                found["eta_s"] = eta
        # shown in status, but not a heartbeat: the policy's "reports progress" is the job's
        # own word (events), which says when work was saved
        self.progress = {**(self.progress or {}), **found, "at": time.time(), "source": "output"}
        # Ultralytics' worker reports its epochs itself (epoch_end)
        milestone = self._milestone(found) if moved and self.job.kind != "ultralytics" else None
        if milestone is not None:  # the curve `rsup report` and the dashboard draw
            return [Report(PROGRESS, {"force": False}), event("progress", **milestone)]
        return [Report(PROGRESS, {"force": False})]

    def _milestone(self, found: dict[str, Any]) -> dict[str, Any] | None:
        """A point worth keeping for the run's curve: a new epoch, or a fiftieth more of
        the steps; None between them."""
        epoch, step, total = found.get("epoch"), found.get("step"), found.get("total")
        last = self.last_milestone
        new_epoch = isinstance(epoch, int) and (last is None or epoch != last.get("epoch"))
        stride = max(1, int(total) // 50) if isinstance(total, int) else 1
        far = isinstance(step, int) and (last is None or step >= (last.get("step") or 0) + stride
                                         or step < (last.get("step") or 0))  # fmt: skip
        if not (new_epoch or (epoch is None and far)):
            return None
        point = {
            "epoch": epoch,
            "epochs": found.get("epochs"),
            "step": step,
            "steps": total,
            "loss": found.get("loss"),
            "eta_s": found.get("eta_s"),
            "source": "output",
        }
        self.last_milestone = {k: v for k, v in point.items() if v is not None}
        return self.last_milestone

    def _output_pace(self, found: dict[str, Any]) -> float | None:
        """Seconds left at the pace the printed counters moved in this attempt."""
        done, now = progress.fraction(found), time.monotonic()
        if done is None:
            return None
        if self.output_pace is None or done < self.output_pace[1]:
            self.output_pace = (now, done)
            return None
        t0, d0 = self.output_pace
        if now <= t0 or done <= d0:
            return None
        return round((1.0 - done) * (now - t0) / (done - d0), 1)

    def _pace(self, record: dict[str, Any], now: float) -> float | None:
        """Seconds left at the pace of the steps reported so far in this attempt."""
        step, total = record.get("step"), record.get("total")
        if not isinstance(step, (int, float)) or not isinstance(total, (int, float)):
            return None
        if self.pace_start is None:
            self.pace_start = (now, float(step))
            return None
        t0, s0 = self.pace_start
        if now <= t0 or step <= s0:
            return None
        return round((total - step) * (now - t0) / (step - s0), 1)

    def _note_position(self, record: dict[str, Any]) -> None:
        """A progress report counts as an advance only when its counters moved forward."""
        keys = ("epoch", "step", "batch")
        position = tuple(float(record[k]) for k in keys if isinstance(record.get(k), (int, float)))
        if position and position > self.position:
            if self.position:
                self.advances += 1
            self.position = position

    def _progress(self, record: dict[str, Any], force: bool) -> list[Report]:
        self.progress_seen = True
        self.classifier.note_progress()
        now = time.time()
        self.progress = {**(self.progress or {}), **record, "at": now, "heartbeat": True}
        eta = self._pace(record, now)
        if eta is not None:
            self.progress["eta_s"] = eta
        return [Report(PROGRESS, {"force": force})]

    def _slowdown(self, record: dict[str, Any]) -> list[Report]:
        seconds = record.get("epoch_seconds")
        if not isinstance(seconds, (int, float)) or seconds <= 0:
            return []
        message = self.slowdown.epoch(float(seconds))
        record["slow"] = self.slowdown.alerted
        return [event("slowdown", message=message, epoch=record.get("epoch"))] if message else []

    def _hang_evidence(self, silent_for: float) -> dict[str, Any]:
        """GPU utilization and kernel lines, where readable: a hung GPU at 0 % next to
        an amdgpu ring timeout says more than silence alone."""
        now = time.time()
        evidence: dict[str, Any] = {}
        device = self.job.device
        index = devices.index_of(device) if device and devices.is_gpu(device) else None
        gpus = [g for g in devices.telemetry() if g.get("index") == index]
        if gpus:
            evidence["gpu"] = gpus[0]
        kernel = kernlog.gpu_trouble(now - silent_for, now)
        if kernel:
            evidence["kernel"] = kernel
        return evidence

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


def hang_config(job: Job) -> HangConfig:
    hang = job.spec.hang
    return HangConfig(
        timeout=hang.timeout,
        startup_timeout=hang.startup_timeout,
        hard_factor=hang.hard_limit_factor,
        adapted=job.hang_timeout,
        busy_limit=hang.busy_limit,
    )
