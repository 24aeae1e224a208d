"""Fault drills of one attempt (`rsup inject`): the one owner of their state.

A drill is stored with the job (`jobs.drills`, `fired` once done). An Ultralytics job's
worker fires its own drills (it reads drills.json and raises the real fault in the
trainer); for other kinds rsupd fires them here, SIGKILL or SIGSTOP of the job (for
torchrun: of its highest rank), once the epoch it waits for is reached.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from rsup.supervisor.effects import launch
from rsup.supervisor.effects.procwait import signal_if_same
from rsup.supervisor.effects.store import Store
from rsup.supervisor.recognize import ranks as rank_tracking

DRILLS_JSON = "drills.json"


class Drills:
    def __init__(self, store: Store, job: str, n: int, attempt_dir: Path, kind: str) -> None:
        self.store, self.job, self.n, self.dir, self.kind = store, job, n, attempt_dir, kind
        record = store.get_job(job)
        self.pending = [d for d in (record.drills if record else []) if not d.get("fired")]
        self.fired: list[str] = []  # kinds fired in this attempt
        if any(self.in_job(d) for d in self.pending):
            self._write()

    def in_job(self, drill: dict[str, Any]) -> bool:
        """Fired inside the job: every drill of an Ultralytics job (its trainer), and the
        oom drill of any job (a real allocation failure, raised by heartbeat.step())."""
        return self.kind == "ultralytics" or drill.get("kind") == "oom"

    def add(self, drill: dict[str, Any]) -> None:
        self.pending.append(drill)
        if self.in_job(drill):
            self._write()

    def fire_due(self, epoch: int | None, target: tuple[int, int | None] | None,
                 ranks: rank_tracking.RankTracker | None) -> None:  # fmt: skip
        """Fire every pending drill whose epoch has come, at `target` (pid, start time)."""
        if target is None:
            return
        for drill in [d for d in self.pending if not self.in_job(d)]:
            wanted = drill.get("at_epoch")
            if wanted is None or (epoch is not None and epoch >= wanted):
                sig = signal.SIGKILL if drill["kind"] == "kill" else signal.SIGSTOP
                late = wanted is not None and epoch is not None and epoch > wanted
                self._mark(drill, epoch, target[0], _rank_of(ranks, target[0]), late)
                signal_if_same(target[0], target[1], sig)

    def worker_fired(self, kind: str, epoch: int | None) -> None:
        """The job fired a drill of this kind itself (Ultralytics worker, heartbeat.step)."""
        self.fired.append(kind)
        match = [d for d in self.pending if d.get("kind") == kind]
        if match:
            self._mark(match[0], epoch, None, None, False)

    def _mark(self, drill: dict[str, Any], epoch: int | None, pid: int | None,
              rank: int | None, late: bool) -> None:  # fmt: skip
        if drill["kind"] not in self.fired:
            self.fired.append(drill["kind"])
        self.pending = [d for d in self.pending if d.get("id") != drill.get("id")]
        job = self.store.get_job(self.job)
        if job is None:
            return
        drills = [{**d, "fired": True} if d.get("id") == drill.get("id") else d for d in job.drills]
        extra = {"late": f"epoch {drill.get('at_epoch')} had passed; fired at once"} if late else {}
        with self.store.tx():
            self.store.update_job(self.job, drills=drills)
            fields = {"at_epoch": drill.get("at_epoch"), "epoch": epoch, "rank": rank, **extra}
            self.store.emit(self.job, self.n, "drill_fired", kind=drill["kind"], pid=pid, **fields)

    def _write(self) -> None:
        path = self.dir / DRILLS_JSON
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([d for d in self.pending if self.in_job(d)]))
        tmp.replace(path)


def target(
    job_pid: int | None, job_start: int | None, ranks: rank_tracking.RankTracker | None
) -> tuple[int, int | None] | None:
    """The process a kill/hang drill hits: the job, or for torchrun its highest rank
    (the agent itself is not what fails in the field)."""
    rank_pids = ranks.pids() if ranks is not None else {}
    if rank_pids:
        pid = rank_pids[max(rank_pids)]
        return pid, launch.start_time(pid)
    return (job_pid, job_start) if job_pid is not None else None


def _rank_of(ranks: rank_tracking.RankTracker | None, pid: int | None) -> int | None:
    if ranks is None or pid is None:
        return None
    return next((rank for rank, p in ranks.pids().items() if p == pid), None)
