"""`make demo`: YOLOv8n on a synthetic thermal set under rsup, killed mid-run, finishing anyway."""

from __future__ import annotations

import csv
import shutil
import sys
from pathlib import Path

from rsup.supervisor.cli.foreground import run_foreground
from rsup.workers import demodata

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "config" / "jobs" / "demo.yaml"
WORK = REPO / "demo-run"
KILL_AT = "kill@epoch=10"


def main() -> int:
    for stale in ("runs", "state"):
        shutil.rmtree(WORK / stale, ignore_errors=True)
    print(f"rsup demo: making the synthetic thermal data set in {WORK / 'data'}", flush=True)
    demodata.main([str(WORK / "data"), "--train", "64", "--val", "16", "--size", "160"])
    print(
        f"rsup demo: training under rsup; the {KILL_AT} drill SIGKILLs the trainer mid-epoch",
        flush=True,
    )
    code = run_foreground(SPEC, WORK / "state", [KILL_AT])
    _summary(WORK / "runs" / "demo")
    return code


def _summary(run: Path) -> None:
    results = run / "results.csv"
    epochs: list[str] = []
    if results.exists():
        with results.open() as f:
            epochs = [row[next(iter(row))].strip() for row in csv.DictReader(f)]
    print()
    print(f"  epochs in results.csv : {len(epochs)} ({len(set(epochs))} distinct)")
    for name in ("weights/best.pt", "weights/last.pt", "results.png", "results.csv"):
        path = run / name
        print(f"  {name:<22}: {path if path.exists() else 'missing'}")
    print(f"  events                : rsup run keeps them in {WORK / 'state' / 'state.db'}")


if __name__ == "__main__":
    sys.exit(main())
