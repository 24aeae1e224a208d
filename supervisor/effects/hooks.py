"""Completion hooks: commands run when a job ends (upload results, `shutdown -h +5`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

from rsup.supervisor.core.job import Job
from rsup.supervisor.effects import launch
from rsup.supervisor.effects.store import Store

OUTPUT_KEEP = 4000  # characters of a hook's output kept with the job's events


def hooks_for(job: Job, outcome: str) -> list[tuple[str, list[str]]]:
    """(name, argv) of the hooks that apply to this outcome, in the order they run."""
    hooks = job.spec.hooks
    wanted = {"succeeded": ["on_success"], "failed": ["on_failure"]}.get(outcome, [])
    chosen = [(name, getattr(hooks, name)) for name in [*wanted, "on_exit"]]
    return [(name, list(argv)) for name, argv in chosen if argv]


def hook_env(job: Job, outcome: str, base: dict[str, str]) -> dict[str, str]:
    progress = job.progress or {}
    env = {
        **base,
        "RSUP_JOB": job.name,
        "RSUP_OUTCOME": outcome,
        "RSUP_REASON": job.reason,
        "RSUP_ATTEMPTS": str(job.attempts),
        "RSUP_LAST_FAULT": job.last_fault or "",
        "RSUP_EPOCH": str(progress.get("epoch", "")),
    }
    for key in ("run_dir", "best", "last"):
        if progress.get(key):
            env[f"RSUP_{key.upper()}"] = str(progress[key])
    return env


async def run_hooks(store: Store, job: Job, outcome: str, base_env: dict[str, str]) -> None:
    """Run each hook (as the job's user, in its cwd, bounded); record what it said."""
    timeout = job.spec.hooks.timeout
    for name, argv in hooks_for(job, outcome):
        code, output = await _run_one(job, argv, hook_env(job, outcome, base_env), timeout)
        store.emit(job.name, None, "hook_ran", hook=name, argv=argv, exit_code=code,
                   output=output[-OUTPUT_KEEP:])  # fmt: skip


async def _run_one(
    job: Job, argv: list[str], env: dict[str, str], timeout: float
) -> tuple[int | None, str]:
    who = launch.run_as(job.owner_uid)
    extra: dict[str, Any] = {}
    if who is not None:
        extra = {"user": who.uid, "group": who.gid, "extra_groups": list(who.groups)}
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=job.spec.cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True, **extra,
        )  # fmt: skip
    except OSError as exc:
        return None, f"cannot start hook: {exc}"
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        return None, f"hook killed after {timeout:g} s"
    return proc.returncode, out.decode("utf-8", "replace")
