"""`rsup diagnose LOGFILE [--json] [--kind K] [--batch N] [--workers N]`: name what killed
a job from its log alone, no daemon, and say what rsup would do about it for that kind of
job (the policy's own decision for a first failure, not a promise it cannot keep).

Exit codes: 0 the log shows no failure; 4 it shows one (printed); 1 it could not be read.
"""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import replace
from typing import TextIO

from rsup.supervisor.core import policy
from rsup.supervisor.recognize.diagnosis import Diagnosis
from rsup.supervisor.recognize.offline import diagnose_file
from rsup.supervisor.recognize.signatures import SignatureError
from rsup.workers import constants as C

_WIDTH = 100
EXIT_FAILURE_FOUND = 4  # the log shows a failure (0: it shows none)
KINDS = ("command", "ultralytics", "torchrun")


def run_diagnose(
    path: str,
    as_json: bool,
    out: TextIO,
    kind: str = "command",
    batch: int | None = None,
    workers: int | None = None,
) -> int:
    """Classify the log at `path` and print the diagnosis: 0 no failure, 4 a failure,
    1 when the log could not be read."""
    try:
        diagnosis = diagnose_file(path)
    except SignatureError as err:
        print(f"rsup diagnose: the signature catalogue is invalid: {err}", file=sys.stderr)
        return C.EXIT_FAILED
    except OSError as err:
        reason = err.strerror or str(err)
        print(f"rsup diagnose: cannot read {path}: {reason}", file=sys.stderr)
        return C.EXIT_FAILED
    if diagnosis.category != C.NONE:
        diagnosis = replace(diagnosis, action=would_do(diagnosis, kind, batch, workers))
    if as_json:
        out.write(json.dumps(diagnosis.to_json(), indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(render(path, diagnosis))
    return C.EXIT_OK if diagnosis.category == C.NONE else EXIT_FAILURE_FOUND


def would_do(diagnosis: Diagnosis, kind: str, batch: int | None, workers: int | None) -> str:
    """What rsup's policy decides after a first attempt that ended this way, for this kind
    of job with this batch and worker count (None: rsup has no knob to turn)."""
    outcome = policy.Outcome(exit_code=1, signal=None, category=diagnosis.category,
                             signature=diagnosis.signature,
                             evidence=tuple(t for _, t in diagnosis.evidence))  # fmt: skip
    history = policy.History(attempts=1, failures=1, stalled=1, same_category=1, device="0",
                             batch=batch, workers=workers)  # fmt: skip
    decision = policy.decide(outcome, history, policy.Limits())
    article = "an" if kind[0] in "aeiou" else "a"
    knobs = f"{article} {kind} job" + (f" with batch {batch}" if batch else "")
    if kind != "ultralytics" and batch is None and diagnosis.category == C.OOM:
        knobs += " (no `batch:` in its spec, so rsup cannot halve it)"
    return f"for {knobs}: {decision.action}: {decision.reason}"


def render(path: str, diagnosis: Diagnosis) -> str:
    """The diagnosis as text for people: what, where, why, and what to do."""
    if diagnosis.category == C.NONE:
        return f"{path}: none: no known failure signature in this log\n"
    where = f" at line {diagnosis.line}" if diagnosis.line else ""
    lines = [f"{path}: {diagnosis.category}{where}"]
    if diagnosis.signature:
        lines.append(f"  signature: {diagnosis.signature}")
    lines += _field("meaning", diagnosis.meaning)
    lines += _field("action", diagnosis.action)
    if diagnosis.evidence:
        lines.append("  evidence:")
        width = max(len(str(n)) for n, _ in diagnosis.evidence)
        lines += [f"    {_place(n):>{width}}: {text}" for n, text in diagnosis.evidence]
    lines += _field("remedy", diagnosis.remedy)
    return "\n".join(lines) + "\n"


def _field(name: str, value: str | None) -> list[str]:
    if not value:
        return []
    label = f"  {name}:".ljust(12)
    return textwrap.wrap(value, _WIDTH, initial_indent=label, subsequent_indent=" " * 12)


def _place(line: int) -> str:
    return str(line) if line > 0 else "-"
