"""CPU time of a process tree, read from /proc along child links only.

psutil's children(recursive=True) reads every process on the machine; with many jobs
checked twice a second that scan was most of rsupd's idle CPU. /proc/<pid>/task/*/children
names only the tree's own members. Files are read with open() on plain strings: this runs
every second per job, and pathlib would intern every pid it ever saw.
"""

from __future__ import annotations

import os

from rsup.workers.proctree import stat_fields as stat_fields

TICKS = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                kids += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return kids


def _cpu_seconds(pid: int) -> float:
    fields = stat_fields(pid)
    if fields is None:
        return 0.0
    # utime stime cutime cstime: a child reaped inside the tree hands its time to its parent
    return sum(int(f) for f in fields[11:15]) / TICKS


def tree_cpu(root: int) -> float | None:
    """User+system seconds of `root` and every descendant; None when root is gone."""
    if not os.path.exists(f"/proc/{root}"):
        return None
    total, stack, seen = 0.0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _cpu_seconds(pid)
        stack += _children(pid)
    return total
