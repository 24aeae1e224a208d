"""The recovery policy as a pure function: backoff, each category's ladder, give-up rules."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from rsup.supervisor.core import policy
from rsup.supervisor.core.conclude import Evidence
from rsup.supervisor.core.job import Job
from rsup.supervisor.core.policy import (
    FAIL,
    REPROBE,
    RESTART,
    STOP,
    SUCCEED,
    Backoff,
    Decision,
    History,
    Limits,
    Outcome,
    decide,
)
from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.core.states import JobState
from rsup.supervisor.core.step import Ended, settle
from rsup.supervisor.recognize.classify import Diagnosis
from rsup.workers import constants as C

LIMITS = Limits()


def crash(category: str, **fields: Any) -> Outcome:
    return Outcome(exit_code=1, signal=None, category=category, evidence=(f"{category} line",),
                   **fields)  # fmt: skip


def first(category: str, **history: Any) -> Decision:
    """The decision after one failed attempt of a fresh job."""
    base: dict[str, Any] = {"attempts": 1, "failures": 1, "stalled": 1, "same_category": 1}
    return decide(crash(category), History(**{**base, **history}), LIMITS)


def job_spec(fields: dict[str, Any]) -> JobSpec:
    """A valid spec with the fields a test cares about."""
    base: dict[str, Any] = {"name": "j", **fields}
    if base.get("kind", "command") == "command":
        base.setdefault("command", ["true"])
    else:
        base["train"] = {"model": "m.yaml", "data": "d.yaml", **base.get("train", {})}
    return JobSpec.model_validate(base)


@dataclass
class Run:
    """A job played attempt after attempt through the real step (core.step.settle), its
    changes applied to the job as the engine stores them."""

    spec: dict[str, Any] = field(default_factory=lambda: {"kind": "command"})
    device: str = "0"
    limits: Limits = LIMITS
    reports_progress: bool = False
    job: Job = field(init=False)
    decisions: list[Decision] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.job = Job("j", 0, job_spec(self.spec), JobState.RUNNING, device=self.device)

    def end(self, outcome: Outcome) -> Decision:
        job = replace(self.job, attempts=self.job.attempts + 1)
        evidence = Evidence(Diagnosis(outcome.category))  # unused: the outcome is given
        ended = Ended(job.attempts, evidence, {}, reports_progress=self.reports_progress)
        step = settle(job, ended, outcome, 1000.0, self.limits)
        self.job = replace(job, **step.job)
        self.decisions.append(step.decision)
        return step.decision

    def crash(self, category: str, times: int = 1, **fields: Any) -> list[Decision]:
        return [self.end(crash(category, **fields)) for _ in range(times)]


def steps(decisions: list[Decision]) -> list[tuple[str, dict[str, Any]]]:
    return [(d.action, d.overrides) for d in decisions]


# --- backoff ----------------------------------------------------------------------


def test_backoff_doubles_from_10_and_caps_at_300() -> None:
    assert [Backoff().delay(n) for n in range(8)] == [10, 20, 40, 80, 160, 300, 300, 300]


def test_successive_restarts_follow_the_backoff_sequence() -> None:
    run = Run(limits=Limits(max_attempts=100))
    delays = [d.delay for d in run.crash(C.UNKNOWN, 8)]
    assert delays == [10, 20, 40, 80, 160, 300, 300, 300]
    assert [d.restarts for d in run.decisions] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_backoff_resets_after_reset_after_of_stable_running() -> None:
    run = Run(limits=Limits(max_attempts=100, reset_after=600))
    run.crash(C.UNKNOWN, 4)
    short = run.end(crash(C.UNKNOWN, ran_for=599.9))
    assert short.delay == 160
    stable = run.end(crash(C.UNKNOWN, ran_for=600))
    assert (stable.delay, stable.restarts) == (10, 1)
    assert run.end(crash(C.UNKNOWN)).delay == 20


def test_custom_backoff_is_used() -> None:
    limits = Limits(backoff=Backoff(initial=0.1, factor=2, maximum=0.5))
    delays = [Backoff(0.1, 2, 0.5).delay(n) for n in range(5)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    assert decide(crash(C.UNKNOWN), History(1, failures=1, stalled=1), limits).delay == 0.1


# --- the end of a job ---------------------------------------------------------------


def test_clean_exit_succeeds_and_stop_stops() -> None:
    assert decide(Outcome(0, None), History(1), LIMITS).action == SUCCEED
    stopped = Outcome(None, 15, C.UNKNOWN, stop_requested=True)
    assert decide(stopped, History(1, failures=1), LIMITS).action == STOP


def test_exit_0_without_completion_is_not_success() -> None:
    unfinished = Outcome(0, None, completed=False)
    assert decide(unfinished, History(1), LIMITS).action == RESTART


def test_config_error_fails_at_once_with_the_evidence() -> None:
    outcome = Outcome(1, None, C.CONFIG_ERROR, "module-not-found",
                      ("ModuleNotFoundError: No module named 'x'",), line=4)  # fmt: skip
    decision = decide(outcome, History(1, failures=1, stalled=1, same_category=1), LIMITS)
    assert decision.action == FAIL
    assert "ModuleNotFoundError: No module named 'x'" in decision.reason
    assert "fix the job" in decision.reason
    assert decision.evidence["signature"] == "module-not-found"
    assert decision.evidence["line"] == 4


def test_an_inferred_config_error_gets_one_more_try_then_fails() -> None:
    outcome = Outcome(1, None, C.CONFIG_ERROR, C.INFERRED_CONFIG_ERROR,
                      ("RuntimeError: boom",), line=2)  # fmt: skip
    once = decide(outcome, History(1, failures=1, stalled=1, same_category=1), LIMITS)
    assert once.action == RESTART and "one more try" in once.reason
    again = decide(outcome, History(2, failures=2, stalled=2, same_category=2), LIMITS)
    assert again.action == FAIL and "RuntimeError: boom" in again.reason


def test_unknown_restarts_until_max_attempts() -> None:
    run = Run(limits=Limits(max_attempts=4))
    decisions = run.crash(C.UNKNOWN, 4)
    assert [d.action for d in decisions] == [RESTART, RESTART, RESTART, FAIL]
    assert "restart.max_attempts=4" in decisions[-1].reason
    assert all(d.overrides == {} for d in decisions)


def test_decision_evidence_names_the_fault_and_the_counts() -> None:
    outcome = Outcome(None, 6, C.GPU_MEMORY_FAULT, "hsa-aperture", ("HSA_STATUS_ERROR...",),
                      line=12, ran_for=3.21234)  # fmt: skip
    decision = decide(outcome, History(1, failures=1, stalled=1, same_category=1), LIMITS)
    ev = decision.evidence
    assert ev["category"] == C.GPU_MEMORY_FAULT and ev["signature"] == "hsa-aperture"
    assert ev["lines"] == ["HSA_STATUS_ERROR..."] and ev["line"] == 12
    assert (ev["signal"], ev["ran_for"], ev["repeats"]) == (6, 3.212, 1)
    assert decision.as_event()["evidence"] == ev


# --- each category ------------------------------------------------------------------


def test_oom_halves_the_batch_down_to_the_floor_then_cpu() -> None:
    run = Run(spec={"kind": "ultralytics", "train": {"batch": 16}}, limits=Limits(max_attempts=20))
    assert steps(run.crash(C.OOM, 6)) == [
        (RESTART, {"batch": 8}),
        (RESTART, {"batch": 4}),
        (RESTART, {"batch": 2}),
        (RESTART, {"batch": 1}),
        (RESTART, {"device": "cpu"}),
        (RESTART, {}),  # on the CPU at batch 1: nothing smaller left
    ]
    assert "batch 8 (was 16)" in run.decisions[0].reason
    assert "falling back to the CPU" in run.decisions[4].reason


def test_oom_respects_a_higher_batch_floor_and_no_cpu_fallback() -> None:
    limits = Limits(batch_floor=4, cpu_fallback=False)
    history = History(1, failures=1, stalled=1, same_category=1, batch=6, device="0")
    assert decide(crash(C.OOM), history, limits).overrides == {"batch": 4}
    at_floor = decide(crash(C.OOM), replace(history, batch=4), limits)
    assert at_floor.action == RESTART and at_floor.overrides == {}
    assert "fallback.cpu: false" in at_floor.reason


def test_oom_of_a_job_without_batch_restarts_once_then_goes_to_cpu() -> None:
    run = Run(spec={"kind": "command"}, device="0")
    assert steps(run.crash(C.OOM, 2)) == [(RESTART, {}), (RESTART, {"device": "cpu"})]
    assert "cannot halve this job's batch" in run.decisions[0].reason
    on_cpu = first(C.OOM, device="cpu", same_category=2, stalled=2)
    assert (on_cpu.action, on_cpu.overrides) == (RESTART, {})


def test_oom_with_autobatch_restarts_once_then_goes_to_cpu() -> None:
    assert first(C.OOM, batch=-1, device="0").overrides == {}
    again = first(C.OOM, batch=-1, device="0", same_category=2, stalled=2)
    assert again.overrides == {"device": "cpu"} and "out of memory again" in again.reason


def test_host_oom_lowers_workers_then_the_batch() -> None:
    run = Run(spec={"kind": "ultralytics", "train": {"batch": 8, "workers": 4}},
              limits=Limits(max_attempts=20))  # fmt: skip
    assert steps(run.crash(C.HOST_OOM, 7)) == [
        (RESTART, {"workers": 2}),
        (RESTART, {"workers": 1}),
        (RESTART, {"workers": 0}),
        (RESTART, {"batch": 4}),
        (RESTART, {"batch": 2}),
        (RESTART, {"batch": 1}),
        (RESTART, {}),
    ]
    assert "0 DataLoader workers" in run.decisions[2].reason


def test_host_oom_with_unknown_workers_goes_to_zero() -> None:
    assert first(C.HOST_OOM).overrides == {"workers": 0}


def test_dataloader_worker_lowers_workers_down_to_zero() -> None:
    run = Run(spec={"kind": "ultralytics", "train": {"batch": 8, "workers": 8}},
              limits=Limits(max_attempts=20))  # fmt: skip
    assert steps(run.crash(C.DATALOADER_WORKER, 6)) == [
        (RESTART, {"workers": 4}),
        (RESTART, {"workers": 2}),
        (RESTART, {"workers": 1}),
        (RESTART, {"workers": 0}),
        (RESTART, {}),  # never a smaller batch: the batch is not what kills workers
        (RESTART, {}),
    ]


@pytest.mark.parametrize("category", [C.GPU_MEMORY_FAULT, C.HANG])
def test_gpu_fault_and_hang_restart_then_reprobe_then_cpu(category: str) -> None:
    run = Run(device="0", limits=Limits(max_attempts=20))
    assert [d.action for d in run.crash(category, 2)] == [RESTART, REPROBE]
    assert "re-probing" in run.decisions[1].reason
    third = run.end(crash(category))
    assert (third.action, third.overrides) == (RESTART, {"device": "cpu"})
    assert f"{category} 3 times in a row" in third.reason
    fourth = run.end(crash(category))
    assert (fourth.action, fourth.overrides) == (RESTART, {})


def test_hip_runtime_init_reprobes_then_cpu() -> None:
    run = Run(device="auto")
    decisions = run.crash(C.HIP_RUNTIME_INIT, 2)
    assert steps(decisions) == [(REPROBE, {}), (RESTART, {"device": "cpu"})]


def test_segfault_restarts_then_reprobes() -> None:
    run = Run(device="0", limits=Limits(max_attempts=20))
    assert steps(run.crash(C.SEGFAULT_ABORT, 4)) == [
        (RESTART, {}), (REPROBE, {}), (RESTART, {}), (RESTART, {}),
    ]  # fmt: skip


def test_no_reprobe_on_the_cpu() -> None:
    decision = first(C.GPU_MEMORY_FAULT, device="cpu", same_category=2, stalled=2)
    assert decision.action == RESTART and decision.overrides == {}
    assert "on the CPU" in decision.reason


def test_cpu_fallback_off_keeps_the_device() -> None:
    limits = Limits(cpu_fallback=False)
    history = History(3, failures=3, stalled=3, same_category=3, device="0")
    decision = decide(crash(C.GPU_MEMORY_FAULT), history, limits)
    assert decision.action == RESTART and decision.overrides == {}


def test_nccl_restarts_the_group() -> None:
    decision = first(C.NCCL_DISTRIBUTED)
    assert decision.action == RESTART and "whole group" in decision.reason


def test_a_different_fault_starts_the_ladder_again() -> None:
    run = Run(device="0", limits=Limits(max_attempts=20))
    run.crash(C.GPU_MEMORY_FAULT, 2)
    run.crash(C.UNKNOWN)
    assert run.end(crash(C.GPU_MEMORY_FAULT)).action == RESTART


# --- progress-aware give-up ---------------------------------------------------------


def test_attempts_that_advanced_do_not_count_toward_max_attempts() -> None:
    run = Run(limits=Limits(max_attempts=3), reports_progress=True)
    decisions = [run.end(crash(C.UNKNOWN, advanced=True)) for _ in range(20)]
    assert {d.action for d in decisions} == {RESTART}
    assert run.job.failures == 0


def test_a_fault_after_progress_starts_the_ladder_again() -> None:
    """A 72-hour run that faults every few hours stays on the GPU."""
    run = Run(device="0", reports_progress=True)
    decisions = [run.end(crash(C.GPU_MEMORY_FAULT, advanced=True)) for _ in range(10)]
    assert steps(decisions) == [(RESTART, {})] * 10


def test_three_attempts_without_progress_stop_a_job_that_reports_progress() -> None:
    run = Run(limits=Limits(max_attempts=100), reports_progress=True)
    run.end(crash(C.UNKNOWN, advanced=True))
    decisions = run.crash(C.UNKNOWN, 3)
    assert [d.action for d in decisions] == [RESTART, RESTART, FAIL]
    assert "3 attempts in a row made no progress" in decisions[-1].reason


def test_one_advance_resets_the_stall_count() -> None:
    run = Run(limits=Limits(max_attempts=100), reports_progress=True)
    run.crash(C.UNKNOWN, 2)
    run.end(crash(C.UNKNOWN, advanced=True))
    assert [d.action for d in run.crash(C.UNKNOWN, 2)] == [RESTART, RESTART]
    assert run.end(crash(C.UNKNOWN)).action == FAIL


def test_stall_rule_needs_a_job_that_reports_progress() -> None:
    run = Run(limits=Limits(max_attempts=5))
    assert [d.action for d in run.crash(C.UNKNOWN, 5)] == [RESTART] * 4 + [FAIL]
    assert "max_attempts=5" in run.decisions[-1].reason


def test_stalled_job_still_gets_the_remedies_left_then_stops() -> None:
    """The ladder's next rung is worth one more attempt; a plain restart is not."""
    run = Run(device="0", limits=Limits(max_attempts=100), reports_progress=True)
    decisions = run.crash(C.GPU_MEMORY_FAULT, 4)
    assert steps(decisions[:3]) == [(RESTART, {}), (REPROBE, {}), (RESTART, {"device": "cpu"})]
    assert decisions[3].action == FAIL and "every remedy was tried" in decisions[3].reason


def test_stalled_oom_shrinks_to_the_floor_before_stopping() -> None:
    run = Run(spec={"kind": "ultralytics", "train": {"batch": 4}}, device="0",
              limits=Limits(max_attempts=100), reports_progress=True)  # fmt: skip
    decisions = run.crash(C.OOM, 4)
    assert steps(decisions[:3]) == [
        (RESTART, {"batch": 2}), (RESTART, {"batch": 1}), (RESTART, {"device": "cpu"}),
    ]  # fmt: skip
    assert decisions[3].action == FAIL


def test_max_attempts_is_checked_before_the_remedies() -> None:
    history = History(10, failures=10, stalled=10, same_category=1, batch=16)
    assert decide(crash(C.OOM), history, LIMITS).action == FAIL


def test_stop_and_success_win_over_give_up() -> None:
    history = History(10, failures=10, stalled=10, same_category=10, reports_progress=True)
    assert decide(Outcome(0, None), history, LIMITS).action == SUCCEED
    stop = Outcome(None, 9, C.HANG, stop_requested=True)
    assert decide(stop, history, LIMITS).action == STOP


def test_repeats_count_only_same_category_attempts_without_advance() -> None:
    assert History(5, same_category=4, stalled=2).repeats == 2
    assert History(5, same_category=1, stalled=4).repeats == 1
    assert History(5, same_category=3, stalled=0).repeats == 1


def test_ladders_name_only_known_categories_and_rungs() -> None:
    assert set(policy.LADDERS) <= set(C.CATEGORIES)
    rungs = {r for ladder in policy.LADDERS.values() for r in ladder}
    assert rungs <= {RESTART, REPROBE, policy.CPU}
