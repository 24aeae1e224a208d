"""Recovery policy: (what ended the attempt, the job's history) -> one Decision.

Pure functions of their inputs; time is passed in. Side effects happen in the engine.
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

STALL_LIMIT = 3  # attempts in a row that advanced nothing, for jobs that report progress
BATCH_FLOOR = 1
GPU_CATEGORIES = frozenset({C.GPU_MEMORY_FAULT, C.HIP_RUNTIME_INIT})


@dataclass(frozen=True)
class Backoff:
    initial: float = 10.0
    factor: float = 2.0
    maximum: float = 300.0

    def delay(self, restarts: int) -> float:
        """Delay before restart number `restarts` (0-based), capped like Kubernetes."""
        return float(min(self.initial * self.factor**restarts, self.maximum))


@dataclass(frozen=True)
class Limits:
    max_attempts: int = 10
    reset_after: float = 600.0
    backoff: Backoff = field(default_factory=Backoff)
    cpu_fallback: bool = True


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
        return self.exit_code == 0 and self.signal is None


@dataclass(frozen=True)
class History:
    """What the job has been through so far (after the attempt that just ended)."""

    attempts: int
    restarts: int = 0
    failures: int = 0
    stalled: int = 0
    same_category: int = 0
    reports_progress: bool = False
    device: str = "auto"
    batch: int | None = None
    workers: int | None = None


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


def decide(outcome: Outcome, history: History, limits: Limits) -> Decision:
    """The one decision after an attempt ends."""
    evidence = _evidence(outcome)
    if outcome.stop_requested:
        return Decision(STOP, "stopped on request", evidence=evidence)
    if outcome.clean_exit and outcome.completed is not False:
        return Decision(SUCCEED, "the job finished (exit 0)", evidence=evidence)
    if outcome.category == C.CONFIG_ERROR:
        return Decision(FAIL, _config_reason(outcome), evidence=evidence)
    give_up = _give_up_reason(history, limits)
    if give_up:
        return Decision(FAIL, give_up, evidence=evidence)
    decision = _remedy(outcome, history, limits)
    restarts = 0 if outcome.ran_for >= limits.reset_after else history.restarts
    delay = limits.backoff.delay(restarts)
    return replace(decision, delay=delay, evidence=evidence, restarts=restarts + 1)


def _evidence(outcome: Outcome) -> dict[str, Any]:
    return {
        "category": outcome.category,
        "signature": outcome.signature,
        "lines": list(outcome.evidence[:5]),
        "line": outcome.line,
        "exit_code": outcome.exit_code,
        "signal": outcome.signal,
        "ran_for": round(outcome.ran_for, 3),
        "advanced": outcome.advanced,
    }


def _config_reason(outcome: Outcome) -> str:
    what = outcome.evidence[0] if outcome.evidence else outcome.signature or "a configuration error"
    return f"configuration error, not retried: {what}; fix the job and start it again"


def _give_up_reason(history: History, limits: Limits) -> str | None:
    if history.failures >= limits.max_attempts:
        return (
            f"gave up after {history.failures} failed attempts without progress "
            f"(restart.max_attempts={limits.max_attempts})"
        )
    if history.reports_progress and history.stalled >= STALL_LIMIT:
        return f"gave up: {history.stalled} attempts in a row made no progress"
    return None


def _remedy(outcome: Outcome, history: History, limits: Limits) -> Decision:
    category = outcome.category
    if category == C.OOM:
        return _smaller_batch(history, limits)
    if category in (C.HOST_OOM, C.DATALOADER_WORKER):
        return _fewer_workers(history, category)
    if category in GPU_CATEGORIES or (
        category in (C.HANG, C.SEGFAULT_ABORT) and history.same_category >= 2
    ):
        return _reprobe_or_cpu(history, limits, category)
    if category == C.NCCL_DISTRIBUTED:
        return Decision(RESTART, "distributed failure: restarting the whole group")
    return Decision(RESTART, "restarting from the last checkpoint")


def _smaller_batch(history: History, limits: Limits) -> Decision:
    if history.batch is not None and history.batch // 2 >= BATCH_FLOOR:
        batch = history.batch // 2
        return Decision(RESTART, f"out of memory: resuming with batch {batch}", overrides={"batch": batch})
    return _to_cpu(history, limits, "out of memory at the smallest batch")


def _fewer_workers(history: History, category: str) -> Decision:
    workers = history.workers
    if workers is None or workers > 0:
        fewer = 0 if workers is None else workers // 2
        return Decision(
            RESTART,
            f"{category}: resuming with {fewer} DataLoader workers (spawn start method)",
            overrides={"workers": fewer},
        )
    if history.batch is not None and history.batch // 2 >= BATCH_FLOOR:
        batch = history.batch // 2
        return Decision(RESTART, f"{category} with no workers left: batch {batch}", overrides={"batch": batch})
    return Decision(RESTART, f"{category}: restarting")


def _reprobe_or_cpu(history: History, limits: Limits, category: str) -> Decision:
    if history.device == "cpu":
        return Decision(RESTART, f"{category} on cpu: restarting")
    if history.same_category <= 1 and category == C.GPU_MEMORY_FAULT:
        return Decision(RESTART, "GPU memory fault: restarting from the last checkpoint")
    if history.same_category <= 2:
        return Decision(REPROBE, f"{category}: re-probing the GPU with remedies before restarting")
    return _to_cpu(history, limits, f"{category} keeps coming back")


def _to_cpu(history: History, limits: Limits, why: str) -> Decision:
    if history.device != "cpu" and limits.cpu_fallback:
        return Decision(RESTART, f"{why}: falling back to the CPU", overrides={"device": "cpu"})
    return Decision(RESTART, f"{why}: restarting as is")
