"""What can never run, refused at submit: a missing cwd, interpreter or script, and
placeholders that would silently drop a whole argument. Called by core.spec when a spec
file is loaded (it checks the paths the spec names, relative to the spec's folder)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rsup.supervisor.core.spec import JobSpec

CHECKPOINT_TOKEN = "{checkpoint}"
PYTHON_NAMES = ("python", "python3", "{python}")
KNOBS = ("batch", "workers")


def problems(spec: JobSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """(field path, message) for everything about the spec that can never run."""
    found = placeholder_problems(spec)
    if spec.kind == "ultralytics":
        return found
    if not os.path.isdir(spec.cwd):
        found.append((("cwd",), f"no such folder: {spec.cwd}; create it or fix the path"))
        return found  # the paths below are read from it
    if spec.python is not None and not os.access(spec.python, os.X_OK):
        what = "does not exist" if not os.path.exists(spec.python) else "is not executable"
        found.append((("python",), f"{spec.python} {what}; give the training venv's python"))
    found += _program_problems(spec)
    return found


def placeholder_problems(spec: JobSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """Pure checks of the command's placeholders."""
    found: list[tuple[tuple[str | int, ...], str]] = []
    for i, arg in enumerate(spec.command or []):
        if CHECKPOINT_TOKEN in arg and arg != CHECKPOINT_TOKEN and not _option_form(arg):
            found.append((("command", i), (
                f"{CHECKPOINT_TOKEN} inside the longer argument {arg!r} would drop the whole "
                "argument while no checkpoint exists; give it as its own argument "
                "(--resume, \"{checkpoint}\"), or use $RSUP_CHECKPOINT inside a shell string"
            )))  # fmt: skip
        for knob in KNOBS:
            if "{" + knob + "}" in arg and getattr(spec, knob) is None:
                found.append((("command", i), (
                    f"uses {{{knob}}} but the spec sets no {knob}:; add e.g. {knob}: "
                    f"{16 if knob == 'batch' else 4}"
                )))  # fmt: skip
    return found


def _option_form(arg: str) -> bool:
    """--resume={checkpoint}: dropped alone while there is no checkpoint, as documented."""
    return re.fullmatch(r"-[^=\s]*=\{checkpoint\}", arg) is not None


def _program_problems(spec: JobSpec) -> list[tuple[tuple[str | int, ...], str]]:
    command = spec.command or []
    if not command:
        return []
    cwd = Path(spec.cwd)
    if spec.kind == "torchrun":
        return _script_problem(cwd, command[0], 0)
    program = command[0]
    if program in PYTHON_NAMES:
        script = command[1] if len(command) > 1 else ""
        return _script_problem(cwd, script, 1)
    if os.sep in program:
        path = cwd / program
        if not os.access(path, os.X_OK):
            what = "does not exist" if not path.exists() else "is not executable"
            return [(("command", 0), f"{path} {what}")]
        return []
    if shutil.which(program) is None:
        return [(("command", 0), f"{program!r} is not on PATH; give its full path")]
    return []


def _script_problem(cwd: Path, script: str, index: int) -> list[tuple[tuple[str | int, ...], str]]:
    if not script.endswith(".py") or script.startswith("-"):
        return []
    path = cwd / os.path.expanduser(script)
    if path.is_file():
        return []
    return [(("command", index), f"no such script: {path} (relative to cwd {cwd}); fix the path")]
