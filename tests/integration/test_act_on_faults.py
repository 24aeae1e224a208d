"""Acting on what was read, live: a wedged fault is stopped within its grace, a crash
behind `| tee` (exit 0) is restarted, a hung job's Python stacks land in its events."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import FIXTURES, Rsupd, wait_for, write_spec

FIXTURE = FIXTURES / "act_on_fault.py"
FAST = {"restart": {"backoff": {"initial": 0}}}


def start(rsupd: Rsupd, tmp_path: Path, name: str, command: list[str], **extra: Any) -> None:
    spec = write_spec(tmp_path, name, command, **{**FAST, **extra})
    result = rsupd.cli("start", str(spec))
    assert result.returncode == 0, result.stderr


def event(rsupd: Rsupd, name: str, kind: str, attempt: int | None = None) -> dict[str, Any]:
    def found() -> list[dict[str, Any]]:
        return [e for e in rsupd.events(name)
                if e["event"] == kind and attempt in (None, e["attempt"])]  # fmt: skip

    return dict(wait_for(found, 30, f"{kind} of {name}")[0])


def test_a_lingering_gpu_fault_is_stopped_within_its_grace_and_restarted(
    rsupd: Rsupd, tmp_path: Path
) -> None:
    start(rsupd, tmp_path, "linger", [sys.executable, str(FIXTURE), "linger"],
          hang={"fault_grace": 2, "timeout": 600})  # fmt: skip
    seen = event(rsupd, "linger", "fault_detected", 1)
    stuck = event(rsupd, "linger", "fault_stuck", 1)
    assert seen["category"] == "gpu_memory_fault"
    assert 1.5 <= stuck["ts"] - seen["ts"] <= 10, (seen["ts"], stuck["ts"])
    status = rsupd.wait_state("linger", "succeeded", timeout=30)
    made = event(rsupd, "linger", "decision", 1)
    assert made["action"] == "restart" and made["evidence"]["category"] == "gpu_memory_fault"
    assert status["attempts"] == 2


def test_a_fault_the_job_may_live_through_starts_no_grace(rsupd: Rsupd, tmp_path: Path) -> None:
    # a broken GPU runtime warned of, then a job that goes on on the CPU: not wedged
    start(rsupd, tmp_path, "cpu", [sys.executable, str(FIXTURE), "cpu"],
          hang={"fault_grace": 1, "timeout": 600})  # fmt: skip
    seen = event(rsupd, "cpu", "fault_detected", 1)
    assert seen["category"] == "hip_runtime_init" and seen["survivable"] is True
    status = rsupd.wait_state("cpu", "succeeded", timeout=30)
    assert status["attempts"] == 1
    assert not [e for e in rsupd.events("cpu") if e["event"] == "fault_stuck"]


def test_a_crash_behind_tee_is_a_failure_and_is_restarted(rsupd: Rsupd, tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    shell = f"{sys.executable} {FIXTURE} crash | tee {log}"  # no pipefail: exit 0
    start(rsupd, tmp_path, "teed", ["bash", "-c", shell])
    ended = event(rsupd, "teed", "attempt_ended", 1)
    assert ended["exit"]["exit_code"] == 0 and ended["category"] == "oom"
    made = event(rsupd, "teed", "decision", 1)
    assert made["action"] == "restart"
    assert (
        "exit 0, but the output shows an unrecovered oom at output.log:4"
        in (made["evidence"]["lines"][0])
    )
    status = rsupd.wait_state("teed", "succeeded", timeout=30)
    assert status["attempts"] == 2


def test_a_hung_jobs_stacks_are_in_its_events(rsupd: Rsupd, tmp_path: Path) -> None:
    start(rsupd, tmp_path, "stuck", [sys.executable, str(FIXTURE), "hang"],
          hang={"timeout": 2, "startup_timeout": 2})  # fmt: skip
    hung = event(rsupd, "stuck", "hang_detected", 1)
    frames = [frame for stack in hung.get("stacks", {}).values() for frame in stack]
    assert any("stuck_in_collective" in frame for frame in frames), hung
    assert Path(hung["stacks_file"]).read_text().count("stuck_in_collective") >= 1
    shown = rsupd.cli("events", "stuck").stdout
    assert "stuck_in_collective" in shown
    rsupd.wait_state("stuck", "succeeded", timeout=30)
    assert time.time() - hung["ts"] < 60
