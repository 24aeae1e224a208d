"""`rsup run`: the same engine as rsupd, in the foreground, for one job."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from rsup.supervisor.cli import logs, show
from rsup.supervisor.core.spec import JobSpec, load_spec
from rsup.supervisor.core.states import JobState
from rsup.supervisor.effects.cgroups import AttemptCgroups
from rsup.supervisor.effects.engine import Engine, EngineError
from rsup.supervisor.effects.paths import Layout
from rsup.workers import constants as C

QUIET_EVENTS = {"last_good_kept", "checkpoint_saved", "job_submitted"}


def parse_inject(text: str) -> tuple[str, int | None]:
    """`kill`, `hang@epoch=3` -> (kind, epoch)."""
    kind, _, where = text.partition("@")
    if kind not in ("kill", "hang", "oom"):
        raise ValueError(f"--inject {text}: the drill is kill, hang or oom")
    if not where:
        return kind, None
    key, _, value = where.partition("=")
    if key != "epoch" or not value.isdigit():
        raise ValueError(f"--inject {text}: write KIND@epoch=K, e.g. kill@epoch=2")
    return kind, int(value)


def run_foreground(spec_path: Path, state_dir: Path | None, injects: list[str]) -> int:
    spec = load_spec(spec_path, runnable=True)
    try:
        drills = [parse_inject(text) for text in injects]
    except ValueError as exc:
        print(f"rsup run: {exc}", file=sys.stderr)
        return C.EXIT_USAGE
    logs.quiet()
    layout = Layout(state_dir or Path.cwd() / ".rsup-run")
    state = asyncio.run(_supervise(layout, spec, drills))
    print(f"rsup run: job {spec.name} {state.value}")
    return C.EXIT_OK if state == JobState.SUCCEEDED else C.EXIT_FAILED


async def _supervise(
    layout: Layout, spec: JobSpec, drills: list[tuple[str, int | None]]
) -> JobState:
    import os

    engine = Engine(layout)
    engine.store.listeners.append(_print_event)
    name = spec.name
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, engine.stop, name)
    try:
        existing = engine.store.get_job(name)
        if existing is not None and not existing.state.terminal:
            await engine.recover()
        else:
            engine.layout.ensure_pylib()
            engine.cgroups = AttemptCgroups.find(engine.base_env)
            engine.submit(spec, os.getuid())
        for kind, epoch in drills:
            engine.inject(name, kind, epoch)
        return (await engine.wait_terminal(name)).state
    except EngineError as exc:
        print(f"rsup run: {exc}", file=sys.stderr)
        return JobState.FAILED
    finally:
        await engine.close()


def _print_event(event: dict[str, Any]) -> None:
    if event["event"] == "progress":
        print(f"  {event['job']} #{event['attempt']} {show.progress_text(event)}", flush=True)
    elif event["event"] not in QUIET_EVENTS:
        print(show.event_line(event), flush=True)
