"""A job and its attempts as the core sees them: plain records, stored by effects.store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rsup.supervisor.core.plan import Plan
from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.core.states import JobState


@dataclass
class Job:
    name: str
    owner_uid: int
    spec: JobSpec
    state: JobState
    reason: str = ""
    created: float = 0.0
    updated: float = 0.0
    attempts: int = 0
    restarts: int = 0
    stalled: int = 0
    failures: int = 0
    same_fault: int = 0
    next_start_at: float | None = None
    device: str | None = None
    last_fault: str | None = None
    progress: dict[str, Any] | None = None
    plan: Plan = field(default_factory=Plan)
    drills: list[dict[str, Any]] = field(default_factory=list)
    hang_timeout: float | None = None
    # where BACKOFF leads once its delay is over: STARTING, or PROBING after a GPU fault
    resume_to: JobState | None = None
    run_from: int = 0  # attempts of earlier runs (`rsup start` again): history, not counters

    @property
    def run_attempts(self) -> int:
        """Attempts started in this run."""
        return self.attempts - self.run_from

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def batch(self) -> int | None:
        """The batch size in force: the plan's, else the spec's (None: unknown or auto)."""
        if self.plan.batch is not None:
            return self.plan.batch
        return _positive_int((self.spec.train or {}).get("batch")) or self.spec.batch

    @property
    def workers(self) -> int | None:
        if self.plan.workers is not None:
            return self.plan.workers
        train_workers = (self.spec.train or {}).get("workers")
        if isinstance(train_workers, int) and not isinstance(train_workers, bool):
            return train_workers
        return self.spec.workers


@dataclass
class Attempt:
    job: str
    n: int
    dir: str
    started: float
    ended: float | None = None
    shim_pid: int | None = None
    shim_start_time: int | None = None
    job_pid: int | None = None
    exit: dict[str, Any] | None = None
    outcome: str | None = None
    fault: str | None = None
    processed: int = 0


def _positive_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
