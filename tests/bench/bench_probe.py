"""Probe wall time on the CPU, and what isolation costs: stages in this process vs a child.

Prints one JSON object: ``probe_wall_s_cpu`` (the full probe through rsup, as rsupd runs
it), ``in_process_s`` (the same stages called here, torch imported cold), ``isolated_s``
(through rsup.supervisor.probe.run) and ``isolation_overhead_s``: the time outside the stages
that isolation adds (interpreter start, protocol, kill and reap). It is taken from each
run's wall time minus its stages' own seconds, because the stages themselves (spawned
DataLoader workers above all) vary by more than the overhead from run to run.
A first isolated run warms the page cache so both measured runs read torch from memory.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def in_process() -> tuple[float, dict[str, float]]:
    from rsup.workers.probe import plan_stages, run_stages

    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    if not run_stages("cpu", plan_stages(), records.append):
        raise SystemExit(f"in-process probe failed: {records}")
    seconds = time.perf_counter() - started
    return seconds, {r["stage"]: r["seconds"] for r in records if r["status"] != "start"}


def isolated() -> tuple[float, dict[str, float]]:
    from rsup.supervisor.probe.run import run_probe_sync

    started = time.perf_counter()
    report = run_probe_sync("cpu")
    seconds = time.perf_counter() - started
    if not report.ok:
        raise SystemExit(f"isolated probe failed: {report.to_json()}")
    return seconds, {s.name: s.seconds for s in report.stages}


def main() -> None:
    isolated()  # warm-up
    local, local_stages = in_process()
    child, child_stages = isolated()
    local_outside = local - sum(local_stages.values())
    child_outside = child - sum(child_stages.values())
    result = {
        "probe_wall_s_cpu": round(child, 3),
        "in_process_s": round(local, 3),
        "isolated_s": round(child, 3),
        "isolation_overhead_s": round(child_outside - local_outside, 3),
        "wall_difference_s": round(child - local, 3),
        "stages_in_process_s": local_stages,
        "stages_isolated_s": child_stages,
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":  # spawn-started DataLoader workers import this file again
    main()
