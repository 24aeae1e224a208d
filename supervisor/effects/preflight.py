"""Pre-flight: a short run on the same device and env before hours are spent on the real one.

Ultralytics jobs train with the spec's `preflight.train` keys replacing theirs (e.g. one
epoch on 5 % of the data) into a separate run dir; command jobs run `preflight.command`.
It goes through the shim like an attempt, so a hang is bounded by `preflight.timeout`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import signal
from pathlib import Path
from typing import Any

from rsup.supervisor.core.job import Job
from rsup.supervisor.core.spec import JobSpec, PreflightSpec
from rsup.supervisor.effects import launch, yolojob
from rsup.supervisor.effects.paths import Layout
from rsup.supervisor.effects.procwait import signal_if_same, wait_exit
from rsup.supervisor.recognize.offline import diagnose_file
from rsup.workers import constants as C


def wanted(job: Job) -> bool:
    return job.spec.preflight is not None and not job.plan.preflight_passed


def preflight_spec(job: Job, folder: Path) -> JobSpec:
    """The job's spec with the preflight's train keys or command in place."""
    pre = job.spec.preflight or PreflightSpec()
    update: dict[str, Any] = {"preflight": None}
    if job.kind == "ultralytics":
        train = {**(job.spec.train or {}), **(pre.train or {})}
        update["train"] = {**train, "project": str(folder / "runs"), "name": "preflight"}
    elif pre.command:
        update["command"] = list(pre.command)
    return job.spec.model_copy(update=update)


async def run(job: Job, layout: Layout, base_env: dict[str, str]) -> tuple[bool, str]:
    """(passed, what to tell people)."""
    folder = layout.job_dir(job.name) / "preflight"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    spec = preflight_spec(job, folder)
    who = launch.run_as(job.owner_uid)
    argv = launch.job_argv(spec, folder, job.batch, job.workers)
    extra = {C.ENV_JOB: job.name, C.ENV_ATTEMPT: "preflight", C.ENV_ATTEMPT_DIR: str(folder),
             C.ENV_EVENTS_FILE: str(folder / C.EVENTS_JSONL), "PYTHONPATH": str(layout.pylib),
             **job.plan.env}  # fmt: skip
    if job.device == "cpu":
        extra["CUDA_VISIBLE_DEVICES"] = extra["HIP_VISIBLE_DEVICES"] = ""
    if spec.kind == "ultralytics":
        yolojob.write_config(
            folder, dataclasses.replace(job, spec=spec, drills=[]), folder, job.device
        )
    pid = launch.start_shim(launch.shim_argv(spec, folder, argv, who),
                            launch.job_env(base_env, spec, extra, who))  # fmt: skip
    timeout = (job.spec.preflight or PreflightSpec()).timeout
    return await _conclude(folder, pid, launch.start_time(pid), timeout)


async def _conclude(
    folder: Path, pid: int, started: int | None, timeout: float
) -> tuple[bool, str]:
    ended = asyncio.ensure_future(wait_exit(pid, started))
    await asyncio.wait({ended}, timeout=timeout)
    if not ended.done():
        signal_if_same(pid, started, signal.SIGUSR1)
        await ended
        return False, f"preflight did not finish within {timeout:g} s (see {folder / C.OUTPUT_LOG})"
    exit_data = launch.exit_info(folder) or {}
    if exit_data.get("exit_code") == 0:
        return True, "preflight passed"
    diagnosis = diagnose_file(folder / C.OUTPUT_LOG)
    what = diagnosis.evidence[0][1] if diagnosis.evidence else f"exit {exit_data.get('exit_code')}"
    where = f" at preflight output.log:{diagnosis.line}" if diagnosis.line else ""
    return (
        False,
        f"preflight failed: {diagnosis.category} ({what}{where}); fix it before the long run",
    )
