"""`rsup diagnose LOGFILE [--json]`: name what killed a job, from its log alone, no daemon."""

from __future__ import annotations

import json
import sys
import textwrap
from typing import TextIO

from rsup.supervisor.recognize.classify import Diagnosis, diagnose_file
from rsup.supervisor.recognize.signatures import SignatureError
from rsup.workers import constants as C

_WIDTH = 100


def run_diagnose(path: str, as_json: bool, out: TextIO) -> int:
    """Classify the log at `path` and print the diagnosis; 0 when it ran, 1 when it could not."""
    try:
        diagnosis = diagnose_file(path)
    except SignatureError as err:
        print(f"rsup diagnose: the signature catalogue is invalid: {err}", file=sys.stderr)
        return C.EXIT_FAILED
    except OSError as err:
        reason = err.strerror or str(err)
        print(f"rsup diagnose: cannot read {path}: {reason}", file=sys.stderr)
        return C.EXIT_FAILED
    if as_json:
        out.write(json.dumps(diagnosis.to_json(), indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(render(path, diagnosis))
    return C.EXIT_OK


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
