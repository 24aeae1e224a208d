"""A log's diagnosis completed by how the process ended: exit status and signal."""

from __future__ import annotations

import signal as signals
from dataclasses import replace

from rsup.supervisor.recognize.diagnosis import Diagnosis
from rsup.workers import constants as C

_EXIT_REMEDY = {
    C.SEGFAULT_ABORT: "Run the job with PYTHONFAULTHANDLER=1 to see where it crashed.",
    C.HOST_OOM: "Lower `workers` or the batch size, disable dataset caching, or add RAM.",
}
_CRASH_SIGNALS = {signals.SIGSEGV, signals.SIGABRT, signals.SIGBUS, signals.SIGILL, signals.SIGFPE}


def classify_exit(
    diagnosis: Diagnosis,
    exit_code: int | None,
    signal: int | None,
    *,
    stop_requested: bool = False,
    oom_evidence: str | None = None,
) -> Diagnosis:
    """Complete a log's diagnosis with how the process ended, when the log says nothing.

    Exit 0 is `none`. A crash signal (SEGV, ABRT, BUS, ILL, FPE) is `segfault_abort`.
    SIGKILL that nobody asked for is `host_oom` only with `oom_evidence` (a kernel log
    line, a cgroup oom_kill count), else `unknown`. A shell's 128+N and Python's -N
    exit codes count as signal N.
    """
    number = _signal_number(exit_code, signal)
    if number is None and exit_code == 0:
        return Diagnosis(category=C.NONE)
    known = diagnosis.category not in (C.NONE, C.UNKNOWN)
    if known or stop_requested or (number is None and exit_code is None):
        return diagnosis
    if number in _CRASH_SIGNALS:
        return _from_exit(diagnosis, C.SEGFAULT_ABORT, f"the job was killed by {_name(number)}")
    if number == signals.SIGKILL:
        sender = "(sender unknown: no kernel OOM evidence)"
        detail = oom_evidence or f"the job was killed by SIGKILL {sender}"
        return _from_exit(diagnosis, C.HOST_OOM if oom_evidence else C.UNKNOWN, detail)
    status = f"signal {_name(number)}" if number is not None else f"status {exit_code}"
    return _from_exit(diagnosis, C.UNKNOWN, f"the job exited with {status}")


def _signal_number(exit_code: int | None, signal: int | None) -> int | None:
    if signal:
        return signal
    if exit_code is not None and exit_code < 0:
        return -exit_code
    if exit_code is not None and 128 < exit_code <= 128 + 64:
        return exit_code - 128
    return None


def _name(number: int) -> str:
    names = {s.value: s.name for s in signals.Signals}
    return names.get(number, str(number))


def _from_exit(diagnosis: Diagnosis, category: str, detail: str) -> Diagnosis:
    evidence = [*diagnosis.evidence, (0, detail)]
    if diagnosis.category == C.UNKNOWN and category == C.UNKNOWN:
        return replace(diagnosis, evidence=evidence)
    meaning = detail[0].upper() + detail[1:] + "."
    return Diagnosis(category, None, evidence, None, _EXIT_REMEDY.get(category), meaning, None)
