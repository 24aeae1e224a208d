"""Soak: rsupd supervising flapping jobs for a long time; does it leak?

    .venv/bin/python tests/soak/soak.py [--minutes 30] [--jobs 20]

Each job sleeps 0.5-2 s (random per attempt) and exits with status 1; restart.max_attempts
is huge and the restart backoff is 0-1 s (job i starts at i/(jobs-1) s, doubling, capped at
1 s), so rsupd starts and ends an attempt every few tenths of a second for the whole run.

rsupd's open fds and threads follow how many attempts are running at that instant, so the
start and end figures are taken with every job stopped (rsupd idle, nothing running): once
after a warm-up (every job has ended two attempts, then all are stopped and started again)
and once after the soak, each the median of a few samples a second apart. The figures while
the jobs flap are reported too (at start, every minute to stderr, at the end). Goals: RSS
growth < 5 MB, open fds constant (within 2), every job still restarting in the last minute
(none wedged), and no process left from rsupd's state dir after the final stop.

Prints one JSON document on stdout; exits 1 when a goal is not met.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from benchlib import Bench, log, machine, wait_until
from rsup.supervisor.cli.client import ClientError

from tests.conftest import state_processes

RSS_GROWTH_GOAL_MB = 5.0
FDS_TOLERANCE = 2
SETTLE_SAMPLES = 5  # samples a second apart, of which the median is the figure

FLAP_JOB = """\
import random, sys, time
time.sleep(random.uniform(float(sys.argv[1]), float(sys.argv[2])))
sys.exit(1)
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="soak length (default 30)")
    parser.add_argument("--jobs", type=int, default=20, help="flapping jobs (default 20)")
    parser.add_argument("--run-min", type=float, default=0.5, help="shortest attempt, s")
    parser.add_argument("--run-max", type=float, default=2.0, help="longest attempt, s")
    parser.add_argument("--backoff-max", type=float, default=1.0, help="longest backoff, s")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--trace-memory", type=int, default=0, metavar="FRAMES",
                        help="run rsupd under tracemalloc (PYTHONTRACEMALLOC=FRAMES) so the "
                        "memory report names allocation sites")  # fmt: skip
    return parser.parse_args()


# what is measured ------------------------------------------------------------------------


def sample(bench: Bench) -> dict[str, Any]:
    """rsupd's footprint now, and how far the jobs have got."""
    proc = bench.process()
    with proc.oneshot():
        rss, fds, threads = proc.memory_info().rss, proc.num_fds(), proc.num_threads()
        children = len(proc.children())
    rows = bench.client.call("status")
    return {
        "t_s": round(time.monotonic(), 1),
        "rss_mb": round(rss / 2**20, 2),
        "fds": fds,
        "threads": threads,
        "shims": children,
        "attempts": {row["name"]: int(row["attempts"]) for row in rows},
        "states": _count([row["state"] for row in rows]),
        "state_db_mb": round(_db_bytes(bench) / 2**20, 2),
    }


def settled(bench: Bench) -> dict[str, Any]:
    """The median of a few samples a second apart (RSS moves with each attempt)."""
    rows = []
    for i in range(SETTLE_SAMPLES):
        if i:
            time.sleep(1.0)
        rows.append(sample(bench))
    out = dict(rows[-1])
    for key in ("rss_mb", "fds", "threads", "shims"):
        out[key] = statistics.median(r[key] for r in rows)
    return out


def _count(values: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        out[value] = out.get(value, 0) + 1
    return out


def _db_bytes(bench: Bench) -> int:
    return sum(p.stat().st_size for p in bench.daemon.state.glob("state.db*") if p.is_file())


def survivors(bench: Bench) -> list[dict[str, Any]]:
    """rsupd's children (zombies too), and any process naming its state dir, rsupd aside."""
    state = bench.daemon.state
    found = [_describe(child) for child in bench.process().children(recursive=True)]
    seen = {row["pid"] for row in found} | {bench.pid}
    found += [_describe(p) for p in state_processes(state) if p.pid not in seen]
    return found


def _describe(proc: psutil.Process) -> dict[str, Any]:
    try:
        return {"pid": proc.pid, "status": proc.status(), "cmdline": " ".join(proc.cmdline())[:200]}
    except psutil.Error as err:
        return {"pid": proc.pid, "status": type(err).__name__, "cmdline": ""}


# the run ------------------------------------------------------------------------------------


def submit_jobs(bench: Bench, args: argparse.Namespace) -> list[str]:
    script = bench.script("flap_job.py", FLAP_JOB)
    names = []
    for i in range(args.jobs):
        name = f"flap-{i:02d}"
        initial = round(args.backoff_max * i / max(1, args.jobs - 1), 3)
        restart = {
            "max_attempts": 10**9,
            "backoff": {"initial": initial, "factor": 2, "max": args.backoff_max},
        }
        argv = [sys.executable, str(script), str(args.run_min), str(args.run_max)]
        bench.submit(name, argv, restart=restart, stop={"grace": 2})
        names.append(name)
    return names


def warm_up(bench: Bench, names: list[str]) -> None:
    def every_job_ended_twice() -> bool:
        attempts = sample(bench)["attempts"]
        return all(attempts.get(name, 0) >= 3 for name in names)

    wait_until(every_job_ended_twice, 120, "every job to end two attempts", 0.5)


def progress_line(start: dict[str, Any], now: dict[str, Any], minute: float) -> str:
    done = sum(now["attempts"].values()) - sum(start["attempts"].values())
    return (
        f"t+{minute:5.1f} min  rss {now['rss_mb']:7.2f} MB ({now['rss_mb'] - start['rss_mb']:+.2f})"
        f"  fds {now['fds']} ({now['fds'] - start['fds']:+d})  threads {now['threads']}"
        f"  shims {now['shims']}  attempts +{done}  states {now['states']}"
        f"  db {now['state_db_mb']} MB"
    )


def stop_and_settle(bench: Bench) -> dict[str, Any]:
    """Stop every job, wait for the shims to go, and take rsupd's idle figures."""
    error = None
    try:
        bench.stop_all()
    except ClientError as err:  # e.g. a wedged job: reported, and the figures still taken
        error = str(err)
        log(f"stop --all failed: {error}")
    with contextlib.suppress(RuntimeError):  # what is left shows in `shims` and survivors()
        wait_until(lambda: not bench.process().children(), 30, "rsupd's shims to go", 0.1)
    return {**settled(bench), "stop_error": error}


def soak(bench: Bench, names: list[str], args: argparse.Namespace) -> dict[str, Any]:
    idle_start = stop_and_settle(bench)
    for name in names:
        bench.client.call("start", name=name)
    time.sleep(5.0)
    start = settled(bench)
    log(progress_line(start, start, 0.0))
    samples = [_brief(start)]
    t0 = time.monotonic()
    end_at = t0 + args.minutes * 60
    previous = start
    stalled: list[str] = []
    while time.monotonic() < end_at:
        time.sleep(max(0.0, min(args.every, end_at - time.monotonic())))
        now = sample(bench)
        samples.append(_brief(now))
        log(progress_line(start, now, (time.monotonic() - t0) / 60))
        stalled = [n for n in names if now["attempts"][n] <= previous["attempts"][n]]
        if stalled:
            log(f"no new attempt since the last sample: {', '.join(stalled)}")
        previous = now
    end = settled(bench)
    log("stopping every job")
    idle_end = stop_and_settle(bench)
    return {
        "idle_start": idle_start,
        "idle_end": idle_end,
        "start": start,
        "end": end,
        "samples": samples,
        "stalled": stalled,
    }


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if k != "attempts"}
    out["attempts_total"] = sum(row["attempts"].values())
    return out


def report(run: dict[str, Any], args: argparse.Namespace, leftovers: list[Any]) -> dict[str, Any]:
    start, end = run["start"], run["end"]
    idle_start, idle_end = run["idle_start"], run["idle_end"]
    rss_growth = round(idle_end["rss_mb"] - idle_start["rss_mb"], 2)
    fds_change = int(idle_end["fds"] - idle_start["fds"])
    attempts = sum(end["attempts"].values()) - sum(start["attempts"].values())
    goals = {
        "rss_growth_mb": {
            "value": rss_growth,
            "goal": f"< {RSS_GROWTH_GOAL_MB:g}",
            "met": rss_growth < RSS_GROWTH_GOAL_MB,
        },
        "open_fds_change": {
            "value": fds_change,
            "goal": f"constant (within {FDS_TOLERANCE})",
            "met": abs(fds_change) <= FDS_TOLERANCE,
        },
        "jobs_still_restarting": {
            "value": args.jobs - len(run["stalled"]),
            "goal": f"all {args.jobs} (none wedged)",
            "met": not run["stalled"],
            "wedged": run["stalled"],
        },
        "stop_all_answered": {
            "value": idle_end["stop_error"] or "ok",
            "goal": "ok",
            "met": idle_end["stop_error"] is None,
        },
        "processes_left_after_stop": {
            "value": len(leftovers),
            "goal": "0",
            "met": not leftovers,
            "processes": leftovers,
        },
    }
    return {
        "soak": "flapping_jobs",
        "machine": machine(),
        "jobs": args.jobs,
        "minutes": args.minutes,
        "job": {
            "runs_s": [args.run_min, args.run_max],
            "exit_status": 1,
            "backoff_s": [0, args.backoff_max],
        },
        "start": _figures(idle_start),
        "end": _figures(idle_end),
        "threads_change": int(idle_end["threads"] - idle_start["threads"]),
        "while_flapping": {"start": _figures(start), "end": _figures(end)},
        "rss_max_mb": max(s["rss_mb"] for s in run["samples"]),
        "attempts_during_soak": attempts,
        "attempts_per_minute": round(attempts / max(args.minutes, 1e-9), 1),
        "attempts_per_job_at_end": {
            "min": min(end["attempts"].values()),
            "max": max(end["attempts"].values()),
        },
        "samples": run["samples"],
        "goals": goals,
        "met": all(goal["met"] for goal in goals.values()),
    }


def _figures(row: dict[str, Any]) -> dict[str, Any]:
    """One moment's figures; start/end are rsupd idle (every job stopped)."""
    keys = ("rss_mb", "fds", "threads", "shims", "states", "state_db_mb")
    return {**{k: row[k] for k in keys}, "attempts_total": sum(row["attempts"].values())}


def memory_report(bench: Bench) -> list[str]:
    """rsupd's own account of what grew since it was ready (SIGUSR2, see memreport)."""
    path = bench.daemon.state / "memory-report.txt"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    bench.process().send_signal(signal.SIGUSR2)
    try:
        wait_until(path.exists, 60, "rsupd's memory report", 0.1)
    except RuntimeError as err:
        return [str(err)]
    return path.read_text().splitlines()


def main() -> int:
    args = parse_args()
    started = time.monotonic()
    bench = Bench("rsup-soak-")
    if args.trace_memory:
        bench.daemon.env = {"PYTHONTRACEMALLOC": str(args.trace_memory)}
    with bench:
        log(f"{args.jobs} flapping jobs for {args.minutes:g} min")
        names = submit_jobs(bench, args)
        warm_up(bench, names)
        run = soak(bench, names, args)
        leftovers = survivors(bench)
        out = report(run, args, leftovers)
        out["memory_report"] = memory_report(bench)
    out["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(out, indent=2))
    log("goals " + ("met" if out["met"] else "NOT met"))
    return 0 if out["met"] else 1


if __name__ == "__main__":
    os.environ.pop("RSUP_SOCKET", None)
    sys.exit(main())
