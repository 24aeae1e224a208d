"""Failure recognition live: a real rsupd watching fake jobs that fault, hang and spin."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import FIXTURES, Rsupd, pid_alive, wait_for, write_spec

FAST = {"restart": {"backoff": {"initial": 0.1, "max": 0.5}, "max_attempts": 5}}
HANG = {"timeout": 2, "startup_timeout": 2}
PY = sys.executable


def events(rsupd: Rsupd, name: str, event: str, attempt: int | None = None) -> list[dict[str, Any]]:
    return [e for e in rsupd.events(name)
            if e["event"] == event and (attempt is None or e["attempt"] == attempt)]  # fmt: skip


def wait_event(rsupd: Rsupd, name: str, event: str, attempt: int) -> dict[str, Any]:
    found = wait_for(lambda: events(rsupd, name, event, attempt), 20, f"{event} of {name}")
    return dict(found[0])


def holds(cond: Callable[[], bool], until: float, what: str) -> None:
    """Fail when `cond` is seen false before time.time() reaches `until`. A check that
    ends past `until` (a slow CLI under load) proves nothing either way and ends the wait."""
    while time.time() < until:
        ok = cond()
        left = until - time.time()
        assert ok or left < 0, f"{what} stopped holding {left:.2f} s too early"
        time.sleep(0.05)


def start(rsupd: Rsupd, tmp_path: Path, name: str, command: list[str], **extra: Any) -> None:
    result = rsupd.cli("start", str(write_spec(tmp_path, name, command, **{**FAST, **extra})))
    assert result.returncode == 0, result.stderr


def output_line(rsupd: Rsupd, name: str, attempt: int, line: int) -> str:
    log = rsupd.state / "jobs" / name / "attempts" / str(attempt) / "output.log"
    return log.read_text().splitlines()[line - 1]


def silent_job(
    rsupd: Rsupd, tmp_path: Path, name: str, mode: str, **hang: Any
) -> tuple[float, list[int]]:
    """Start det_silent.py; return when it fell silent (its own clock) and its pids."""
    folder = tmp_path / name
    folder.mkdir()
    start(rsupd, tmp_path, name, [PY, str(FIXTURES / "det_silent.py"), mode, str(folder)],
          hang={**HANG, **hang})  # fmt: skip
    stamp = wait_for(lambda: (folder / "last_output").exists() and folder / "last_output", 20,
                     "the job to fall silent")  # fmt: skip
    pids = [int(p) for p in (folder / "pids").read_text().split()]
    return float(stamp.read_text()), pids


def decision(rsupd: Rsupd, name: str, attempt: int) -> dict[str, Any]:
    return wait_event(rsupd, name, "decision", attempt)


# --- faults read from the output -------------------------------------------------------


def test_hsa_fault_then_abort_is_a_gpu_memory_fault(rsupd: Rsupd, tmp_path: Path) -> None:
    start(rsupd, tmp_path, "hsa", [PY, str(FIXTURES / "det_gpu_fault.py")])
    job = rsupd.wait_state("hsa", "succeeded")
    assert job["attempts"] == 2 and job["last_fault"] == "gpu_memory_fault"
    faults = events(rsupd, "hsa", "fault_detected", 1)
    assert faults[0]["category"] == "gpu_memory_fault"
    assert faults[0]["signature"] == "hsa-memory-aperture-violation"
    assert "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION" in faults[0]["text"]
    assert "HSA_STATUS_ERROR" in output_line(rsupd, "hsa", 1, faults[0]["line"])
    assert not [f for f in faults if f["category"] not in ("gpu_memory_fault", "segfault_abort")]
    made = decision(rsupd, "hsa", 1)
    assert made["action"] == "restart"
    evidence = made["evidence"]
    assert evidence["category"] == "gpu_memory_fault"  # the cause, not the abort it caused
    assert evidence["signature"] == "hsa-memory-aperture-violation"
    assert evidence["line"] == faults[0]["line"] and evidence["signal"] == 6
    assert any("HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION" in line for line in evidence["lines"])
    ended = events(rsupd, "hsa", "attempt_ended", 1)[0]
    assert ended["category"] == "gpu_memory_fault"


def test_oom_traceback_restarts_then_falls_back_to_cpu(rsupd: Rsupd, tmp_path: Path) -> None:
    """A command job has no batch to halve: one plain restart, then the CPU (policy._oom)."""
    start(rsupd, tmp_path, "oomy", [PY, str(FIXTURES / "det_oom.py")], device="0",
          probe={"enabled": False})  # fmt: skip
    job = rsupd.wait_state("oomy", "succeeded")
    assert job["attempts"] == 3 and job["last_fault"] == "oom" and job["device"] == "cpu"
    fault = events(rsupd, "oomy", "fault_detected", 1)[0]
    assert fault["category"] == "oom" and "Tried to allocate 1.53 GiB" in fault["text"]
    first, second = decision(rsupd, "oomy", 1), decision(rsupd, "oomy", 2)
    assert (first["action"], first["overrides"]) == ("restart", {})
    assert "cannot halve this job's batch" in first["reason"]
    assert first["evidence"]["category"] == "oom" and first["evidence"]["exit_code"] == 1
    assert (second["action"], second["overrides"]) == ("restart", {"device": "cpu"})
    assert "falling back to the CPU" in second["reason"]
    third = wait_event(rsupd, "oomy", "attempt_started", 3)
    assert third["device"] == "cpu" and third["overrides"] == {"device": "cpu"}
    assert "finished on the cpu" in rsupd.cli("logs", "oomy", "--attempt", "3").stdout


def test_config_error_fails_after_exactly_one_attempt(rsupd: Rsupd, tmp_path: Path) -> None:
    start(rsupd, tmp_path, "typo", [PY, "-c", "print('loading')\nimport ultralytics_missing"])
    job = rsupd.wait_state("typo", "failed")
    assert job["attempts"] == 1 and job["last_fault"] == "config_error"
    assert "No module named 'ultralytics_missing'" in job["reason"]
    assert "configuration error, not retried" in job["reason"]
    made = decision(rsupd, "typo", 1)
    assert made["action"] == "fail" and made["evidence"]["signature"] == "module-not-found"
    assert "ModuleNotFoundError" in output_line(rsupd, "typo", 1, made["evidence"]["line"])
    assert len(events(rsupd, "typo", "attempt_started")) == 1


# --- silence ---------------------------------------------------------------------------


def test_silent_idle_job_is_killed_within_timeout_plus_1_s(rsupd: Rsupd, tmp_path: Path) -> None:
    silent_since, pids = silent_job(rsupd, tmp_path, "idle", "idle")
    hang = wait_event(rsupd, "idle", "hang_detected", 1)
    assert 2.0 <= hang["ts"] - silent_since <= 3.0
    assert hang["busy"] is False and hang["limit"] == 2 and hang["cpu_cores"] < 0.05
    assert 2.0 <= hang["silent_for"] <= 3.0 and "while idle" in hang["message"]
    wait_for(lambda: not any(pid_alive(p) for p in pids), 10, "the hung tree to be killed")
    wait_event(rsupd, "idle", "attempt_started", 2)
    made = decision(rsupd, "idle", 1)
    assert made["action"] == "restart" and made["evidence"]["category"] == "hang"
    assert "no progress for" in made["evidence"]["lines"][0]
    assert rsupd.wait_state("idle", "succeeded")["last_fault"] == "hang"


def test_silent_busy_job_is_not_killed_before_the_hard_limit(rsupd: Rsupd, tmp_path: Path) -> None:
    silent_since, pids = silent_job(rsupd, tmp_path, "spin", "busy", hard_limit_factor=3)
    holds(lambda: pid_alive(pids[0]) and not events(rsupd, "spin", "hang_detected"),
          silent_since + 5.5, "a busy job left alone")  # fmt: skip
    hang = wait_event(rsupd, "spin", "hang_detected", 1)
    assert 6.0 <= hang["ts"] - silent_since <= 8.0
    assert hang["busy"] is True and hang["limit"] == 6 and hang["cpu_cores"] >= 0.05
    assert hang["silent_for"] >= 6.0 and "while busy" in hang["message"]
    wait_for(lambda: not any(pid_alive(p) for p in pids), 10, "the spinning tree to be killed")
    assert decision(rsupd, "spin", 1)["evidence"]["category"] == "hang"
    rsupd.wait_state("spin", "succeeded")


def test_progress_then_hang_restarts(rsupd: Rsupd, tmp_path: Path) -> None:
    silent_since, pids = silent_job(rsupd, tmp_path, "stuck", "progress")
    hang = wait_event(rsupd, "stuck", "hang_detected", 1)
    assert 2.0 <= hang["ts"] - silent_since <= 3.0 and hang["busy"] is False
    assert rsupd.status("stuck")["progress"]["epochs"] == 10  # the heartbeats were read
    made = decision(rsupd, "stuck", 1)
    assert made["action"] == "restart" and made["evidence"]["category"] == "hang"
    assert "restarting from the last checkpoint" in made["reason"]
    assert rsupd.wait_state("stuck", "succeeded")["attempts"] == 2
    wait_for(lambda: not any(pid_alive(p) for p in pids), 10, "the hung tree to be killed")


# --- events carry their evidence ----------------------------------------------------------


def test_detections_and_decisions_are_events_with_evidence(rsupd: Rsupd, tmp_path: Path) -> None:
    """Hang evidence (silent_for, limit, cpu_cores, busy) is checked by the hang tests."""
    start(rsupd, tmp_path, "told", [PY, str(FIXTURES / "det_gpu_fault.py")])
    rsupd.wait_state("told", "succeeded")
    fault = events(rsupd, "told", "fault_detected", 1)[0]
    assert {"ts", "job", "attempt", "category", "signature", "line", "text"} <= set(fault)
    made = events(rsupd, "told", "decision", 1)[0]
    assert {"action", "reason", "delay", "overrides", "evidence"} <= set(made)
    assert {"category", "signature", "lines", "line", "exit_code", "signal", "ran_for",
            "advanced", "repeats"} <= set(made["evidence"])  # fmt: skip
    assert made["evidence"]["lines"], "a decision names the lines that led to it"
    people = rsupd.cli("events", "told").stdout
    assert "fault_detected" in people and "hsa-memory-aperture-violation" in people
    assert "decision" in people and "action=restart" in people
    backoff = [e for e in events(rsupd, "told", "state_changed") if e["new"] == "backoff"]
    assert "attempt 1 died of gpu_memory_fault" in backoff[0]["reason"]
    assert "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION" in backoff[0]["reason"]


def test_latest_progress_reaches_status_after_a_burst(rsupd: Rsupd, tmp_path: Path) -> None:
    script = ("from rsup.workers import heartbeat\n"
              "for epoch in range(3): heartbeat.progress(epoch=epoch, epochs=3)\n")  # fmt: skip
    start(rsupd, tmp_path, "burst", [PY, "-c", script])
    assert rsupd.wait_state("burst", "succeeded")["progress"]["epoch"] == 2
