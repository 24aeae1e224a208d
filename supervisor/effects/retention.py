"""How much of a job's history rsupd keeps.

A job that crash-loops for a week must not fill the disk with attempt folders (each holds
an output.log of up to log_max_bytes) nor the database with bookkeeping events. After each
attempt, rsupd keeps the folders and events of the first attempt (the original failure)
and of the newest `keep` attempts. Of older attempts it keeps their row in the attempts
table (start, end, exit, fault) and the events `rsup report` draws (device, decision,
resume point, progress), so the report stays whole; the rest (state changes, output-derived
findings, exit details) goes. The folders are the bulk: they are removed off the loop.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rsup.supervisor.effects.paths import Layout
from rsup.supervisor.effects.store import Store

DEFAULT_KEEP = 100
# Deleting is slow I/O kept off the loop, in one thread of its own (not asyncio's default
# pool, which would keep up to cpu+4 idle threads after a burst of deletions).
_deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rsupd-delete")


async def delete_tree(path: Path) -> None:
    """rm -rf `path` without stalling the loop (a folder may hold logs of hundreds of MiB)."""
    await asyncio.get_running_loop().run_in_executor(_deleter, shutil.rmtree, path, True)


# What `rsup report` draws for every attempt: its device (attempt_started), the decision
# after it, the resume point (run_started) and the training curve.
KEPT_EVENTS = ("attempt_started", "decision", "run_started", "progress", "checkpoint_saved",
               "run_completed", "slowdown")  # fmt: skip


def oldest_kept(newest: int, keep: int) -> int:
    """The oldest attempt (attempt 1 aside) whose folder and events are kept."""
    return max(2, newest - keep + 1) if keep > 0 else 2


async def prune(store: Store, layout: Layout, job: str, newest: int, keep: int) -> int:
    """After attempt `newest` ended: drop what retention does not keep. `keep` 0 keeps
    everything. Returns the number of attempt folders removed."""
    if keep <= 0 or newest - keep <= 1:
        return 0
    below = oldest_kept(newest, keep)
    store.prune_events(job, below, KEPT_EVENTS)
    folders = _expired_folders(layout.job_dir(job) / "attempts", below)
    for folder in folders:
        await delete_tree(folder)
    return len(folders)


def _expired_folders(attempts: Path, below: int) -> list[Path]:
    try:
        entries = list(os.scandir(attempts))
    except OSError:
        return []
    return [Path(e.path) for e in entries if e.name.isdigit() and 1 < int(e.name) < below]
