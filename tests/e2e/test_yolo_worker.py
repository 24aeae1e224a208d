"""The Ultralytics worker on the CPU with real training: fresh runs, drills, resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rsup.workers import demodata

pytest.importorskip("ultralytics")

pytestmark = pytest.mark.e2e

RUN_TIMEOUT = 240.0


@pytest.fixture(scope="module")
def data_yaml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demodata.generate(tmp_path_factory.mktemp("data"), train=16, val=8, size=128)


class Worker:
    """One worker process started on a yolo.json, with its log and events."""

    def __init__(self, root: Path, config: Path) -> None:
        self.root = root
        self.events_path = root / "events.jsonl"
        self.log_path = root / f"output-{time.monotonic_ns()}.log"
        env = {**os.environ, "RSUP_EVENTS_FILE": str(self.events_path)}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rsup.workers.yolo", "--config", str(config)],
                cwd=root,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait(self, timeout: float = RUN_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker still running after {timeout}s:\n{self.log()[-3000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(self) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        lines = self.events_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def mine(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["event"] == name and e["pid"] == self.proc.pid]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def _start(config: Path) -> Worker:
        worker = Worker(config.parent, config)
        started.append(worker)
        return worker

    yield _start
    for worker in started:
        worker.kill()


def write_config(root: Path, data: Path, **fields: Any) -> Path:
    train = {
        "model": "yolov8n.yaml",
        "data": str(data),
        "epochs": fields.pop("epochs", 3),
        "imgsz": 128,
        "batch": 4,
        "workers": 0,
        "plots": False,
    }
    config = {
        "train": train,
        "project": str(root / "runs"),
        "name": "train",
        "overrides": fields.pop("overrides", {}),
        "last_good_dir": str(root / "last-good"),
        "drills": fields.pop("drills", []),
        **fields,
    }
    path = root / "yolo.json"
    path.write_text(json.dumps(config))
    return path


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def csv_epochs(run_dir: Path) -> list[int]:
    lines = (run_dir / "results.csv").read_text().splitlines()[1:]
    return [int(float(line.split(",")[0])) for line in lines if line.strip()]


def run_dir(root: Path) -> Path:
    return root / "runs" / "train"


@pytest.fixture(scope="module")
def finished_run(data_yaml: Path, tmp_path_factory: pytest.TempPathFactory) -> Worker:
    root = tmp_path_factory.mktemp("fresh")
    worker = Worker(root, write_config(root, data_yaml, epochs=2))
    try:
        worker.wait()
    finally:
        worker.kill()
    return worker


def test_fresh_run_completes(finished_run: Worker) -> None:
    assert finished_run.proc.returncode == 0, finished_run.log()[-3000:]
    (started,) = finished_run.mine("run_started")
    assert started["resumed"] is False and started["start_epoch"] == 1 and started["epochs"] == 2
    assert started["run_dir"] == str(run_dir(finished_run.root))
    progress = finished_run.mine("progress")
    assert {(p["epoch"], p["batch"], p["batches"]) for p in progress} >= {(1, 4, 4), (2, 4, 4)}
    ends = finished_run.mine("epoch_end")
    assert [e["epoch"] for e in ends] == [1, 2]
    assert {"box_loss", "cls_loss", "dfl_loss"} <= set(ends[0]["losses"])
    for key in ("precision", "recall", "mAP50", "mAP50-95", "fitness", "epoch_seconds"):
        assert key in ends[0]
    assert [c["epoch"] for c in finished_run.mine("checkpoint_saved")] == [1, 2]
    assert [k["epoch"] for k in finished_run.mine("last_good_kept")] == [1, 2]
    (done,) = finished_run.mine("run_completed")
    weights = run_dir(finished_run.root) / "weights"
    assert done["best"] == str(weights / "best.pt") and done["last"] == str(weights / "last.pt")
    assert (weights / "best.pt").is_file() and (weights / "last.pt").is_file()
    assert (finished_run.root / "last-good" / "last-good.pt").is_file()
    assert (finished_run.root / "last-good" / "last-good.prev.pt").is_file()
    assert csv_epochs(run_dir(finished_run.root)) == [1, 2]


def test_finished_run_is_never_resumed(finished_run: Worker, start: Callable[..., Worker]) -> None:
    csv_before = (run_dir(finished_run.root) / "results.csv").read_bytes()
    again = start(finished_run.root / "yolo.json")
    assert again.wait(timeout=120) == 0, again.log()[-3000:]
    assert again.mine("run_started") == [] and again.mine("progress") == []
    (done,) = again.mine("run_completed")
    assert done["already_finished"] is True
    assert (run_dir(finished_run.root) / "results.csv").read_bytes() == csv_before


def kill_at_epoch_2(root: Path, data: Path, start: Callable[..., Worker]) -> Worker:
    first = start(write_config(root, data, drills=[{"kind": "kill", "at_epoch": 2}]))
    assert first.wait() == -signal.SIGKILL, first.log()[-3000:]
    (fired,) = first.mine("drill_fired")
    assert fired["kind"] == "kill" and fired["epoch"] == 2
    assert [c["epoch"] for c in first.mine("checkpoint_saved")] == [1]
    return first


@pytest.mark.slow  # test_yolo_rsup.py's kill and OOM drills resume so under rsupd in `make test`
def test_kill_drill_then_resume_with_new_batch(
    data_yaml: Path, tmp_path: Path, start: Callable[..., Worker]
) -> None:
    kill_at_epoch_2(tmp_path, data_yaml, start)
    results = run_dir(tmp_path) / "results.csv"
    rows = results.read_text().splitlines()
    # As if the kill came between Ultralytics' results row and its save of last.pt.
    results.write_text("\n".join([*rows, "2" + rows[1][rows[1].index(",") :]]) + "\n")
    second = start(write_config(tmp_path, data_yaml, overrides={"batch": 2}))
    assert second.wait() == 0, second.log()[-3000:]
    (started,) = second.mine("run_started")
    assert started["resumed"] is True and started["start_epoch"] == 2
    assert started["overrides"] == {"batch": 2} and started["batch"] == 2
    assert "batch: 2" in (run_dir(tmp_path) / "args.yaml").read_text().splitlines()
    assert second.mine("drill_fired") == []
    assert csv_epochs(run_dir(tmp_path)) == [1, 2, 3]
    assert [e["epoch"] for e in second.mine("epoch_end")] == [2, 3]
    assert second.mine("run_completed")


@pytest.mark.slow  # test_yolo_rsup.py runs the same under rsupd in `make test`
def test_truncated_last_pt_resumes_from_last_good(
    data_yaml: Path, tmp_path: Path, start: Callable[..., Worker]
) -> None:
    kill_at_epoch_2(tmp_path, data_yaml, start)
    last = run_dir(tmp_path) / "weights" / "last.pt"
    with open(last, "r+b") as f:
        f.truncate(last.stat().st_size // 2)
    second = start(tmp_path / "yolo.json")
    assert second.wait() == 0, second.log()[-3000:]
    (restored,) = second.mine("checkpoint_restored")
    assert restored["source"] == str(tmp_path / "last-good" / "last-good.pt")
    (started,) = second.mine("run_started")
    assert started["resumed"] is True and started["start_epoch"] == 2
    assert csv_epochs(run_dir(tmp_path)) == [1, 2, 3]
    assert second.mine("run_completed")


def test_oom_drill_raises_torchs_out_of_memory_error(
    data_yaml: Path, tmp_path: Path, start: Callable[..., Worker]
) -> None:
    # On a GPU it is a real allocation failure; here, without one, torch's own GPU
    # out-of-memory error class stands for it (the CPU allocator's error is host_oom).
    worker = start(write_config(tmp_path, data_yaml, drills=[{"kind": "oom", "at_epoch": 1}]))
    assert worker.wait() == 1
    assert "OutOfMemoryError: CUDA out of memory" in worker.log()
    assert "stands for the GPU allocator's" in worker.log()
    assert [e["kind"] for e in worker.mine("drill_fired")] == ["oom"]
    (failed,) = worker.mine("run_failed")
    assert "out of memory" in failed["message"]


def process_state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def test_live_hang_drill_stops_the_trainer(
    data_yaml: Path, tmp_path: Path, start: Callable[..., Worker]
) -> None:
    drills_file = tmp_path / "drills.json"
    worker = start(write_config(tmp_path, data_yaml, epochs=5, drills_file=str(drills_file)))
    wait_for(lambda: bool(worker.mine("progress")), 120, "the first progress event")
    drills_file.write_text(json.dumps([{"kind": "hang", "at_epoch": None}]))
    wait_for(lambda: bool(worker.mine("drill_fired")), 60, "drill_fired")
    wait_for(lambda: process_state(worker.proc.pid) == "T", 10, "the trainer to stop")
    assert worker.proc.poll() is None
    assert worker.mine("drill_fired")[0]["kind"] == "hang"


def test_bad_config_exits_with_usage_code(tmp_path: Path, start: Callable[..., Worker]) -> None:
    config = tmp_path / "yolo.json"
    config.write_text(json.dumps({"train": {}, "project": "runs", "overrides": {"lr0": 0.1}}))
    worker = start(config)
    assert worker.wait(timeout=60) == 2
    assert "overrides may only set" in worker.log()


SPAWN_CHECK = """
import multiprocessing, os, sys
from rsup.workers import yolo

def main():
    multiprocessing.set_start_method("spawn", force=True)
    assert yolo.patch_dataloaders()
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_dataloader, build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset

    data = check_det_dataset(sys.argv[1])
    dataset = build_yolo_dataset(get_cfg(overrides={"imgsz": 96}), data["train"], 4, data)
    loader = build_dataloader(dataset, batch=4, workers=2, shuffle=True, device="cpu")
    print("@", loader.multiprocessing_context.get_start_method(), loader.persistent_workers)
    for _ in range(2):
        images = sum(batch["img"].shape[0] for batch in loader)
        print("@", images, sorted(w.pid for w in loader.iterator._workers))
    solo = build_dataloader(dataset, batch=4, workers=0, shuffle=False, device="cpu")
    print("@", solo.multiprocessing_context, solo.persistent_workers, flush=True)
    # Leave without the loader's shutdown: torch's worker teardown can abort a spawn worker
    # now and then ("terminate called without an active exception"), which is not what
    # this test is about; the workers die with us.
    os._exit(0)

if __name__ == "__main__":
    main()
"""


def test_dataloaders_get_spawn_workers_that_persist(data_yaml: Path, tmp_path: Path) -> None:
    script = tmp_path / "spawn_check.py"
    script.write_text(SPAWN_CHECK)
    env = {**os.environ, "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(tmp_path / "cfg")}
    out = subprocess.run(
        [sys.executable, str(script), str(data_yaml)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line[2:] for line in out.stdout.splitlines() if line.startswith("@ ")]
    assert lines[0] == "spawn True"
    (first_images, first_pids), (second_images, second_pids) = (
        line.split(" ", 1) for line in lines[1:3]
    )
    assert first_images == second_images == "16"
    assert first_pids == second_pids  # the same worker processes serve every epoch
    assert lines[3] == "None False"
