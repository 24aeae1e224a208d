"""The resume point of a command or torchrun job: `checkpoint:` as a file, a folder or a
glob (`out/checkpoint-*`), newest first; a corrupt newest one falls back to the one before.

torch.save files are zip archives, checked member by member (CRC) without torch. A folder
counts when it holds files; a Hugging Face `checkpoint-N` folder also needs its
trainer_state.json (HF writes it last: without one the save was cut short), and it must
parse. Newest: by the number at the end of the name when every match has one
(checkpoint-500 < checkpoint-1000), else by modification time.
"""

from __future__ import annotations

import glob
import json
import os
import re
from pathlib import Path

from rsup.workers.yolockpt import zip_ok

GLOB_CHARS = frozenset("*?[")
ZIP_MAGIC = b"PK\x03\x04"  # torch.save files are zip archives
_HF_FOLDER = re.compile(r"checkpoint-\d+")
_NUMBER = re.compile(r"(\d+)(?:\.[A-Za-z]+)?$")


def is_pattern(checkpoint: str) -> bool:
    return any(c in GLOB_CHARS for c in checkpoint)


def candidates(checkpoint: str) -> list[Path]:
    """Every match of the spec's `checkpoint:`, newest first."""
    paths = [Path(p) for p in glob.glob(checkpoint)] if is_pattern(checkpoint) else []
    if not is_pattern(checkpoint) and os.path.exists(checkpoint):
        paths = [Path(checkpoint)]
    if paths and all(_NUMBER.search(p.name) for p in paths):
        return sorted(paths, key=_number, reverse=True)
    return sorted(paths, key=_mtime, reverse=True)


def _number(path: Path) -> int:
    match = _NUMBER.search(path.name)
    return int(match[1]) if match else -1


def resume_point(checkpoint: str | None) -> str | None:
    """The newest checkpoint that is whole, or None while there is none."""
    if not checkpoint:
        return None
    for path in candidates(checkpoint):
        if whole(path):
            return str(path)
    return None


def stamp(checkpoint: str | None) -> tuple[str, float] | None:
    """The newest match and its modification time, cheaply (no CRC): a new or newer
    checkpoint is progress."""
    if not checkpoint:
        return None
    found = candidates(checkpoint)
    return (str(found[0]), _mtime(found[0])) if found else None


def whole(path: Path) -> bool:
    if path.is_dir():
        state = path / "trainer_state.json"
        if _HF_FOLDER.fullmatch(path.name) and not state.exists():
            return False  # HF writes trainer_state.json after the weights: cut short
        if state.exists():
            try:
                json.loads(state.read_text())
            except (OSError, ValueError):
                return False
        return any(path.iterdir())
    try:
        if path.stat().st_size == 0:
            return False
        with path.open("rb") as handle:  # a zip starts with its first local header; a
            is_zip = handle.read(4) == ZIP_MAGIC  # cut-off one has lost its end record
    except OSError:
        return False
    return zip_ok(str(path)) if is_zip else True


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
