"""The shim's command line (see shim.py for what each option does).

Standard library only, Python 3.9+.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
from dataclasses import dataclass
from typing import NoReturn

from rsup.workers.boundedlog import MIN_MAX_BYTES
from rsup.workers.constants import SHIM_EXIT_BAD_ARGS


@dataclass(frozen=True)
class Options:
    attempt_dir: str
    grace: float
    stop_signal: int
    max_log_bytes: int
    cwd: str
    user: int | str | None
    group: int | str | None
    groups: list[int | str] | None
    argv: list[str]
    cgroup: str | None = None

    def path(self, name: str) -> str:
        return os.path.join(self.attempt_dir, name)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(SHIM_EXIT_BAD_ARGS, f"{self.prog}: error: {message}\n")


def _signal_number(text: str) -> int:
    name = text.strip().upper()
    if name.isdigit():
        return int(name)
    try:
        return int(signal.Signals[name if name.startswith("SIG") else "SIG" + name])
    except KeyError:
        raise argparse.ArgumentTypeError(f"unknown signal {text!r}") from None


def _id(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def _groups(text: str) -> list[int | str]:
    return [_id(g.strip()) for g in text.split(",") if g.strip()]


def parse_args(args: list[str]) -> Options:
    """Parse the command line; exits SHIM_EXIT_BAD_ARGS on a mistake."""
    parser = _Parser(prog="python -m rsup.workers.shim")
    parser.add_argument("--attempt-dir", required=True)
    parser.add_argument("--grace", type=float, default=30.0)
    parser.add_argument("--stop-signal", type=_signal_number, default=int(signal.SIGTERM))
    parser.add_argument("--max-log-bytes", type=int, default=256 * 1024 * 1024)
    parser.add_argument("--cwd", default=".")
    parser.add_argument("--user", type=_id)
    parser.add_argument("--group", type=_id)
    parser.add_argument("--groups", type=_groups)
    parser.add_argument("--cgroup", help="a cgroup v2 folder the shim and its job join")
    if "--" not in args:
        parser.error("the job's command must follow '--'")
    split = args.index("--")
    ns = parser.parse_args(args[:split])
    if not args[split + 1 :]:
        parser.error("empty job command after '--'")
    if not os.path.isdir(ns.attempt_dir):
        parser.error(f"--attempt-dir {ns.attempt_dir!r} is not a directory")
    if ns.grace < 0 or not math.isfinite(ns.grace):
        parser.error("--grace must be a number of seconds >= 0")
    if ns.max_log_bytes < MIN_MAX_BYTES:
        parser.error(f"--max-log-bytes must be at least {MIN_MAX_BYTES}")
    return Options(
        os.path.abspath(ns.attempt_dir), ns.grace, ns.stop_signal, ns.max_log_bytes,
        ns.cwd, ns.user, ns.group, ns.groups, args[split + 1 :], ns.cgroup,
    )  # fmt: skip
