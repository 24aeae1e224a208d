"""Turn what an attempt left behind (exit.json, the monitor's findings) into policy inputs."""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING, Any

from rsup.supervisor.core import policy
from rsup.supervisor.core.spec import parse_duration
from rsup.supervisor.effects.store import Attempt, Job
from rsup.supervisor.recognize import kernlog, ranks
from rsup.supervisor.recognize.classify import classify_exit
from rsup.workers import constants as C

if TYPE_CHECKING:
    from rsup.supervisor.effects.watcher import AttemptMonitor


def build_outcome(
    job: Job, attempt: Attempt, exit_data: dict[str, Any] | None, monitor: AttemptMonitor
) -> policy.Outcome:
    exit_data = exit_data or {}
    code, sig = exit_data.get("exit_code"), exit_data.get("signal")
    if monitor.hang_verdict is not None:
        verdict, rank = monitor.hang_verdict, monitor.hang_rank
        return policy.Outcome(
            code,
            sig,
            C.HANG,
            "hang",
            (rank.describe(),) if rank else (verdict.describe(),),
            ran_for=_ran_for(exit_data),
            advanced=monitor.advanced,
        )
    stopped = bool(exit_data.get("stop_requested")) or job.state.value == "stopping"
    oom_line = None
    if exit_data.get("cgroup_oom_kills"):
        oom_line = f"memory.events: oom_kill {exit_data['cgroup_oom_kills']} (the attempt's cgroup)"
    elif sig == signal.SIGKILL and not stopped and "kill" not in monitor.drills_fired:
        oom_line = kernlog.oom_kill(attempt.started, float(exit_data.get("ended") or time.time()))
    diagnosis = classify_exit(
        monitor.diagnosis(), code, sig, stop_requested=stopped, oom_evidence=oom_line
    )
    lines: tuple[str, ...]
    if not exit_data:
        diagnosis_category, lines = C.UNKNOWN, ("the shim died before the job's exit was recorded",)
    else:
        diagnosis_category, lines = diagnosis.category, tuple(t for _, t in diagnosis.evidence)
    if sig == signal.SIGKILL and "kill" in monitor.drills_fired and diagnosis_category == C.UNKNOWN:
        lines = ("SIGKILL sent by the kill drill (rsup inject)",)
    line = diagnosis.line
    if monitor.ranks is not None and exit_data and not stopped and (code or sig):
        diagnosis_category, lines, line = ranks.with_rank(
            monitor.ranks.first_failure(), diagnosis_category, lines, line
        )
    return policy.Outcome(
        exit_code=code,
        signal=sig,
        category=diagnosis_category,
        signature=diagnosis.signature,
        evidence=lines or _exit_words(code, sig),
        line=line,
        stop_requested=stopped,
        ran_for=_ran_for(exit_data),
        advanced=monitor.advanced,
        completed=monitor.completed if job.spec.get("kind") == "ultralytics" else None,
    )


def _ran_for(exit_data: dict[str, Any]) -> float:
    return float(exit_data.get("duration") or 0.0)


def _exit_words(code: int | None, sig: int | None) -> tuple[str, ...]:
    if sig is not None:
        try:
            return (f"killed by {signal.Signals(sig).name}",)
        except ValueError:
            return (f"killed by signal {sig}",)
    return (f"exit code {code}",) if code is not None else ()


def history_for(job: Job, outcome: policy.Outcome, monitor: AttemptMonitor) -> policy.History:
    """The job's history including the attempt that just ended."""
    failed = not outcome.clean_exit and not outcome.stop_requested
    stalled = 0 if outcome.advanced else job.stalled + (1 if failed else 0)
    same = job.same_fault + 1 if job.last_fault == outcome.category else 1
    train = job.spec.get("train") or {}
    overrides = job.overrides
    return policy.History(
        attempts=job.attempts,
        restarts=job.restarts,
        failures=job.failures + (1 if failed and not outcome.advanced else 0),
        stalled=stalled,
        same_category=same,
        reports_progress=monitor.progress_seen or bool(job.progress),
        device=str(overrides.get("device", job.device or "auto")),
        batch=_int(overrides.get("batch", train.get("batch"))),
        workers=_int(overrides.get("workers", train.get("workers"))),
    )


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def limits_for(spec: dict[str, Any]) -> policy.Limits:
    restart = spec.get("restart") or {}
    backoff = restart.get("backoff") or {}
    return policy.Limits(
        max_attempts=int(restart.get("max_attempts", 10)),
        reset_after=parse_duration(restart.get("reset_after", 600)),
        backoff=policy.Backoff(
            initial=parse_duration(backoff.get("initial", 10)),
            factor=float(backoff.get("factor", 2)),
            maximum=parse_duration(backoff.get("max", 300)),
        ),
        cpu_fallback=bool((spec.get("fallback") or {}).get("cpu", True)),
    )


def describe(
    n: int, outcome: dict[str, Any], decision: policy.Decision, progress: dict[str, Any] | None
) -> str:
    """One sentence for people: what killed attempt n, what rsup does now, and when."""
    ev = decision.evidence
    what = (ev.get("lines") or ["no evidence"])[0]
    where = f" at output.log:{ev['line']}" if ev.get("line") else ""
    category = ev.get("category") or C.UNKNOWN
    died = f"attempt {n} died of {category} ({what}{where})"
    if decision.action not in (policy.RESTART, policy.REPROBE):
        return f"{died}; {decision.reason}"
    epoch = (progress or {}).get("epoch")
    resume = f"resuming after epoch {epoch}" if epoch else f"starting attempt {n + 1}"
    return f"{died}; {decision.reason}; {resume} in {decision.delay:g} s"
