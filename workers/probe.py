"""Staged GPU probe: ``python -m rsup.workers.probe --device D [--json] [--stage-file F ...]``.

Runs inside the job's own interpreter (Python 3.9+, torch 1.13+), so it imports only the
standard library, and torch lazily in the ``import`` stage. With ``--json`` every stage
writes one JSON line when it starts and one when it ends, flushed at once; the caller
(``rsup.supervisor.probe.run``) enforces the timeouts and kills this process when a stage hangs.
Without ``--json`` one readable line per stage is printed instead.

Stray output (from stages, torch, C libraries) is sent to stderr, so stdout carries only
the protocol. Exit status: 0 when no stage failed, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import ast
import faulthandler
import importlib.util
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

from rsup.workers import probestages, proctree
from rsup.workers.probestages import StageContext, StageSkipped

BUILTIN_STAGES = tuple(probestages.BUILTINS)
# Every other stage needs torch and the device facts; a failure here skips the rest.
PREREQUISITES = ("import", "detect")
STAGE_PREFIX = "stage_"
ERROR_LIMIT = 4000

StageFn = Callable[[StageContext], Any]
Emit = Callable[[dict[str, Any]], None]


class PlanEntry(NamedTuple):
    name: str
    path: str | None  # the stage file, None for a built-in


class ProbeDataset:
    """Map-style data set for the dataloader stage; module level so spawn workers import it."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import torch

        return torch.full((3, 8, 8), float(index)), index


def normalize_device(device: str) -> str:
    """``0`` -> ``cuda:0``, ``cuda`` -> ``cuda:0``; ``cpu`` and ``cuda:N`` unchanged."""
    text = device.strip().lower()
    if text.isdigit():
        return "cuda:" + text
    if text in ("cuda", "gpu"):
        return "cuda:0"
    return text


def custom_stage_names(path: str) -> list[str]:
    """The ``stage_<name>`` functions a stage file defines, in file order (read, not run)."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    return [
        node.name[len(STAGE_PREFIX) :]
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith(STAGE_PREFIX)
    ]


def plan_stages(
    stage_files: Sequence[str] = (), only: Sequence[str] = (), skip: Sequence[str] = ()
) -> list[PlanEntry]:
    """The stages a probe runs, in order; the caller computes the same plan to follow it.

    A stage file that cannot be read or defines no stage becomes one stage named after the
    file, which fails with the reason when run.
    """
    plan = [PlanEntry(name, None) for name in BUILTIN_STAGES]
    for path in stage_files:
        try:
            names = custom_stage_names(path)
        except (OSError, SyntaxError, ValueError):
            names = []
        plan.extend(PlanEntry(name, path) for name in (names or [Path(path).stem]))
    if only:
        plan = [e for e in plan if e.name in PREREQUISITES or e.name in only]
    return [e for e in plan if e.name in PREREQUISITES or e.name not in skip]


class _StageFiles:
    """Loads each stage file once, when its first stage runs (so its time counts there)."""

    def __init__(self) -> None:
        self._modules: dict[str, Any] = {}

    def function(self, path: str, name: str) -> StageFn:
        if path not in self._modules:
            module_name = f"rsup_probe_stages_{len(self._modules)}"
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load stage file {path}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self._modules[path] = module
        fn = getattr(self._modules[path], STAGE_PREFIX + name, None)
        if not callable(fn):
            raise LookupError(f"stage file {path} defines no {STAGE_PREFIX}{name} function")
        result: StageFn = fn
        return result


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= ERROR_LIMIT else text[: ERROR_LIMIT - 3] + "..."


def _details(result: Any) -> dict[str, Any]:
    if result is None:
        return {}
    if isinstance(result, dict):
        return dict(result)
    return {"result": result}


def run_stage(ctx: StageContext, name: str, fn: StageFn, emit: Emit) -> str:
    """Run one stage between its start and end lines; return its status."""
    emit({"stage": name, "status": "start", "ts": time.time()})
    started = time.monotonic()
    status: str = "ok"
    error: str | None = None
    details: dict[str, Any] = {}
    try:
        details = _details(fn(ctx))
    except StageSkipped as exc:
        status, error = "skipped", str(exc)
    except (Exception, SystemExit) as exc:
        status, error = "failed", _error_text(exc)
        traceback.print_exc(file=sys.stderr)
    emit(
        {
            "stage": name,
            "status": status,
            "seconds": round(time.monotonic() - started, 4),
            "error": error,
            "details": details,
            "ts": time.time(),
        }
    )
    return status


def _skipped(name: str, reason: str) -> dict[str, Any]:
    return {"stage": name, "status": "skipped", "seconds": 0.0, "error": reason,
            "details": {}, "ts": time.time()}  # fmt: skip


def run_stages(device: str, plan: Sequence[PlanEntry], emit: Emit) -> bool:
    """Run the planned stages in this process; True when none failed."""
    ctx = StageContext(normalize_device(device))
    files = _StageFiles()
    blocked: str | None = None
    all_ok = True
    for name, path in plan:
        if blocked is not None:
            emit(_skipped(name, blocked))
            continue
        if path is None:
            fn: StageFn = probestages.BUILTINS[name]
        else:
            fn = _lazy(files, path, name)
        status = run_stage(ctx, name, fn, emit)
        if status == "failed":
            all_ok = False
            if name in PREREQUISITES:
                blocked = f"not run: stage {name} failed"
    return all_ok


def _lazy(files: _StageFiles, path: str, name: str) -> StageFn:
    def call(ctx: StageContext) -> Any:
        return files.function(path, name)(ctx)

    return call


class _Writer:
    """Emits records on the protocol stream: JSON lines, or readable lines for people."""

    def __init__(self, stream: IO[str], as_json: bool) -> None:
        self.stream = stream
        self.as_json = as_json

    def __call__(self, record: dict[str, Any]) -> None:
        if self.as_json:
            line = json.dumps(record, default=repr, sort_keys=True)
        elif record["status"] == "start":
            return
        else:
            line = (
                f"{record['stage']:<16} {record['status']:<8} {record['seconds']:8.2f} s  "
                f"{record['error'] or ''}"
            )
        self.stream.write(line + "\n")
        self.stream.flush()


def _protocol_stream() -> IO[str]:
    """Keep the real stdout for the protocol; send fd 1 (prints, C libraries) to stderr."""
    sys.stdout.flush()
    stream = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    return stream


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rsup.workers.probe", description=__doc__)
    parser.add_argument("--device", default="cuda:0", help="cpu, cuda, cuda:N or N")
    parser.add_argument("--json", action="store_true", help="JSON lines (the rsup protocol)")
    parser.add_argument("--stage-file", action="append", default=[], metavar="F")
    parser.add_argument("--only", action="append", default=[], metavar="STAGE",
                        help="run only this stage (after import and detect)")  # fmt: skip
    parser.add_argument("--skip", action="append", default=[], metavar="STAGE")
    return parser.parse_args(argv)


PR_SET_PDEATHSIG = 1


def die_with_caller() -> None:
    """SIGKILL when the caller dies: a probe hung in a stage would outlive a killed rsupd
    and hold the GPU beside the probe the next rsupd starts."""
    proctree.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # best effort: an error changes nothing


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    die_with_caller()
    faulthandler.enable()
    emit = _Writer(_protocol_stream(), args.json)
    plan = plan_stages([os.path.abspath(f) for f in args.stage_file], args.only, args.skip)
    return 0 if run_stages(args.device, plan, emit) else 1


if __name__ == "__main__":
    sys.exit(main())
