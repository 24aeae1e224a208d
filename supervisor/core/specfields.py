"""Checks of single job-spec values (names, paths, signals, devices, argv): each returns
the value, normalised, or raises ValueError with a message that says what to write."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator

NAME_PATTERN = r"[a-z0-9][a-z0-9._-]{0,62}"


def path_text(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty; give a path, or leave the key out")
    if "\0" in value:
        raise ValueError("must not contain a NUL character")
    return value


def env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError(f"{value!r} is not a valid environment variable name; use A-Z, 0-9, _")
    return value


def env_value(value: str) -> str:
    if "\0" in value:
        raise ValueError("an environment value must not contain a NUL character")
    return value


def plain_name(what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*", value) or ".." in value:
            raise ValueError(f"{value!r} is not a valid {what}; use letters, digits, '.', '_', '-'")
        return value

    return check


def stage_name(value: str) -> str:
    if not value.isidentifier():
        raise ValueError(f"{value!r} is not a probe stage name (the <name> of def stage_<name>)")
    return value


def endpoint(value: str) -> str:
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"expected HOST or HOST:PORT such as node0:29400, got {value!r}")
    return value


PathStr = Annotated[str, AfterValidator(path_text)]
StageName = Annotated[str, AfterValidator(stage_name)]


def nproc(value: object) -> int | str:
    if isinstance(value, str) and value.strip().lower() in ("auto", "gpu", "cpu"):
        return value.strip().lower()
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(f"expected a process count (1, 2, ...) or auto, gpu, cpu; got {value!r}")


def nnodes(value: object) -> str:
    text = str(value).strip() if isinstance(value, (int, str)) else ""
    match = re.fullmatch(r"(\d+)(?::(\d+))?", text)
    low, high = (int(match[1]), int(match[2] or match[1])) if match else (0, 0)
    if not 1 <= low <= high:
        raise ValueError(f"expected a node count such as 1, or a range such as 1:4; got {value!r}")
    return text


def signal_name(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return signal.Signals(value).name
        except ValueError:
            pass
    elif isinstance(value, str):
        name = value.strip().upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        if name in signal.Signals.__members__:
            return signal.Signals[name].name
    raise ValueError(f"unknown signal {value!r}; use a name such as SIGTERM, SIGINT or SIGUSR1")


def device(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    text = value.strip().lower() if isinstance(value, str) else ""
    if text in ("auto", "cpu") or re.fullmatch(r"(cuda:)?\d+", text):
        return text
    if re.fullmatch(r"(gpu-|uuid:)[0-9a-z-]+", text):  # a stable id: survives renumbering
        return text
    raise ValueError(
        f"expected auto, cpu, a GPU index such as 0, cuda:N, or a GPU id "
        f"(GPU-<uuid> or uuid:<id>); got {value!r}"
    )


def argv(value: object) -> object:
    if isinstance(value, str):
        raise ValueError(
            f"expected a list of arguments, got the string {value!r}; write a list, "
            'e.g. command: [python, train.py, --epochs, "100"]'
        )
    if isinstance(value, list) and not value:
        raise ValueError("must not be empty; give the program and its arguments as a list")
    return value


def job_name(value: str) -> str:
    if "/" in value or ".." in value:
        raise ValueError(
            "must not contain '/' or '..' (the name becomes a folder in rsupd's state "
            "directory); use a plain name such as 'thermal-yolov8n'"
        )
    if not re.fullmatch(NAME_PATTERN, value):
        hint = re.sub(r"[^a-z0-9._-]+", "-", value.lower()).strip("-._")[:63]
        example = f"; try {hint!r}" if re.fullmatch(NAME_PATTERN, hint) else ""
        raise ValueError(
            f"{value!r} is not a valid job name: use 1 to 63 lowercase letters, digits, "
            f"'.', '_' or '-', starting with a letter or digit{example}"
        )
    return value
