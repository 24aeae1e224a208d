"""rsupd SIGKILLed at every write of an attempt's end and of a state move, then restarted:
the decision is applied exactly once and its plan is kept (nothing restarted twice or lost).

RSUP_CRASH_AT=<label>:<k> makes rsupd kill itself before the k-th write of a transaction
with that label, or right after it commits (`commit`); see effects/store.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rsup.supervisor.effects.store import CRASH_ENV

from tests.conftest import FIXTURES, Rsupd, kill_leftovers, wait_for, write_spec

# The attempt's end: attempt row, job row, attempt_ended, decision, state row, state_changed.
END_POINTS = ["attempt_end:1", "attempt_end:2", "attempt_end:3", "attempt_end:4",
              "attempt_end:5", "attempt_end:6", "attempt_end:commit"]  # fmt: skip
MOVE_POINTS = ["move:1", "move:2", "move:commit"]  # the first move: queued -> starting


def crash_then_recover(root: Path, spec: Path, name: str, point: str, env: dict[str, str]) -> Rsupd:
    """Submit under a daemon that dies at `point`; return a fresh daemon on the same state."""
    first = Rsupd(root, {**env, CRASH_ENV: point})
    first.start()
    try:
        assert first.cli("start", str(spec)).returncode == 0
        assert first.proc is not None
        wait_for(lambda: first.proc is not None and first.proc.poll() is not None, 30,
                 f"rsupd to die at {point}")  # fmt: skip
    except BaseException:
        first.shutdown()
        raise
    second = Rsupd(root, env)
    second.start()
    return second


def decisions(daemon: Rsupd, name: str) -> list[dict[str, object]]:
    return [e for e in daemon.events(name) if e["event"] == "decision"]


def run_case(tmp_path: Path, point: str, mode: str, spec_extra: dict[str, object],
             env: dict[str, str]) -> Rsupd:  # fmt: skip
    starts = tmp_path / "starts.txt"
    command = [sys.executable, str(FIXTURES / "crash_oom.py"), mode, str(starts), "{batch}"]
    spec = write_spec(tmp_path, "crashy", command, restart={"backoff": {"initial": 0}},
                      **spec_extra)  # fmt: skip
    return crash_then_recover(tmp_path, spec, "crashy", point, env)


def applied_once(
    daemon: Rsupd, tmp_path: Path, starts: list[str], plan: dict[str, object]
) -> dict[str, object]:
    """The job succeeded on its second attempt, started exactly as `starts` say, after
    one restart decision that changed the plan as `plan` says; its status."""
    try:
        status = daemon.wait_state("crashy", "succeeded", "failed", timeout=60)
        assert status["state"] == "succeeded", daemon.events("crashy")
        seen = (tmp_path / "starts.txt").read_text().splitlines()
        assert seen == starts, seen
        made = decisions(daemon, "crashy")
        assert [(d["attempt"], d["action"], d["overrides"]) for d in made] == [
            (1, "restart", plan),
            (2, "succeed", {}),
        ], made
        assert status["attempts"] == 2
        return status
    finally:
        daemon.shutdown()
        kill_leftovers(tmp_path / "state")


def some_slow(points: list[str], quick: set[str]) -> list[object]:
    """`points` as parameters, those outside `quick` marked slow: `make test` crashes at a
    few writes (the first and the last of an attempt's end, a move's and an end's commit);
    `make slow` (CI, after it) at every write."""
    assert quick <= set(points), quick - set(points)
    return [p if p in quick else pytest.param(p, marks=pytest.mark.slow) for p in points]


@pytest.mark.parametrize(
    "point",
    some_slow(END_POINTS + MOVE_POINTS, {"attempt_end:1", "attempt_end:6", "move:commit"}),
)  # fmt: skip
def test_halved_batch_is_applied_exactly_once(tmp_path: Path, point: str) -> None:
    daemon = run_case(tmp_path, point, "batch", {"batch": 16}, {})
    # one OOM at 16, then 8 (never 4: the halving is not applied twice)
    starts = ["batch=16 argv=16 device=cpu", "batch=8 argv=8 device=cpu"]
    applied_once(daemon, tmp_path, starts, {"batch": 8})


@pytest.mark.parametrize("point", some_slow(END_POINTS, {"attempt_end:commit"}))
def test_fallback_to_the_cpu_is_applied_exactly_once(tmp_path: Path, point: str) -> None:
    # RSUP_FAKE_GPUS: a test double for one GPU that is not here (index 0)
    env = {"RSUP_FAKE_GPUS": "0"}
    daemon = run_case(tmp_path, point, "device", {"batch": 1, "probe": {"enabled": False}}, env)
    starts = ["batch=1 argv=1 device=0", "batch=1 argv=1 device=cpu"]
    status = applied_once(daemon, tmp_path, starts, {"device": "cpu"})
    assert status["device"] == "cpu"
