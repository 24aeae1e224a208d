"""CPU time of a process tree, read from /proc along child links only.

psutil's children(recursive=True) reads every process on the machine; with many jobs
checked twice a second that scan was most of rsupd's idle CPU. /proc/<pid>/task/*/children
names only the tree's own members.
"""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            kids += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return kids


def _cpu_seconds(pid: int) -> float:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(b")") + 2 :].split()
    # utime stime cutime cstime: a child reaped inside the tree hands its time to its parent
    return sum(int(f) for f in fields[11:15]) / TICKS


def tree_cpu(root: int) -> float | None:
    """User+system seconds of `root` and every descendant; None when root is gone."""
    if not Path(f"/proc/{root}").exists():
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
