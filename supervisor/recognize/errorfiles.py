"""The error.json files torchrun has each rank write (TORCHELASTIC_ERROR_FILE)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ErrorFile:
    """One rank's TORCHELASTIC_ERROR_FILE."""

    local_rank: int
    timestamp: int | None
    message: str
    callstack: str


def read_error_files(log_dir: Path) -> list[ErrorFile]:
    """The error.json files of the last torchrun round under `log_dir`, by local rank."""
    rounds = [p for p in log_dir.glob("*/attempt_*") if p.name[8:].isdigit()]
    if not rounds:
        return []
    last = max(rounds, key=lambda p: int(p.name[8:]))
    found = []
    for path in sorted(last.glob("*/error.json")):
        if path.parent.name.isdigit():
            parsed = _error_file(path, int(path.parent.name))
            if parsed is not None:
                found.append(parsed)
    return found


def _error_file(path: Path, local_rank: int) -> ErrorFile | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, str):
        return ErrorFile(local_rank, _int(data.get("timestamp")), message, "")
    if not isinstance(message, dict):
        return None
    extra = message.get("extraInfo") or {}
    return ErrorFile(
        local_rank,
        _int(extra.get("timestamp")),
        str(message.get("message", "")),
        str(extra.get("py_callstack", "")),
    )


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
