"""torchrun jobs under rsup on the CPU (gloo, 2 ranks): a rank dies or hangs, the group
comes back from its checkpoint; a stop leaves no rank behind (issue 7).

Each torchrun start costs seconds here (three interpreters import torch), so the hang
test goes on to the stop once the resumed group trains, instead of a third job."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from rsup.supervisor.core.hang import HangConfig
from rsup.supervisor.recognize import ranks

from tests.conftest import FIXTURES, Rsupd, kill_leftovers, pid_alive, wait_for

pytest.importorskip("torch")
pytestmark = pytest.mark.e2e
STEPS = 30
SAVE_EVERY = 5
FAULT_AT = 12  # past the checkpoint of step 10


def ddp_spec(folder: Path, name: str = "ddp", **extra: Any) -> Path:
    ckpt = folder / "ckpt.pt"
    spec = {
        "name": name,
        "kind": "torchrun",
        "command": [
            str(FIXTURES / "ddp_train.py"),
            *("--steps", str(STEPS), "--save-every", str(SAVE_EVERY), "--step-time", "0.1"),
            *("--checkpoint", str(ckpt), "--done", str(folder / "done.txt")),
            *("--resume", "{checkpoint}"),
        ],
        "checkpoint": str(ckpt),
        "device": "cpu",
        "probe": {"enabled": False},
        "torchrun": {"nproc_per_node": 2},
        "restart": {"backoff": {"initial": 0.2, "max": 1}},
        "hang": {"timeout": 4, "startup_timeout": 120},
        "stop": {"grace": 5},
        **extra,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def rsup_run(spec: Path, state: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "rsup.supervisor.cli.main", "run", str(spec), "--state-dir"]
    return subprocess.Popen(
        [*argv, str(state)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def attempt_dir(state: Path, n: int, name: str = "ddp") -> Path:
    return state / "jobs" / name / "attempts" / str(n)


def rank_events(adir: Path) -> list[dict[str, Any]]:
    try:
        lines = (adir / "events.jsonl").read_text().splitlines()
    except OSError:
        return []
    return [r for r in (json.loads(line) for line in lines if line.endswith("}")) if "rank" in r]


def rank_pid(adir: Path, rank: int, step: int) -> int | None:
    """The pid of `rank` once it has sent a heartbeat for `step` or later."""
    for record in rank_events(adir):
        if record["rank"] == rank and record.get("step", -1) >= step:
            return int(record["pid"])
    return None


def stored_events(state: Path, name: str = "ddp") -> list[dict[str, Any]]:
    db = sqlite3.connect(state / "state.db")
    rows = db.execute("SELECT attempt, event, fields FROM events WHERE job=? ORDER BY id", (name,))
    return [{"attempt": a, "event": e, **json.loads(f)} for a, e, f in rows]


def end(proc: subprocess.Popen[str], state: Path) -> None:
    """After a failed test: `rsup run` stops its job on SIGTERM; then sweep what is left."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    kill_leftovers(state)


def finish(proc: subprocess.Popen[str]) -> str:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-4000:]
    return out


def resumed_from(state: Path, n: int) -> int | None:
    """The step attempt n started at, from what rank 0 printed; None before it says."""
    try:
        lines = (attempt_dir(state, n) / "output.log").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("[rank0]:rank 0 pid") and "starting at step" in line:
            return int(line.rsplit(" ", 1)[1])
    return None


def test_sigkill_of_one_rank_resumes_the_group_from_its_checkpoint(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = rsup_run(ddp_spec(tmp_path), state)
    try:
        first = attempt_dir(state, 1)
        victim = wait_for(lambda: rank_pid(first, 1, FAULT_AT), 90, "rank 1 at step 12")
        os.kill(victim, signal.SIGKILL)
        finish(proc)
    finally:
        end(proc, state)
    steps, trained = map(int, (tmp_path / "done.txt").read_text().split())
    start = resumed_from(state, 2)
    assert start is not None and start >= 10
    assert steps == STEPS and trained == STEPS - start
    events = stored_events(state)
    decision = next(e for e in events if e["event"] == "decision" and e["attempt"] == 1)
    assert decision["action"] == "restart"
    assert (
        decision["evidence"]["lines"][0] == f"rank 1 failed first: killed by SIGKILL, pid {victim}"
    )
    failed = next(e for e in events if e["event"] == "rank_failed")
    assert failed["rank"] == 1 and failed["source"] == "torchrun" and failed["pid"] == victim
    # Who failed first, from what the attempt left: output.log and torchrun's files.
    tracker = ranks.RankTracker()
    tracker.feed_output((first / "output.log").read_bytes())
    tracker.read_error_files(first / ranks.LOG_DIR)
    failure = tracker.first_failure()
    assert failure is not None and failure.rank == 1 and failure.pid == victim
    assert failure.source == "torchrun" and "SIGKILL" in failure.describe()


def test_sigstop_is_a_hang_the_group_resumes_and_stop_leaves_no_rank(
    rsupd: Rsupd, tmp_path: Path
) -> None:
    assert rsupd.cli("start", str(ddp_spec(tmp_path))).returncode == 0
    state = rsupd.state
    first, second = attempt_dir(state, 1), attempt_dir(state, 2)
    stopped = wait_for(lambda: rank_pid(first, 1, FAULT_AT), 90, "rank 1 at step 12")
    os.kill(stopped, signal.SIGSTOP)
    # The per-rank view names the stopped rank, though its peer is silent and idle too.
    tracker = ranks.RankTracker(HangConfig(timeout=1.0))
    for record in rank_events(first):
        tracker.feed_event(record, record["ts"])
    hung = wait_for(
        lambda: tracker.check_hang(time.time(), ranks.sample_process), 10, "a silent rank"
    )
    assert hung.rank == 1 and hung.state == "T" and not hung.verdict.busy
    hang = wait_for(
        lambda: [e for e in rsupd.events("ddp") if e["event"] == "hang_detected"], 30, "the hang"
    )[0]
    assert hang["attempt"] == 1 and hang["busy"] is False  # gloo waits without spinning
    assert hang["rank"] == 1 and hang["rank_pid"] == stopped and "stopped" in hang["rank_message"]
    start = wait_for(lambda: rank_pid(second, 0, 1) and resumed_from(state, 2), 90, "attempt 2")
    assert start >= 10
    wait_for(lambda: rank_pid(second, 1, start + 2), 30, "attempt 2 to train")
    pids = {int(r["pid"]) for adir in (first, second) for r in rank_events(adir)}
    pids |= {int(json.loads((a / "shim.json").read_text())["job_pid"]) for a in (first, second)}
    stop = rsupd.cli("stop", "ddp")
    assert stop.returncode == 0, stop.stderr
    assert rsupd.status("ddp")["state"] == "stopped"
    wait_for(lambda: not any(pid_alive(p) for p in pids), 10, "every rank and agent to end")


def test_kill_drill_hits_a_rank_not_the_agent(rsupd: Rsupd, tmp_path: Path) -> None:
    spec = ddp_spec(tmp_path)
    assert rsupd.cli("start", str(spec)).returncode == 0
    state = rsupd.state
    first = attempt_dir(state, 1)
    wait_for(lambda: rank_pid(first, 1, 3), 120, "rank 1 at step 3")
    assert rsupd.cli("inject", "ddp", "kill").returncode == 0
    job = rsupd.wait_state("ddp", "succeeded", "failed", timeout=180)
    assert job["state"] == "succeeded" and job["attempts"] == 2
    events = rsupd.events("ddp")
    fired = next(e for e in events if e["event"] == "drill_fired")
    assert fired["kind"] == "kill" and fired["attempt"] == 1 and fired["rank"] == 1
    failed = next(e for e in events if e["event"] == "rank_failed")
    assert failed["rank"] == 1 and failed["pid"] == fired["pid"]
