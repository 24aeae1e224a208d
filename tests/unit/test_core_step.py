"""The pure core on a fake clock: conclusion, the attempt-end step, backoff, stop escalation."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest
from rsup.supervisor.core import step as core
from rsup.supervisor.core.budget import Spent
from rsup.supervisor.core.conclude import Evidence, conclude
from rsup.supervisor.core.escalation import ASK, KILL_TREE, WAIT, Action, Escalation
from rsup.supervisor.core.hang import HangVerdict
from rsup.supervisor.core.job import Job
from rsup.supervisor.core.plan import Plan
from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.core.states import JobState
from rsup.supervisor.recognize.diagnosis import Diagnosis
from rsup.supervisor.recognize.offline import diagnose_text
from rsup.supervisor.recognize.ranks import RankFailure
from rsup.workers import constants as C
from rsup.workers import shim

S = JobState
OOM = Diagnosis(C.OOM, "cuda_oom", [(12, "torch.OutOfMemoryError: CUDA out of memory")], 12)
GPU_FAULT = Diagnosis(C.GPU_MEMORY_FAULT, "hsa_aperture", [(40, "HSA_STATUS_ERROR")], 40)
NOW = 1_700_000_000.0


def job(**fields: object) -> Job:
    spec = JobSpec(name="j", command=["python", "train.py", "{batch}"], batch=16,
                   restart={"backoff": {"initial": 10, "factor": 2, "max": 300}})  # fmt: skip
    base = Job("j", 0, spec, S.RUNNING, attempts=1, device="0")
    return replace(base, **fields)  # type: ignore[arg-type]


def ended(
    diagnosis: Diagnosis, code: int | None = 1, sig: int | None = None, **ev: object
) -> core.Ended:
    evidence = Evidence(diagnosis, exit_code=code, signal=sig, **ev)  # type: ignore[arg-type]
    return core.Ended(1, evidence, {"exit_code": code, "signal": sig})


def core_action(kind: str, sig: int) -> Action:
    return Action(kind, signal=int(sig))


# --- conclusion ----------------------------------------------------------------------


def test_a_hang_rsup_stopped_is_a_hang_not_a_stop_on_request() -> None:
    verdict = HangVerdict(silent_for=40.0, limit=30.0, cpu_cores=0.0, busy=False)
    outcome = conclude(Evidence(Diagnosis(C.NONE), signal=9, stop_requested=True, hang=verdict))
    assert outcome.category == C.HANG and not outcome.stop_requested


def test_a_dead_shim_is_unknown_whatever_the_log_said() -> None:
    outcome = conclude(Evidence(OOM, recorded=False))
    assert outcome.category == C.UNKNOWN and "shim died" in outcome.evidence[0]


def test_sigkill_with_a_kernel_oom_line_is_host_oom_but_not_after_a_kill_drill() -> None:
    line = "Out of memory: Killed process 4242 (python)"
    assert conclude(Evidence(Diagnosis(C.NONE), signal=9, oom_line=line)).category == C.HOST_OOM
    drill = conclude(Evidence(Diagnosis(C.NONE), signal=9, oom_line=line, drills_fired=("kill",)))
    assert drill.category == C.KILLED and "kill drill" in drill.evidence[0]


def test_every_note_of_the_shim_is_read_below() -> None:
    named = {v for k, v in vars(shim).items() if k.startswith("NOTE_") and isinstance(v, str)}
    assert named == set(shim.NOTES)


@pytest.mark.parametrize("note", shim.NOTES)
def test_the_kill_drill_stays_killed_whatever_rsup_noted_while_cleaning_up(note: str) -> None:
    # rsup's own notes as it stops the tree name SIGTERM and SIGKILL as what rsup sends
    # next: not what ended the job (nor the SIGKILL a kernel's OOM killer would send).
    # Built from the shim's own wording, so a reworded note that reads as a fault fails here.
    line = note.format(got="SIGTERM", sent="SIGTERM", n=1, grace=5.0, pids="4242 4243", timeout=5.0)
    output = (
        "      10/20   0G   3.173   2.039   2.271   26   160: 37% 3/8 1.1it/s\n"
        "rsup drill: kill at epoch 10/20, batch 4/8\n" + line + "\n"
    )
    diagnosis = diagnose_text(output)
    assert diagnosis.category == C.NONE, (line, diagnosis)
    drill = conclude(Evidence(diagnosis, signal=9, drills_fired=("kill",)))
    assert drill.category == C.KILLED and "kill drill" in drill.evidence[0]
    # a crash that left processes behind is the crash
    crash = 'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\n'
    later = "epoch 3/20 loss 0.4\n" + crash + "KeyError: 'x'\n" + line + "\n"
    assert diagnose_text(later).category == C.UNKNOWN


def test_a_signal_from_outside_that_nothing_explains_is_killed() -> None:
    outcome = conclude(Evidence(Diagnosis(C.NONE), signal=signal.SIGTERM))
    assert outcome.category == C.KILLED and "SIGTERM from outside rsup" in outcome.evidence[0]
    scheduler = conclude(Evidence(Diagnosis(C.NONE), exit_code=143))  # a shell's 128 + 15
    assert scheduler.category == C.KILLED
    asked = conclude(Evidence(Diagnosis(C.NONE), signal=signal.SIGTERM, stop_requested=True))
    assert asked.category != C.KILLED
    crash = conclude(Evidence(OOM, signal=signal.SIGTERM))
    assert crash.category == C.OOM  # the log explains it


def test_the_first_failing_rank_names_the_category_for_torchrun() -> None:
    rank = RankFailure(1, 1, C.OOM, "CUDA out of memory", "output", line=7)
    ev = Evidence(Diagnosis(C.NCCL_DISTRIBUTED), exit_code=1, rank_failure=rank, torchrun=True)
    outcome = conclude(ev)
    assert outcome.category == C.OOM and outcome.line == 7
    assert outcome.evidence[0].startswith("rank 1 failed first")


def test_exit_zero_with_nothing_in_the_log_is_none() -> None:
    assert conclude(Evidence(Diagnosis(C.NONE), exit_code=0)).category == C.NONE


# --- the attempt-end step --------------------------------------------------------------


def test_an_oom_halves_the_batch_in_the_plan_and_backs_off_to_starting() -> None:
    step = core.attempt_ended(job(), ended(OOM), NOW)
    assert step.state == S.BACKOFF and step.plan == Plan(batch=8)
    assert step.job["plan"] == Plan(batch=8) and step.job["resume_to"] == S.STARTING
    assert step.job["next_start_at"] == NOW + 10 and step.attempt["processed"] == 1
    assert "attempt 1 died of oom" in step.reason and "batch 8" in step.reason
    assert [name for name, _ in step.events] == ["attempt_ended", "decision"]


def test_the_halved_plan_is_the_base_of_the_next_halving() -> None:
    once = core.attempt_ended(job(), ended(OOM), NOW)
    again = core.attempt_ended(job(attempts=2, **once.job), ended(OOM), NOW + 60)
    assert again.plan == Plan(batch=4)


def test_a_repeated_gpu_fault_backs_off_to_a_reprobe_and_invalidates_the_probe() -> None:
    first = core.attempt_ended(job(), ended(GPU_FAULT), NOW)
    assert first.job["resume_to"] == S.STARTING
    assert core.Effect(core.INVALIDATE_PROBE, device="0") in first.effects
    second = core.attempt_ended(job(attempts=2, **first.job), ended(GPU_FAULT), NOW + 60)
    assert second.decision.action == "reprobe" and second.job["resume_to"] == S.PROBING
    state, reason = core.backoff_over(job(attempts=2, **second.job), Spent(0, 0, "USD"))
    assert (state, reason) == (S.PROBING, "backoff over; re-probing the GPU")


def test_a_stop_during_the_attempt_ends_stopped_with_the_stop_reason() -> None:
    ev = ended(Diagnosis(C.NONE), code=None, sig=signal.SIGTERM, stop_requested=True)
    stopping = job(state=S.STOPPING)
    step = core.attempt_ended(stopping, replace(ev, stop_reason="cost budget reached"), NOW)
    assert (step.state, step.reason) == (S.STOPPED, "cost budget reached")


def test_success_clears_where_backoff_would_lead() -> None:
    step = core.attempt_ended(job(), ended(Diagnosis(C.NONE), code=0), NOW)
    assert step.state == S.SUCCEEDED and step.job["resume_to"] is None


def test_a_budget_that_ran_out_during_backoff_stops_the_job() -> None:
    spec = job().spec.model_copy(update={"limits": job().spec.limits.model_copy(
        update={"max_runtime": 3600.0})})  # fmt: skip
    over = core.backoff_over(job(spec=spec), Spent(3700, 0, "USD"))
    assert over[0] == S.STOPPED and "max_runtime" in over[1]
    cut_short = core.backoff_over(job(), Spent(10, 0, "USD"), limit_first=True)
    assert cut_short == (S.STOPPED, "budget reached; not restarted")


# --- stop escalation on a fake clock ----------------------------------------------------


def test_term_then_grace_then_kill_of_the_tree() -> None:
    esc = Escalation(grace=30.0, created=0.0)
    assert esc.next(0.0, shim_ready=True, ended=False) == core_action(ASK, signal.SIGTERM)
    waiting = esc.next(1.0, shim_ready=True, ended=False)
    assert waiting.kind == WAIT and waiting.wait == 59.0  # grace 30 + slack 30 - 1
    assert esc.next(59.9, True, False).kind == WAIT
    assert esc.next(60.0, True, False).kind == KILL_TREE
    assert esc.next(61.0, True, False).kind == WAIT  # killed once, never twice


def test_a_job_that_ends_within_the_grace_is_never_killed() -> None:
    esc = Escalation(grace=30.0, created=0.0)
    esc.next(0.0, True, False)
    assert esc.next(5.0, True, ended=True).kind == WAIT
    assert esc.next(500.0, True, ended=True).kind == WAIT


def test_force_and_hangs_skip_the_grace_with_sigusr1() -> None:
    esc = Escalation(grace=30.0, force=True, created=0.0)
    assert esc.next(0.0, True, False) == core_action(ASK, signal.SIGUSR1)


def test_the_shim_gets_a_bounded_moment_to_take_charge_before_it_is_signalled() -> None:
    esc = Escalation(grace=30.0, created=100.0)
    assert esc.next(100.0, shim_ready=False, ended=False).kind == WAIT
    assert esc.next(109.9, shim_ready=False, ended=False).kind == WAIT
    assert esc.next(110.0, shim_ready=False, ended=False).kind == ASK  # not forever


# --- exit 0 is not enough; the words of a decision ------------------------------------


def test_exit_zero_after_an_unrecovered_oom_is_an_oom_for_a_command_job() -> None:
    step = core.attempt_ended(job(), ended(OOM, code=0), NOW)
    assert step.outcome.category == C.OOM and step.decision.action == "restart"
    assert step.plan == Plan(batch=8)
    first = step.outcome.evidence[0]
    assert first.startswith("exit 0, but the output shows an unrecovered oom at output.log:12")
    assert "wrapper script may hide the exit code" in first


@pytest.mark.parametrize(
    ("category", "signature"),
    [
        (C.CONFIG_ERROR, C.INFERRED_CONFIG_ERROR),
        (C.HIP_RUNTIME_INIT, C.INFERRED_GPU_NOT_STARTED),
        (C.HIP_RUNTIME_INIT, C.INFERRED_GPU_WARNED),
        (C.NCCL_DISTRIBUTED, C.INFERRED_LINK_LOST),
        (C.NCCL_DISTRIBUTED, C.INFERRED_CONNECT_RETRY),
    ],
)
def test_a_clean_exit_outweighs_an_inferred_cause(category: str, signature: str) -> None:
    inferred = Diagnosis(category, signature, [(4, "KeyError: 'x'")], 4)
    assert core.attempt_ended(job(), ended(inferred, code=0), NOW).state == S.SUCCEEDED


def test_a_clean_exit_does_not_outweigh_a_known_fatal_line() -> None:
    known = Diagnosis(C.CONFIG_ERROR, "module-not-found", [(4, "ModuleNotFoundError: x")], 4)
    assert core.attempt_ended(job(), ended(known, code=0), NOW).state == S.FAILED


def test_exit_zero_is_trusted_where_rsup_runs_the_trainer_itself() -> None:
    trusted = ended(OOM, code=0, trust_exit_zero=True)
    assert core.attempt_ended(job(), trusted, NOW).state == S.SUCCEEDED


def test_the_decision_names_the_last_saved_epoch_not_the_one_in_progress() -> None:
    progress = {"epoch": 3, "saved_epoch": 2}
    step = core.attempt_ended(job(progress=progress), ended(OOM), NOW)
    assert "resuming after epoch 2 in 10 s" in step.reason
    fresh = core.attempt_ended(job(progress={"epoch": 1}), ended(OOM), NOW)
    assert "starting attempt 2 in 10 s" in fresh.reason
