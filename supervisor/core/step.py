"""The one pure step of the lifecycle: (job, event, now) -> (state, decision, plan, effects).

The engine stores a step in one transaction (effects.engine.commit_step) and only then
carries out its effects, so a crash leaves the old step or the new one, never half.
Nothing here reads a file or a clock: `now` is passed in (wall-clock seconds).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rsup.supervisor.core import policy
from rsup.supervisor.core.budget import Spent, over_limit
from rsup.supervisor.core.conclude import Evidence, conclude
from rsup.supervisor.core.job import Job
from rsup.supervisor.core.plan import Plan
from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.core.states import JobState
from rsup.workers import constants as C

S = JobState
# BACKOFF is a wait, not an end: its target (STARTING, or PROBING) is stored with it.
NEXT_STATE = {
    policy.SUCCEED: S.SUCCEEDED,
    policy.FAIL: S.FAILED,
    policy.STOP: S.STOPPED,
    policy.RESTART: S.BACKOFF,
    policy.REPROBE: S.BACKOFF,
}


@dataclass(frozen=True)
class Ended:
    """The event: attempt `n` is over, with what the effects gathered about it."""

    n: int
    evidence: Evidence
    exit: dict[str, Any] | None  # exit.json as the shim wrote it (None: never written)
    reports_progress: bool = False  # the job has said where it is, now or before
    stop_reason: str | None = None  # why rsupd itself stopped it (a budget), if it did


@dataclass(frozen=True)
class Effect:
    """Something to carry out once the step is stored."""

    kind: str  # INVALIDATE_PROBE | PRUNE
    device: str | None = None
    attempt: int | None = None


INVALIDATE_PROBE = "invalidate_probe"  # a GPU fault: the cached probe verdict is stale
PRUNE = "prune"  # retention: old attempt folders may go


@dataclass(frozen=True)
class Step:
    state: JobState
    reason: str
    decision: policy.Decision
    outcome: policy.Outcome
    plan: Plan
    job: dict[str, Any] = field(default_factory=dict)  # job columns to store
    attempt: dict[str, Any] = field(default_factory=dict)  # attempt columns to store
    events: tuple[tuple[str, dict[str, Any]], ...] = ()
    effects: tuple[Effect, ...] = ()


def limits_for(spec: JobSpec) -> policy.Limits:
    backoff = spec.restart.backoff
    return policy.Limits(
        max_attempts=spec.restart.max_attempts,
        reset_after=spec.restart.reset_after,
        backoff=policy.Backoff(initial=backoff.initial, factor=backoff.factor, maximum=backoff.max),
        cpu_fallback=spec.fallback.cpu,
    )


def history_for(job: Job, outcome: policy.Outcome, reports_progress: bool) -> policy.History:
    """The job's history including the attempt that just ended."""
    failed = not outcome.clean_exit and not outcome.stop_requested
    stalled = 0 if outcome.advanced else job.stalled + (1 if failed else 0)
    return policy.History(
        attempts=job.attempts,
        restarts=job.restarts,
        failures=job.failures + (1 if failed and not outcome.advanced else 0),
        stalled=stalled,
        same_category=job.same_fault + 1 if job.last_fault == outcome.category else 1,
        reports_progress=reports_progress or _reported(job.progress),
        device=job.plan.device or job.device or "auto",
        batch=job.batch,
        workers=job.workers,
    )


def _reported(progress: dict[str, Any] | None) -> bool:
    """The job said where it is itself (heartbeat, worker), not only in bars rsup read."""
    if not progress:
        return False
    return bool(progress.get("heartbeat")) or "source" not in progress


def attempt_ended(job: Job, ended: Ended, now: float) -> Step:
    """Conclude why attempt n ended and decide, once, what happens next."""
    return settle(job, ended, conclude(ended.evidence), now)


def settle(
    job: Job, ended: Ended, outcome: policy.Outcome, now: float, limits: policy.Limits | None = None
) -> Step:
    """The step for an attempt whose outcome is concluded: decision, plan, rows, events."""
    history = history_for(job, outcome, ended.reports_progress)
    decision = policy.decide(outcome, history, limits or limits_for(job.spec))
    plan = job.plan.changed(**decision.overrides) if decision.overrides else job.plan
    state, reason = _next(job, ended, decision, outcome)
    fault = None if outcome.category == C.NONE else outcome.category
    job_changes = {
        "restarts": decision.restarts,
        "stalled": history.stalled,
        "plan": plan,
        "failures": history.failures,
        "same_fault": history.same_category,
        "last_fault": fault or job.last_fault,
        "next_start_at": now + decision.delay,
        "device": plan.device or job.device,
        "resume_to": _resume_to(state, decision),
    }
    attempt_changes = {
        "ended": now,
        "exit": ended.exit,
        "fault": fault,
        "outcome": json.dumps(decision.as_event()),
        "processed": 1,
    }
    events = (
        ("attempt_ended", {"exit": ended.exit, "category": outcome.category}),
        ("decision", decision.as_event()),
    )
    effects = [Effect(PRUNE, attempt=ended.n)]
    if fault in policy.GPU_CATEGORIES:
        effects.insert(0, Effect(INVALIDATE_PROBE, device=job.device))
    return Step(state, reason, decision, outcome, plan, job_changes, attempt_changes,
                events, tuple(effects))  # fmt: skip


def _next(
    job: Job, ended: Ended, decision: policy.Decision, outcome: policy.Outcome
) -> tuple[JobState, str]:
    state = NEXT_STATE[decision.action]
    reason = decision.reason
    # STOPPING -> STOPPED: a stop was asked (or a budget ran out); nothing restarts
    if job.state == S.STOPPING and state not in (S.SUCCEEDED, S.FAILED):
        return S.STOPPED, ended.stop_reason or reason
    if state in (S.BACKOFF, S.FAILED):
        reason = describe(ended.n, decision, job.progress)
    return state, reason


def _resume_to(state: JobState, decision: policy.Decision) -> JobState | None:
    if state != S.BACKOFF:
        return None
    return S.PROBING if decision.action == policy.REPROBE else S.STARTING


def backoff_over(job: Job, used: Spent, limit_first: bool = False) -> tuple[JobState, str]:
    """BACKOFF -> STARTING, or -> PROBING when the decision was a re-probe; -> STOPPED
    when the runtime limit or budget ran out while waiting (a rented box bills through).
    `limit_first`: the wait was cut short because the limit was due before the restart."""
    over = over_limit(job.spec, used) or ("budget reached" if limit_first else None)
    if over is not None:
        return S.STOPPED, f"{over}; not restarted"
    if job.resume_to == S.PROBING:
        return S.PROBING, "backoff over; re-probing the GPU"
    return S.STARTING, "backoff over"


def describe(n: int, decision: policy.Decision, progress: dict[str, Any] | None) -> str:
    """One sentence for people: what killed attempt n, what rsup does now, and when."""
    ev = decision.evidence
    what = (ev.get("lines") or ["no evidence"])[0]
    where = f" at output.log:{ev['line']}" if ev.get("line") and "output.log:" not in what else ""
    category = ev.get("category") or C.UNKNOWN
    died = f"attempt {n} died of {category} ({what}{where})"
    if decision.action not in (policy.RESTART, policy.REPROBE):
        return f"{died}; {decision.reason}"
    saved = (progress or {}).get("saved_epoch")  # the last epoch a checkpoint holds
    resume = f"resuming after epoch {saved}" if saved is not None else f"starting attempt {n + 1}"
    return f"{died}; {decision.reason}; {resume} in {decision.delay:g} s"
