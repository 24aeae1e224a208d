"""Ultralytics under rsup vs bare: epoch time ratio (goal <= 1.03) and restart-to-resume latency.

Prints one JSON document. Bare = the same training in a plain Ultralytics script; epoch
times come from results.csv's cumulative `time` column in both cases (first epoch left
out: warm-up). Latency = from the killed attempt's end (exit.json) to the first batch of
the resumed attempt (its first `progress` event), minus the backoff (set to 0).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from rsup.workers import demodata

BARE = """
import sys
from ultralytics import YOLO
YOLO("yolov8n.yaml").train(data=sys.argv[1], project=sys.argv[2], name="bare", exist_ok=True,
                           epochs=int(sys.argv[3]), imgsz=160, batch=8, workers=0, seed=0,
                           device="cpu", plots=False, verbose=False)
"""


def epoch_times(results: Path) -> list[float]:
    with results.open() as f:
        stamps = [float(row["time"]) for row in csv.DictReader(f)]
    return [b - a for a, b in itertools.pairwise(stamps)]


def run_bare(data: Path, root: Path, epochs: int) -> list[float]:
    env = {**os.environ, "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(root / "cfg")}
    subprocess.run([sys.executable, "-c", BARE, str(data), str(root / "bare"), str(epochs)],
                   check=True, capture_output=True, env=env)  # fmt: skip
    return epoch_times(root / "bare" / "bare" / "results.csv")


def spec_for(root: Path, data: Path, epochs: int, name: str) -> Path:
    spec = {
        "name": name, "kind": "ultralytics", "device": "cpu", "cwd": str(root),
        "train": {"model": "yolov8n.yaml", "data": str(data), "epochs": epochs, "imgsz": 160,
                  "batch": 8, "workers": 0, "seed": 0, "plots": False, "verbose": False},
        "restart": {"backoff": {"initial": 0, "max": 0}},
    }  # fmt: skip
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run_rsup(spec: Path, state: Path, *injects: str) -> None:
    args = [f"--inject={i}" for i in injects]
    subprocess.run([sys.executable, "-m", "rsup.supervisor.cli.main", "run", str(spec),
                    "--state-dir", str(state), *args], check=True, capture_output=True)  # fmt: skip


def resume_latency(state: Path, job: str) -> float:
    attempts = state / "jobs" / job / "attempts"
    ended = json.loads((attempts / "1" / "exit.json").read_text())["ended"]
    for line in (attempts / "2" / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "progress":
            return float(event["ts"]) - float(ended)
    raise RuntimeError("the resumed attempt reported no batch")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rsup-bench-yolo-") as tmp:
        root = Path(tmp)
        data = demodata.generate(root / "data", train=64, val=16, size=160)
        bare: list[float] = []
        supervised: list[float] = []
        for n in range(args.rounds):  # alternate, so drift in machine load hits both
            print(f"round {n + 1}: bare", file=sys.stderr)
            bare += run_bare(data, root / f"b{n}", args.epochs)
            print(f"round {n + 1}: under rsup", file=sys.stderr)
            (root / f"s{n}").mkdir()
            spec = spec_for(root / f"s{n}", data, args.epochs, f"sup{n}")
            run_rsup(spec, root / f"s{n}" / "state")
            supervised += epoch_times(root / f"s{n}" / "runs" / f"sup{n}" / "results.csv")
        print("restart-to-resume", file=sys.stderr)
        (root / "k").mkdir()
        kill_spec = spec_for(root / "k", data, 4, "killed")
        run_rsup(kill_spec, root / "k" / "state", "kill@epoch=2")
        latency = resume_latency(root / "k" / "state", "killed")
    ratio = statistics.median(supervised) / statistics.median(bare)
    print(json.dumps({
        "bench": "yolo",
        "epochs_per_run": args.epochs, "rounds": args.rounds,
        "bare_epoch_s": {"median": round(statistics.median(bare), 3),
                         "all": [round(x, 3) for x in bare]},
        "rsup_epoch_s": {"median": round(statistics.median(supervised), 3),
                         "all": [round(x, 3) for x in supervised]},
        "ratio_rsup_over_bare": round(ratio, 3), "goal_ratio": 1.03, "goal_met": ratio <= 1.03,
        "restart_to_first_resumed_batch_s": round(latency, 2), "backoff_s": 0,
        "loadavg_1m": os.getloadavg()[0],
    }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
