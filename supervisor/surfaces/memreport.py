"""rsupd's memory on request: SIGUSR2 writes what grew since the daemon was ready.

Two views, each a difference against the baseline taken at start:
- live Python objects by type (gc), always available and cheap enough to take on demand;
- allocation sites (tracemalloc), only when rsupd was started with PYTHONTRACEMALLOC=N,
  since tracing costs CPU and memory for the daemon's whole life.

The report goes to <state>/memory-report.txt (replaced each time) and its first lines to
the log, so `kill -USR2 $(pidof rsupd)` twice an hour apart says what is leaking.
"""

from __future__ import annotations

import collections
import gc
import os
import time
import tracemalloc
from pathlib import Path

TOP = 25


def _types() -> collections.Counter[str]:
    return collections.Counter(type(obj).__qualname__ for obj in gc.get_objects())


def _rss_mb() -> float:
    try:
        with open(f"/proc/{os.getpid()}/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


class MemoryReport:
    """Each report compares with the one before (the first with the start), so two
    reports taken after a warm-up show growth alone, not what warming up allocated."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started = self.since = time.monotonic()
        self.rss_start = self.rss_mb = _rss_mb()
        self.types = _types()
        self.snapshot = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None

    def write(self) -> dict[str, float | int | str]:
        """Write the report; return its headline figures for the log."""
        gc.collect()
        now, rss, types = time.monotonic(), _rss_mb(), _types()
        grown = sorted(((n - self.types.get(t, 0), t, n) for t, n in types.items()), reverse=True)
        lines = [
            f"rsupd {os.getpid()}: {now - self.started:.0f} s since ready, "
            f"{now - self.since:.0f} s since the last report",
            f"rss {self.rss_mb:.1f} MB -> {rss:.1f} MB (at ready {self.rss_start:.1f} MB)",
            f"objects {sum(self.types.values())} -> {sum(types.values())}",
            "",
            f"object types that grew most (delta, type, now), top {TOP}:",
            *(f"  {d:+8d}  {t}  {n}" for d, t, n in grown[:TOP] if d > 0),
        ]
        snapshot = tracemalloc.take_snapshot() if self.snapshot is not None else None
        if snapshot is not None and self.snapshot is not None:
            stats = snapshot.compare_to(self.snapshot, "traceback")
            lines += ["", f"allocation sites that grew most, top {TOP}:"]
            for stat in stats[:TOP]:
                lines.append(f"  {stat.size_diff / 1024:+10.1f} KiB  {stat.count_diff:+7d} blocks")
                lines += [f"      {frame}" for frame in stat.traceback.format()]
        else:
            lines += ["", "allocation sites: start rsupd with PYTHONTRACEMALLOC=8 to see them"]
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text("\n".join(lines) + "\n", encoding="utf-8")
        partial.replace(self.path)  # a reader never sees half a report
        headline: dict[str, float | int | str] = {
            "report": str(self.path),
            "rss_before_mb": round(self.rss_mb, 1),
            "rss_now_mb": round(rss, 1),
            "objects_grown": sum(types.values()) - sum(self.types.values()),
        }
        self.since, self.rss_mb, self.types, self.snapshot = now, rss, types, snapshot
        return headline
