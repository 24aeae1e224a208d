"""How much of a job's history rsupd keeps.

A job that crash-loops for a week must not fill the disk with attempt folders (each holds
an output.log of up to log_max_bytes) nor the database with bookkeeping events. After each
attempt, rsupd keeps the folders and events of the first attempt (the original failure)
and of the newest `keep` attempts. Of older attempts it keeps their row in the attempts
table (start, end, exit, fault: what `rsup report` draws) and the events that record the
run's progress, so the training curve stays whole; the rest goes.
"""

from __future__ import annotations

import os
import shutil

from rsup.supervisor.paths import Layout
from rsup.supervisor.store import Store

DEFAULT_KEEP = 100
KEPT_EVENTS = ("progress", "epoch_end", "checkpoint_saved", "run_completed", "slowdown")


def oldest_kept(newest: int, keep: int) -> int:
    """The oldest attempt (attempt 1 aside) whose folder and events are kept."""
    return max(2, newest - keep + 1) if keep > 0 else 2


def prune(store: Store, layout: Layout, job: str, newest: int, keep: int) -> int:
    """After attempt `newest` ended: drop what retention does not keep. `keep` 0 keeps
    everything. Returns the number of attempt folders removed."""
    if keep <= 0 or newest - keep <= 1:
        return 0
    below = oldest_kept(newest, keep)
    removed = 0
    try:
        entries = list(os.scandir(layout.job_dir(job) / "attempts"))
    except OSError:
        entries = []
    for entry in entries:
        if entry.name.isdigit() and 1 < int(entry.name) < below:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += 1
    store.prune_events(job, below, KEPT_EVENTS)
    return removed
