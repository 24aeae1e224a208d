"""Ultralytics jobs under rsup, on the CPU with real training: the faults of issue 5."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from rsup.supervisor.effects.store import Store
from rsup.workers import demodata

from tests.conftest import Rsupd, wait_for

pytest.importorskip("ultralytics")
pytestmark = pytest.mark.e2e
EPOCHS = 3


@pytest.fixture(scope="module")
def data_yaml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demodata.generate(tmp_path_factory.mktemp("data"), train=16, val=8, size=96)


def yolo_spec(folder: Path, data: Path, name: str = "yolo", **extra: Any) -> Path:
    spec = {
        "name": name,
        "kind": "ultralytics",
        "train": {
            "model": "yolov8n.yaml",
            "data": str(data),
            "epochs": EPOCHS,
            "imgsz": 96,
            "batch": 8,
            "workers": 0,
            "seed": 0,
            "plots": False,
        },
        "restart": {"backoff": {"initial": 0.5, "max": 2}},
        "hang": {"timeout": 60, "startup_timeout": 300},
        **extra,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def rsup_run(spec: Path, state: Path, *injects: str) -> subprocess.CompletedProcess[str]:
    args = [f"--inject={i}" for i in injects]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rsup.supervisor.cli.main",
            "run",
            str(spec),
            "--state-dir",
            str(state),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def epochs_in(results: Path) -> list[int]:
    with results.open() as f:
        return [int(float(row[next(iter(row))])) for row in csv.DictReader(f)]


def events_of(state: Path, name: str) -> list[dict[str, Any]]:
    store = Store(state / "state.db")
    try:
        return store.events(name)
    finally:
        store.close()


def test_sigkill_mid_epoch_resumes_and_completes_every_epoch_once(
    tmp_path: Path, data_yaml: Path
) -> None:
    result = rsup_run(yolo_spec(tmp_path, data_yaml), tmp_path / "state", "kill@epoch=2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    run = tmp_path / "runs" / "yolo"
    assert epochs_in(run / "results.csv") == list(range(1, EPOCHS + 1))
    assert (run / "weights" / "best.pt").exists() and (run / "weights" / "last.pt").exists()
    events = events_of(tmp_path / "state", "yolo")
    started = [e for e in events if e["event"] == "run_started"]
    assert [s["resumed"] for s in started] == [False, True]
    assert started[1]["start_epoch"] == 2
    assert any(e["event"] == "drill_fired" and e["kind"] == "kill" for e in events)


def test_sigstop_hang_is_detected_and_resumed(tmp_path: Path, data_yaml: Path) -> None:
    spec = yolo_spec(tmp_path, data_yaml, hang={"timeout": 4, "startup_timeout": 300})
    result = rsup_run(spec, tmp_path / "state", "hang@epoch=2")
    assert result.returncode == 0, result.stdout[-3000:]
    events = events_of(tmp_path / "state", "yolo")
    hang = next(e for e in events if e["event"] == "hang_detected")
    assert hang["busy"] is False and hang["silent_for"] >= 4
    assert [e["resumed"] for e in events if e["event"] == "run_started"] == [False, True]
    assert epochs_in(tmp_path / "runs" / "yolo" / "results.csv") == list(range(1, EPOCHS + 1))


def test_oom_drill_resumes_with_half_the_batch(tmp_path: Path, data_yaml: Path) -> None:
    result = rsup_run(yolo_spec(tmp_path, data_yaml), tmp_path / "state", "oom@epoch=2")
    assert result.returncode == 0, result.stdout[-3000:]
    events = events_of(tmp_path / "state", "yolo")
    decision = next(e for e in events if e["event"] == "decision" and e["action"] == "restart")
    assert decision["evidence"]["category"] == "oom"
    assert decision["overrides"] == {"batch": 4}
    args = yaml.safe_load((tmp_path / "runs" / "yolo" / "args.yaml").read_text())
    assert args["batch"] == 4


def test_unusable_gpu_verdict_runs_on_cpu(tmp_path: Path, data_yaml: Path) -> None:
    # No GPU here: the probe of device 0 fails for real, so the verdict is cpu.
    spec = yolo_spec(tmp_path, data_yaml, device="0", probe={"timeouts": {"import": 120}})
    result = rsup_run(spec, tmp_path / "state")
    assert result.returncode == 0, result.stdout[-3000:]
    events = events_of(tmp_path / "state", "yolo")
    verdict = next(e for e in events if e["event"] == "probe_verdict")
    assert verdict["verdict"] == "cpu"
    started = next(e for e in events if e["event"] == "run_started")
    assert started["device"] == "cpu"


def test_truncated_last_pt_resumes_from_last_good(
    rsupd: Rsupd, tmp_path: Path, data_yaml: Path
) -> None:
    spec = yolo_spec(tmp_path, data_yaml, restart={"backoff": {"initial": 5, "max": 5}})
    assert rsupd.cli("start", str(spec)).returncode == 0
    assert rsupd.cli("inject", "yolo", "kill", "--at-epoch", "3").returncode == 0
    wait_for(lambda: rsupd.status("yolo")["state"] == "backoff", 300, "the kill drill")
    last = tmp_path / "runs" / "yolo" / "weights" / "last.pt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])  # what a kill during Ultralytics' write leaves
    job = rsupd.wait_state("yolo", "succeeded", "failed", timeout=300)
    assert job["state"] == "succeeded", rsupd.cli("logs", "yolo").stdout[-3000:]
    events = rsupd.events("yolo")
    restored = [e for e in events if e["event"] == "checkpoint_restored"]
    assert restored and "last-good" in restored[0]["source"]
    assert epochs_in(tmp_path / "runs" / "yolo" / "results.csv") == list(range(1, EPOCHS + 1))


def test_ultralytics_preflight_runs_apart_then_the_real_run(
    tmp_path: Path, data_yaml: Path
) -> None:
    spec = yolo_spec(tmp_path, data_yaml, preflight={"train": {"epochs": 1, "fraction": 0.5}})
    result = rsup_run(spec, tmp_path / "state")
    assert result.returncode == 0, result.stdout[-3000:]
    pre = tmp_path / "state" / "jobs" / "yolo" / "preflight" / "runs" / "preflight"
    assert epochs_in(pre / "results.csv") == [1]
    assert epochs_in(tmp_path / "runs" / "yolo" / "results.csv") == list(range(1, EPOCHS + 1))
