"""Recovery policy: (what ended the attempt, the job's history) -> one Decision.

Pure functions of their inputs; time is passed in. Side effects happen in the engine.

Escalation counts repeats: attempts in a row that ended in the same category without
advancing the job. A fault that comes back after the job moved on starts again at the
first rung, so a long run that faults every few hours is restarted, not sent to the CPU.

Give-up: `max_attempts` failed attempts that advanced nothing; or, for a job that reports
progress, STALL_LIMIT attempts in a row without an advance once the policy has nothing
new left to try (a smaller batch, fewer workers, a re-probe or the CPU is still an
experiment worth one more attempt; a plain restart is not).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from rsup.workers import constants as C

RESTART = "restart"
REPROBE = "reprobe"
SUCCEED = "succeed"
FAIL = "fail"
STOP = "stop"
CPU = "cpu"  # a rung of a ladder: restart on the CPU

STALL_LIMIT = 3  # attempts in a row that advanced nothing, for jobs that report progress
BATCH_FLOOR = 1
GPU_CATEGORIES = frozenset({C.GPU_MEMORY_FAULT, C.HIP_RUNTIME_INIT})

# What a category does on its 1st, 2nd, 3rd... repeat; the last rung holds from then on.
LADDERS: dict[str, tuple[str, ...]] = {
    C.GPU_MEMORY_FAULT: (RESTART, REPROBE, CPU),
    C.HANG: (RESTART, REPROBE, CPU),
    C.HIP_RUNTIME_INIT: (REPROBE, CPU),
    C.SEGFAULT_ABORT: (RESTART, REPROBE, RESTART),
}


@dataclass(frozen=True)
class Backoff:
    initial: float = 10.0
    factor: float = 2.0
    maximum: float = 300.0

    def delay(self, restarts: int) -> float:
        """Delay before restart number `restarts` (0-based), capped like Kubernetes."""
        if self.initial <= 0:
            return 0.0  # and not 0 * inf = nan when factor is inf
        try:
            return float(min(self.initial * self.factor**restarts, self.maximum))
        except OverflowError:  # factor**restarts passed 1e308: long since capped
            return float(self.maximum)


@dataclass(frozen=True)
class Limits:
    max_attempts: int = 10
    reset_after: float = 600.0
    backoff: Backoff = field(default_factory=Backoff)
    cpu_fallback: bool = True
    batch_floor: int = BATCH_FLOOR


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended, as the engine saw it."""

    exit_code: int | None
    signal: int | None
    category: str = C.NONE
    signature: str | None = None
    evidence: tuple[str, ...] = ()
    line: int | None = None  # where in output.log the root cause is
    stop_requested: bool = False
    ran_for: float = 0.0
    advanced: bool = False
    completed: bool | None = None  # None: the kind has no notion of completion beyond exit 0

    @property
    def clean_exit(self) -> bool:
        """Exit 0 with nothing fatal left standing in the output."""
        return self.exit_code == 0 and self.signal is None and self.category == C.NONE


@dataclass(frozen=True)
class History:
    """What the job has been through so far (after the attempt that just ended).

    `failures`: failed attempts that advanced nothing; `stalled`: the last attempts in a
    row that failed without an advance (0 when this one advanced); `same_category`: the
    last attempts in a row that ended in this attempt's category.
    """

    attempts: int
    restarts: int = 0
    failures: int = 0
    stalled: int = 0
    same_category: int = 0
    reports_progress: bool = False
    device: str = "auto"
    batch: int | None = None
    workers: int | None = None

    @property
    def repeats(self) -> int:
        """This category's attempts in a row with no advance (at least 1): the rung to use."""
        return max(1, min(self.same_category, self.stalled))


@dataclass(frozen=True)
class Decision:
    action: str
    reason: str
    delay: float = 0.0
    overrides: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    restarts: int = 0  # the backoff counter to store for the next attempt

    def as_event(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "reason": self.reason,
            "delay": self.delay,
            "overrides": self.overrides,
            "evidence": self.evidence,
        }

    @property
    def tries_something_new(self) -> bool:
        """A re-probe or a changed batch, worker count or device: not a plain restart."""
        return self.action == REPROBE or bool(self.overrides)


def decide(outcome: Outcome, history: History, limits: Limits) -> Decision:
    """The one decision after an attempt ends."""
    evidence = _evidence(outcome, history)
    final = _final(outcome, history, limits)
    if final is not None:
        return replace(final, evidence=evidence)
    decision = _remedy(outcome, history, limits)
    if _stalled(history) and not decision.tries_something_new:
        return Decision(FAIL, _stall_reason(history), evidence=evidence)
    restarts = 0 if outcome.ran_for >= limits.reset_after else history.restarts
    delay = limits.backoff.delay(restarts)
    return replace(decision, delay=delay, evidence=evidence, restarts=restarts + 1)


def _final(outcome: Outcome, history: History, limits: Limits) -> Decision | None:
    """A decision that ends the job whatever the category says, or None."""
    if outcome.stop_requested:
        return Decision(STOP, "stopped on request")
    if outcome.clean_exit and outcome.completed is not False:
        return Decision(SUCCEED, "the job finished (exit 0)")
    if outcome.category == C.CONFIG_ERROR and not _one_more_try(outcome, history):
        return Decision(FAIL, _config_reason(outcome))
    if history.failures >= limits.max_attempts:
        return Decision(FAIL, (
            f"gave up after {history.failures} failed attempts without progress "
            f"(restart.max_attempts={limits.max_attempts}); fix the cause and start it again"
        ))  # fmt: skip
    return None


def _one_more_try(outcome: Outcome, history: History) -> bool:
    """A config error inferred (an exception no signature knows, before training) gets one
    restart: a flaky start (a lock, a file still being written) passes the second time,
    and a second config error in a row (that one again or any other) fails the job."""
    return outcome.signature == C.INFERRED_CONFIG_ERROR and history.same_category <= 1


def _evidence(outcome: Outcome, history: History) -> dict[str, Any]:
    return {
        "category": outcome.category,
        "signature": outcome.signature,
        "lines": list(outcome.evidence[:5]),
        "line": outcome.line,
        "exit_code": outcome.exit_code,
        "signal": outcome.signal,
        "ran_for": round(outcome.ran_for, 3),
        "advanced": outcome.advanced,
        "repeats": history.repeats,
        "failures": history.failures,
        "stalled": history.stalled,
    }


def _config_reason(outcome: Outcome) -> str:
    what = outcome.evidence[0] if outcome.evidence else outcome.signature or "a configuration error"
    return f"configuration error, not retried: {what}; fix the job and start it again"


def _stalled(history: History) -> bool:
    return history.reports_progress and history.stalled >= STALL_LIMIT


def _stall_reason(history: History) -> str:
    return (
        f"gave up: {history.stalled} attempts in a row made no progress and every remedy "
        f"was tried; fix the cause and start the job again"
    )


def _remedy(outcome: Outcome, history: History, limits: Limits) -> Decision:
    category = outcome.category
    if category == C.OOM:
        return _oom(history, limits)
    if category == C.HOST_OOM:
        return _host_oom(history, limits)
    if category == C.DATALOADER_WORKER:
        return _dataloader_worker(history)
    if category in LADDERS:
        return _climb(category, history, limits)
    if category == C.NCCL_DISTRIBUTED:
        return Decision(RESTART, "distributed failure: restarting the whole group")
    if category == C.CONFIG_ERROR:  # inferred, first time (_one_more_try)
        return Decision(RESTART, (
            "an exception rsup does not know, before any training step: one more try; "
            "the same again fails the job as a configuration error"
        ))  # fmt: skip
    return Decision(RESTART, "restarting from the last checkpoint")


def _halved(batch: int | None, floor: int) -> int | None:
    """Half the batch, not below the floor; None when it cannot shrink (or is unknown/auto)."""
    if batch is None or batch <= floor:
        return None
    return max(floor, batch // 2)


def _fewer(workers: int | None) -> int | None:
    """Half the DataLoader workers; 0 when the count is unknown; None when already 0."""
    if workers is None:
        return 0
    return workers // 2 if workers > 0 else None


def _oom(history: History, limits: Limits) -> Decision:
    batch = _halved(history.batch, limits.batch_floor)
    if batch is not None:
        why = f"out of memory: resuming with batch {batch} (was {history.batch})"
        return Decision(RESTART, why, overrides={"batch": batch})
    fixed = history.batch is not None and history.batch > 0
    if not fixed and history.repeats < 2:
        # No batch rsup can halve (a command job, Ultralytics' autobatch): memory held by
        # another process is often gone a moment later, so one plain restart comes first.
        return Decision(RESTART, "out of memory; rsup cannot halve this job's batch: restarting")
    why = "out of memory at the smallest batch" if fixed else "out of memory again"
    return _to_cpu(history, limits, why)


def _host_oom(history: History, limits: Limits) -> Decision:
    workers = _fewer(history.workers)
    if workers is not None:
        return Decision(RESTART, f"host out of memory: resuming with {workers} DataLoader workers",
                        overrides={"workers": workers})  # fmt: skip
    batch = _halved(history.batch, limits.batch_floor)
    if batch is not None:
        return Decision(RESTART, f"host out of memory with no DataLoader workers: resuming with "
                        f"batch {batch}", overrides={"batch": batch})  # fmt: skip
    return Decision(RESTART, "host out of memory at no workers and the smallest batch: restarting")


def _dataloader_worker(history: History) -> Decision:
    workers = _fewer(history.workers)
    if workers is not None:
        return Decision(RESTART, f"a DataLoader worker died: resuming with {workers} workers",
                        overrides={"workers": workers})  # fmt: skip
    return Decision(RESTART, "a DataLoader worker died with no workers configured: restarting")


def _climb(category: str, history: History, limits: Limits) -> Decision:
    ladder = LADDERS[category]
    rung = ladder[min(history.repeats, len(ladder)) - 1]
    times = f"{category} {history.repeats} times in a row"
    if rung == CPU:
        return _to_cpu(history, limits, times)
    if rung == REPROBE and history.device != "cpu":
        return Decision(REPROBE, f"{times}: re-probing the GPU with remedies before restarting")
    if rung == REPROBE:
        return Decision(RESTART, f"{times} on the CPU (no GPU to re-probe): restarting")
    return Decision(RESTART, f"{category}: restarting from the last checkpoint")


def _to_cpu(history: History, limits: Limits, why: str) -> Decision:
    if history.device == "cpu":
        return Decision(RESTART, f"{why}, already on the CPU: restarting as is")
    if not limits.cpu_fallback:
        return Decision(RESTART, f"{why}; CPU fallback is off (fallback.cpu: false): restarting")
    return Decision(RESTART, f"{why}: falling back to the CPU", overrides={"device": "cpu"})
