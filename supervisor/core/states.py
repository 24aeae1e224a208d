"""The job lifecycle: states, the allowed moves, and the one function that moves a job."""

from __future__ import annotations

from enum import Enum

from rsup.supervisor.core import errors


class JobState(str, Enum):
    QUEUED = "queued"
    PROBING = "probing"
    STARTING = "starting"
    RUNNING = "running"
    BACKOFF = "backoff"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def active(self) -> bool:
        """A state in which an attempt may be alive and must be watched."""
        return self in (JobState.STARTING, JobState.RUNNING, JobState.STOPPING)


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED})

S = JobState
# Every legal move, written down once. Anything else is a bug and is refused.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # a (re)submitted job waits for its device or dependencies, or goes straight on
    S.QUEUED: frozenset({S.PROBING, S.STARTING, S.STOPPED, S.FAILED}),
    # the probe decides: start on the GPU/CPU, or give up
    S.PROBING: frozenset({S.STARTING, S.QUEUED, S.STOPPED, S.FAILED}),
    # the shim is being launched; it may fail to launch at all
    S.STARTING: frozenset({S.RUNNING, S.BACKOFF, S.STOPPING, S.FAILED, S.SUCCEEDED, S.STOPPED}),
    # the attempt ends: success, a restart after backoff, a re-probe, or give up
    S.RUNNING: frozenset({S.SUCCEEDED, S.BACKOFF, S.PROBING, S.STOPPING, S.FAILED, S.QUEUED}),
    # waiting to restart; `rsup stop` cancels the pending restart
    S.BACKOFF: frozenset({S.STARTING, S.PROBING, S.QUEUED, S.STOPPED, S.FAILED}),
    # a stop was asked; the attempt is being torn down
    S.STOPPING: frozenset({S.STOPPED, S.SUCCEEDED, S.FAILED}),
    # a finished job may be started again by name
    S.SUCCEEDED: frozenset({S.QUEUED}),
    S.FAILED: frozenset({S.QUEUED}),
    S.STOPPED: frozenset({S.QUEUED}),
}


class IllegalTransition(errors.IllegalTransition):
    """A move the lifecycle does not allow (a bug in the caller, never user input)."""

    def __init__(self, job: str, old: JobState, new: JobState) -> None:
        super().__init__(f"job {job}: illegal state change {old.value} -> {new.value}")
        self.job, self.old, self.new = job, old, new


def check_transition(job: str, old: JobState, new: JobState) -> None:
    """Raise IllegalTransition unless old -> new is in TRANSITIONS."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(job, old, new)
