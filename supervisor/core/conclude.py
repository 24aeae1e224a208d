"""Why an attempt ended: the one conclusion, drawn from all the evidence at once.

The evidence is what the effects gathered when the attempt ended: the live classifier's
diagnosis of output.log, the exit status the shim recorded, a kernel or cgroup OOM line,
the first failing torchrun rank, the drills fired, a hang verdict and whether a stop was
asked. Precedence, strongest first:

1. a hang rsup detected (it killed the attempt for it): `hang`;
2. no exit record: the shim died before recording one (`unknown`);
3. exit 126/127 before any output: the command cannot run (`config_error`, no retries);
4. exit 0 with an unrecovered fatal finding, for jobs whose exit code a wrapper may hide
   (`command`, `torchrun`): a failure of that finding's category;
5. a stop on request: whatever the log says, the attempt was stopped;
6. the log's own root cause (a signature, or an unrecognised traceback);
7. how the process ended: 0 is `none`; a crash signal is `segfault_abort`; SIGKILL with
   an OOM line is `host_oom`; a signal from outside rsup (TERM, INT, HUP, KILL) that
   nothing else explains is `killed`, and the kill drill is named as such;
8. for torchrun, the rank that failed first goes in front, and its own category wins
   when it names one.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from rsup.supervisor.core.hang import HangVerdict
from rsup.supervisor.core.policy import Outcome
from rsup.supervisor.recognize.diagnosis import Diagnosis
from rsup.supervisor.recognize.exitcodes import classify_exit
from rsup.supervisor.recognize.ranks import RankFailure, with_rank
from rsup.workers import constants as C


@dataclass(frozen=True)
class Evidence:
    """Everything known when an attempt ended; gathered by effects, judged here."""

    diagnosis: Diagnosis  # the live classifier's verdict on output.log
    exit_code: int | None = None
    signal: int | None = None
    recorded: bool = True  # the shim wrote exit.json
    ran_for: float = 0.0
    stop_requested: bool = False
    oom_line: str | None = None  # kernel log or cgroup memory.events
    hang: HangVerdict | None = None
    hang_rank: str | None = None  # the hung torchrun rank, described
    rank_failure: RankFailure | None = None
    torchrun: bool = False
    # Exit 0 proves success only for jobs whose exit rsup itself produces (Ultralytics'
    # worker); a command may be `python train.py | tee log`, which exits 0 after a crash.
    trust_exit_zero: bool = False
    output_lines: int = 0  # lines the job printed in this attempt
    drills_fired: tuple[str, ...] = ()
    advanced: bool = False
    completed: bool | None = None  # None: the kind knows no completion beyond exit 0


def conclude(ev: Evidence) -> Outcome:
    """The category, signature and evidence lines of one ended attempt."""
    if ev.hang is not None:  # rsup stopped it for the hang: not a stop on request
        why = ev.hang_rank or ev.hang.describe()
        return _outcome(ev, C.HANG, "hang", (why,), None, stopped=False)
    if not ev.recorded:
        died = ("the shim died before the job's exit was recorded",)
        return _outcome(ev, C.UNKNOWN, ev.diagnosis.signature, died, ev.diagnosis.line)
    refused = _not_runnable(ev)
    if refused is not None:
        return refused
    hidden = _hidden_by_exit_zero(ev)
    if hidden is not None:
        return hidden
    oom = ev.oom_line if "kill" not in ev.drills_fired else None
    diagnosis = classify_exit(
        ev.diagnosis, ev.exit_code, ev.signal, stop_requested=ev.stop_requested, oom_evidence=oom
    )
    category, line = diagnosis.category, diagnosis.line
    lines: tuple[str, ...] = tuple(text for _, text in diagnosis.evidence)
    killed = _killed(ev, diagnosis.category, diagnosis.signature)
    if killed is not None:
        category, lines = C.KILLED, (killed,)
    failed = ev.exit_code not in (0, None) or ev.signal is not None
    if ev.torchrun and not ev.stop_requested and failed:
        category, lines, line = with_rank(ev.rank_failure, category, lines, line)
    return _outcome(ev, category, diagnosis.signature, lines or _exit_words(ev), line)


# Signals that come from outside the job: a scheduler, a person, a drill, the OOM killer.
OUTSIDE_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                             signal.SIGQUIT})  # fmt: skip


def _killed(ev: Evidence, category: str, signature: str | None) -> str | None:
    """Why the attempt is `killed`: a signal from outside that nothing else explains (the
    kill drill is named; a bare "Killed" printed by the shell for the drill is the drill's)."""
    number = _signal_number(ev)
    if number not in OUTSIDE_SIGNALS or ev.stop_requested:
        return None
    if number == signal.SIGKILL and "kill" in ev.drills_fired:
        if category in (C.UNKNOWN, C.KILLED) or signature == "process-killed":
            return "SIGKILL sent by the kill drill (rsup inject)"
        return None
    if category != C.UNKNOWN or ev.diagnosis.category not in (C.NONE, C.KILLED):
        return None
    name = signal.Signals(number).name
    return f"ended by {name} from outside rsup; nothing in its output or the kernel log explains it"


def _signal_number(ev: Evidence) -> int | None:
    if ev.signal:
        return ev.signal
    code = ev.exit_code
    if code is not None and code < 0:
        return -code
    return code - 128 if code is not None and 128 < code <= 192 else None


# The shell's own codes: the program could not be started at all.
NOT_RUNNABLE = {126: "the command is not executable", 127: "the command was not found"}

# What a zero exit may hide: a fatal finding the job never recovered from.
HIDDEN_BY_EXIT_ZERO = frozenset({C.GPU_MEMORY_FAULT, C.OOM, C.HOST_OOM, C.HIP_RUNTIME_INIT,
                                 C.DATALOADER_WORKER, C.NCCL_DISTRIBUTED, C.SEGFAULT_ABORT,
                                 C.CONFIG_ERROR})  # fmt: skip


def _not_runnable(ev: Evidence) -> Outcome | None:
    """Exit 126/127 before any output: the command cannot run; no retry loop."""
    if ev.exit_code not in NOT_RUNNABLE or ev.output_lines > 2 or ev.stop_requested:
        return None
    if ev.diagnosis.category not in (C.NONE, C.UNKNOWN):
        return None
    why = (f"exit {ev.exit_code}: {NOT_RUNNABLE[ev.exit_code]}, before any output; "
           "fix the command and start the job again")  # fmt: skip
    return _outcome(ev, C.CONFIG_ERROR, "not-runnable", (why,), None)


def _hidden_by_exit_zero(ev: Evidence) -> Outcome | None:
    """Exit 0 after an unrecovered fatal line: a failure of that category."""
    diagnosis = ev.diagnosis
    if ev.exit_code != 0 or ev.signal is not None or ev.trust_exit_zero or ev.stop_requested:
        return None
    if diagnosis.category not in HIDDEN_BY_EXIT_ZERO or diagnosis.signature in C.INFERRED:
        return None  # an inferred cause is weaker evidence than a clean exit
    where = f" at output.log:{diagnosis.line}" if diagnosis.line else ""
    what = diagnosis.evidence[0][1] if diagnosis.evidence else diagnosis.category
    why = (f"exit 0, but the output shows an unrecovered {diagnosis.category}{where} ({what}); "
           "a wrapper script may hide the exit code")  # fmt: skip
    lines = (why, *(text for _, text in diagnosis.evidence))
    return _outcome(ev, diagnosis.category, diagnosis.signature, lines, diagnosis.line)


def _outcome(
    ev: Evidence,
    category: str,
    signature: str | None,
    lines: tuple[str, ...],
    line: int | None,
    stopped: bool | None = None,
) -> Outcome:
    return Outcome(
        exit_code=ev.exit_code,
        signal=ev.signal,
        category=category,
        signature=signature,
        evidence=lines,
        line=line,
        stop_requested=ev.stop_requested if stopped is None else stopped,
        ran_for=ev.ran_for,
        advanced=ev.advanced,
        completed=ev.completed,
    )


def _exit_words(ev: Evidence) -> tuple[str, ...]:
    if ev.signal is not None:
        try:
            return (f"killed by {signal.Signals(ev.signal).name}",)
        except ValueError:
            return (f"killed by signal {ev.signal}",)
    return (f"exit code {ev.exit_code}",) if ev.exit_code is not None else ()
