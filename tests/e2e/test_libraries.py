"""Real training libraries on the CPU as `kind: command` jobs: a tiny GPT-2 under the
Hugging Face Trainer, an MLP under Lightning, a plain loop with torch.save.

For each: kill -> resume, hang -> stacks in the events -> resume (job A, whose script has
no rsup code at all: progress, epochs and ETA come from what the library prints), and an
OOM behind `| tee` (exit 0) -> restarted with {batch} halved (job B, whose script calls
heartbeat.step, where the oom drill fires). Each checks the library's own records.
`make libs` runs them (CI runs it after `make test`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, Rsupd, running_rsupd, wait_for, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.libs]
LIBS = FIXTURES / "libs"
SCRIPTS = {"hf": "hf_trainer.py", "lightning": "lightning_fit.py", "plain": "plain_loop.py"}
TARGET = {"hf": "out", "lightning": "ckpt", "plain": "last.pt"}
CHECKPOINT = {"hf": "out/checkpoint-*", "lightning": "ckpt/last.ckpt", "plain": "last.pt"}


@pytest.fixture
def rsupd(tmp_path: Path) -> Iterator[Rsupd]:
    with running_rsupd(tmp_path) as daemon:
        yield daemon


def events(rsupd: Rsupd, name: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in rsupd.events(name) if e["event"] == kind]


def spec(tmp_path: Path, name: str, lib: str, command: list[str], **extra: Any) -> Path:
    work = tmp_path / name
    work.mkdir()
    return write_spec(
        tmp_path, name, command, cwd=str(work), checkpoint=CHECKPOINT[lib], batch=8,
        hang={"timeout": 5, "startup_timeout": 120}, restart={"backoff": {"initial": 0}},
        **extra,
    )  # fmt: skip


def wait_progress(rsupd: Rsupd, name: str) -> dict[str, Any]:
    def seen() -> dict[str, Any] | None:
        progress = rsupd.status(name).get("progress") or {}
        return progress if progress.get("eta_s") is not None else None

    return dict(wait_for(seen, 120, f"{name} to show progress with an ETA"))


@pytest.mark.parametrize("lib", sorted(SCRIPTS))
def test_kill_and_hang_are_recovered_from_what_the_library_prints(
    rsupd: Rsupd, tmp_path: Path, lib: str
) -> None:
    name = f"{lib}-a"
    script = str(LIBS / SCRIPTS[lib])
    command = [sys.executable, script, TARGET[lib], "{batch}"]
    if lib == "hf":  # HF resumes where it is told: the newest whole checkpoint-N
        command += ["--resume", "{checkpoint}"]
    path = spec(tmp_path, name, lib, command)
    assert rsupd.cli("start", str(path)).returncode == 0
    assert rsupd.cli("inject", name, "kill", "--at-epoch", "1").returncode == 0
    assert rsupd.cli("inject", name, "hang", "--at-epoch", "2").returncode == 0
    progress = wait_progress(rsupd, name)
    assert progress.get("source") == "output" and progress.get("total")
    status = rsupd.wait_state(name, "succeeded", "failed", timeout=300)
    assert status["state"] == "succeeded", rsupd.events(name)[-5:]
    fired = events(rsupd, name, "drill_fired")
    assert [(e["kind"], e["attempt"]) for e in fired] == [("kill", 1), ("hang", 2)]
    hung = events(rsupd, name, "hang_detected")
    assert hung and hung[0]["attempt"] == 2 and hung[0].get("stacks"), hung
    assert status["attempts"] == 3
    check_records(tmp_path / name, lib, exact=True)
    # the run's curve, for every kind: progress points from what the library printed
    points = [e for e in events(rsupd, name, "progress") if e.get("source") == "output"]
    assert {e["attempt"] for e in points} >= {1, 3}, points[-3:]
    png = tmp_path / f"{name}.png"
    assert rsupd.cli("report", name, "--png", str(png)).returncode == 0 and png.stat().st_size


@pytest.mark.parametrize("lib", sorted(SCRIPTS))
def test_an_oom_behind_tee_is_restarted_with_the_batch_halved(
    rsupd: Rsupd, tmp_path: Path, lib: str
) -> None:
    name = f"{lib}-b"
    script = LIBS / SCRIPTS[lib]
    resume = ' --resume "$RSUP_CHECKPOINT"' if lib == "hf" else ""
    shell = f"{{python}} {script} {TARGET[lib]} {{batch}}{resume} --drill-hook 2>&1 | tee train.log"
    path = spec(tmp_path, name, lib, ["bash", "-c", shell])
    assert rsupd.cli("start", str(path)).returncode == 0
    assert rsupd.cli("inject", name, "oom", "--at-epoch", "1").returncode == 0
    status = rsupd.wait_state(name, "succeeded", "failed", timeout=300)
    assert status["state"] == "succeeded", rsupd.events(name)[-5:]
    ended = events(rsupd, name, "attempt_ended")
    assert ended[0]["exit"]["exit_code"] == 0 and ended[0]["category"] == "oom"
    decision = events(rsupd, name, "decision")[0]
    assert decision["overrides"] == {"batch": 4}
    assert "exit 0, but the output shows an unrecovered oom" in decision["evidence"]["lines"][0]
    started = events(rsupd, name, "attempt_started")
    batches = [e["argv"][-1].split(TARGET[lib] + " ")[1].split()[0] for e in started]
    assert batches == ["8", "4"]
    check_records(tmp_path / name, lib, exact=False)


def check_records(work: Path, lib: str, exact: bool) -> None:
    """The library's own records: every step or epoch exactly once."""
    import torch

    if lib == "hf":
        state = json.loads((work / "out" / "trainer_state.json").read_text())
        steps = [entry["step"] for entry in state["log_history"] if "loss" in entry]
        assert steps == sorted(set(steps)), steps
        assert state["global_step"] == (32 if exact else state["max_steps"])
    elif lib == "lightning":
        last = torch.load(work / "ckpt" / "last.ckpt", weights_only=False)
        assert last["epoch"] == 5
        if exact:
            assert last["global_step"] == 6 * 32  # 256 samples, batch 8, 6 epochs
    else:
        done = torch.load(work / "last.pt")["epochs_done"]
        assert done == [1, 2, 3, 4, 5, 6]
