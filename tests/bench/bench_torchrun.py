"""Rank death -> group running again: rsup vs torchrun's own --max-restarts, side by side.

    .venv/bin/python tests/bench/bench_torchrun.py [--n 3]

Both sides run the same 2-rank gloo DDP script (tests/fixtures/ddp_train.py) with the
same torchrun options (launch.job_argv), wait until rank 1 is a few steps past a
checkpoint, SIGKILL rank 1, and time from the kill until
- `group_formed`: every rank of the new group has met its peers and loaded the
  checkpoint (its "started" heartbeat, from a new pid);
- `first_step`: the new group trained a step (rank 0's first progress from a new pid).

- rsup: torchrun `max_restarts: 0` under a real rsupd, zero backoff: the agent exits,
  rsupd ends the attempt and starts a new agent whose ranks resume from the checkpoint.
- rsup_with_torchrun_max_restarts: the same under rsupd with `max_restarts: 1`: the
  agent restarts its ranks in place and rsup has nothing to do (`rsup_restarts` 0).
- torchrun_max_restarts: `--max-restarts=1`, no rsup: the agent stays and restarts its
  workers in place (the script resumes from the checkpoint file itself); torch's defaults.
- torchrun_max_restarts_unshared_store: the same with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1,
  which rsup sets for torchrun jobs: with the agent's store shared, restarted ranks can
  read the last round's addresses and fail to connect, or wait for ever (launch.torchrun_env).
  A restart that fails, or has not formed the group in RECOVERY_TIMEOUT, counts in
  `recovered`, not in the latencies.

rsup also reports its phases: kill -> attempt_ended (the agent noticed, stopped rank 0
and exited; rsupd read exit.json), -> attempt_started (policy, zero backoff), -> group.
Prints one JSON document on stdout; progress on stderr. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import FIXTURES, Bench, log, machine, summary, wait_until
from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.effects import launch

SCRIPT = FIXTURES / "ddp_train.py"
STEPS = 2000  # long enough never to finish during a trial
KILL_AT = 12  # steps: past the checkpoint of step 10
NPROC = 2
TIMEOUT = 180.0
RECOVERY_TIMEOUT = 90.0  # torchrun's own restart that has not formed the group by then failed
SHARE_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
TORCHRUN_SIDES = {  # torchrun alone, --max-restarts=1
    "torchrun_max_restarts": {},  # torch's defaults
    "torchrun_max_restarts_unshared_store": {SHARE_STORE: "1"},  # what rsup sets
}
RSUP_SIDES = {  # under rsupd, torchrun's max_restarts
    "rsup": 0,  # rsup restarts the whole agent
    "rsup_with_torchrun_max_restarts": 1,  # torchrun first, rsup only when the agent fails
}
SIDES = (*RSUP_SIDES, *TORCHRUN_SIDES)


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 1)


def command(folder: Path) -> list[str]:
    ckpt = str(folder / "ckpt.pt")
    return [str(SCRIPT), "--steps", str(STEPS), "--save-every", "5", "--step-time", "0.05",
            "--checkpoint", ckpt, "--resume", ckpt]  # fmt: skip


def read_events(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.endswith("}")]


def victim(events: list[dict[str, Any]]) -> int | None:
    """Rank 1's pid once it is KILL_AT steps in."""
    for e in events:
        if e.get("rank") == 1 and e.get("step", -1) >= KILL_AT:
            return int(e["pid"])
    return None


def milestones(events: list[dict[str, Any]], old: set[int]) -> dict[str, float] | None:
    """(group formed, first step) timestamps of the new group, once both happened."""
    new = [e for e in events if e["pid"] not in old]
    started = {e["rank"]: e["ts"] for e in new if e.get("phase") == "started"}
    steps = [e["ts"] for e in new if e.get("event") == "progress" and e.get("rank") == 0]
    if len(started) < NPROC or not steps:
        return None
    return {"group_formed": max(started.values()), "first_step": min(steps)}


def kill_rank(events_path: Path) -> tuple[float, set[int]]:
    pid = wait_until(lambda: victim(read_events(events_path)), TIMEOUT, "rank 1 to train", 0.01)
    old = {int(e["pid"]) for e in read_events(events_path)}
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    return killed, old


# rsup -------------------------------------------------------------------------------------


def rsup_trial(bench: Bench, name: str, max_restarts: int) -> dict[str, float] | None:
    folder = bench.root / name
    folder.mkdir()
    torchrun = {"nproc_per_node": NPROC, "max_restarts": max_restarts}
    bench.submit(name, command(folder), kind="torchrun", torchrun=torchrun,
                 restart={"backoff": {"initial": 0, "max": 0}})  # fmt: skip
    killed, old = kill_rank(bench.attempt_dir(name, 1) / "events.jsonl")

    def formed() -> tuple[int, dict[str, float]] | None:
        for n in range(1, int(bench.status(name)["attempts"]) + 1):
            marks = milestones(read_events(bench.attempt_dir(name, n) / "events.jsonl"), old)
            if marks:
                return n, marks
        return None

    try:
        n, marks = wait_until(formed, TIMEOUT, "the new group", 0.01)
    except AssertionError:  # timed out
        log(f"rsup did not bring {name} back in {TIMEOUT:g} s")
        return None
    finally:
        bench.client.call("stop", name=name, force=True, wait=True)
    row = {
        "group_formed_ms": ms(marks["group_formed"] - killed),
        "first_step_ms": ms(marks["first_step"] - killed),
        "rsup_restarts": n - 1,
    }
    if n == 1:  # torchrun restarted the ranks in place; rsup had nothing to do
        return row
    events = bench.events(name)
    ended = next(e["ts"] for e in events if e["event"] == "attempt_ended")
    started = next(e["ts"] for e in events if e["event"] == "attempt_started" and e["attempt"] == n)
    return {
        **row,
        "kill_to_attempt_ended_ms": ms(ended - killed),
        "attempt_ended_to_attempt_started_ms": ms(started - ended),
        "attempt_started_to_group_formed_ms": ms(marks["group_formed"] - started),
    }


# torchrun alone ---------------------------------------------------------------------------


def torchrun_trial(folder: Path, env: dict[str, str]) -> dict[str, float] | None:
    """Latencies of torchrun's in-place restart; None when its restart failed."""
    folder.mkdir()
    group = {"nproc_per_node": NPROC, "max_restarts": 1}
    spec = JobSpec.model_validate(
        {"name": folder.name, "kind": "torchrun", "command": command(folder), "torchrun": group}
    )
    events_path = folder / "events.jsonl"
    env = {**env, "RSUP_EVENTS_FILE": str(events_path)}
    with (folder / "output.log").open("wb") as out:
        proc = subprocess.Popen(launch.job_argv(spec, folder), cwd=folder, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        killed, old = kill_rank(events_path)
        marks = wait_until(
            lambda: milestones(read_events(events_path), old) or proc.poll() is not None,
            RECOVERY_TIMEOUT, "torchrun's new group", 0.01)  # fmt: skip
    except AssertionError:  # timed out still trying: a rank stuck meeting its peers
        marks = True
    finally:
        kill_tree(proc)
    if marks is True:
        log(f"torchrun's own restart failed (exit {proc.returncode}); see {folder}/output.log")
        return None
    return {
        "group_formed_ms": ms(marks["group_formed"] - killed),
        "first_step_ms": ms(marks["first_step"] - killed),
    }


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """The agent and its ranks: torchrun starts each rank in a process group of its own."""
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()


def column(rows: list[dict[str, float]]) -> dict[str, Any]:
    keys = dict.fromkeys(key for row in rows for key in row)
    return {key: summary([r[key] for r in rows if key in r], 1) for key in keys}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=3, help="trials per side")
    args = parser.parse_args()
    rows: dict[str, list[dict[str, float] | None]] = {side: [] for side in SIDES}
    with Bench("rsup-bench-torchrun-") as bench:
        for i in range(args.n):  # interleaved, so drifting load on the machine hits all
            for side, max_restarts in RSUP_SIDES.items():
                log(f"trial {i + 1}/{args.n}: {side}")
                rows[side].append(rsup_trial(bench, f"{side}-{i}".replace("_", "-"), max_restarts))
            for side, extra in TORCHRUN_SIDES.items():
                log(f"trial {i + 1}/{args.n}: {side}")
                env = {k: v for k, v in os.environ.items() if k != SHARE_STORE}
                rows[side].append(torchrun_trial(bench.root / f"{side}-{i}", {**env, **extra}))
    report: dict[str, Any] = {
        "bench": "torchrun_rank_death",
        "machine": machine(),
        "fault": f"SIGKILL of rank 1 of {NPROC} (gloo, CPU) {KILL_AT} steps in",
    }
    for side, side_rows in rows.items():
        ok = [r for r in side_rows if r is not None]
        report[side] = {"recovered": f"{len(ok)}/{args.n}", **(column(ok) if ok else {})}
    report["rsup_minus_torchrun_p50_ms"] = {
        side: {key: round(report["rsup"][key]["p50"] - report[side][key]["p50"], 1)
               for key in ("group_formed_ms", "first_step_ms") if key in report[side]}
        for side in TORCHRUN_SIDES
    }  # fmt: skip
    report["rows"] = rows
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
