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
from pathlib import Path

from rsup.supervisor.paths import Layout
from rsup.supervisor.store import Store

DEFAULT_KEEP = 100
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
    # A folder may hold a log of hundreds of MiB: unlinking it must not stall the loop.
    return await asyncio.to_thread(_remove_folders, layout.job_dir(job) / "attempts", below)


def _remove_folders(attempts: Path, below: int) -> int:
    removed = 0
    try:
        entries = list(os.scandir(attempts))
    except OSError:
        return 0
    for entry in entries:
        if entry.name.isdigit() and 1 < int(entry.name) < below:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += 1
    return removed
