"""Core supervisor figures, measured against a real rsupd through its socket (no CLI).

    .venv/bin/python tests/bench/bench_core.py [--idle-seconds 30] [--n 20]

- submit -> running: from the start request until the job's first act (a time.time()
  it writes) and until `status` shows it running with a pid; each job's interpreter
  start is part of it, so `python_startup_ms` gives that alone for comparison.
- exit -> next attempt running, zero backoff: the job writes time.time() and exits 1;
  the next attempt writes its own start time.
- stop -> no descendants: a job with children, a setsid child and a double-forked
  grandchild (tests/fixtures/forky.py); from the stop request until /proc has none of
  their pids, and until the stop request returns. SIGTERM (they obey) and --force.
- rsupd RSS and CPU while it supervises 20 silent jobs, then 20 printing a line a second.

Prints one JSON document on stdout; progress goes to stderr. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import FIXTURES, Bench, log, machine, read_float, summary, wait_until

STOP_GRACE = 10  # seconds; forky's processes obey SIGTERM, so it is never reached
FORKY_CHILDREN = 2  # plus the main process, a child, a setsid child and an orphan

# The first statement after the interpreter starts is the timestamp.
IDLE_JOB = """\
import time
STARTED = time.time()
import os, sys
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(repr(STARTED))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
chatty = sys.argv[2:] == ["chatty"]
n = 0
while True:
    time.sleep(1)
    if chatty:
        n += 1
        print(f"step {n} loss=0.{n % 1000:03d} lr=0.001", flush=True)
"""

CRASH_JOB = """\
import time
STARTED = time.time()
import os, sys

def note(name, value):
    path = os.path.join(sys.argv[1], name)
    with open(path + ".tmp", "w") as f:
        f.write(repr(value))
    os.rename(path + ".tmp", path)

n = os.environ["RSUP_ATTEMPT"]
note("start." + n, STARTED)
time.sleep(float(sys.argv[2]))
note("end." + n, time.time())
os._exit(1)
"""


def ms(seconds: float) -> float:
    return seconds * 1000.0


def event_ts(events: list[dict[str, Any]], name: str, attempt: int | None = None) -> float | None:
    for event in events:
        if event["event"] == name and (attempt is None or event["attempt"] == attempt):
            return float(event["ts"])
    return None


# submit -> running ------------------------------------------------------------------


def python_startup(bench: Bench, script: Path, n: int) -> dict[str, Any]:
    """The job's own interpreter start, bare: Popen until its first act."""
    samples = []
    for i in range(n):
        stamp = bench.root / f"bare-{i}.ts"
        t0 = time.time()
        proc = subprocess.Popen([sys.executable, str(script), str(stamp)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            started = wait_until(partial(read_float, stamp), 10, "the bare job to start")
        finally:
            proc.kill()
            proc.wait()
        samples.append(ms(started - t0))
    return summary(samples)


def submit_once(bench: Bench, name: str, script: Path, *args: str) -> dict[str, float]:
    stamp = bench.root / f"{name}.ts"
    t0 = time.time()
    bench.submit(name, [sys.executable, str(script), str(stamp), *args])
    returned = time.time()
    job_started = running = None
    while job_started is None or running is None:
        if job_started is None:
            job_started = read_float(stamp)
        if running is None:
            row = bench.status(name)
            if row["state"] == "running" and row["pid"]:
                running = time.time()
        if time.time() - t0 > 30:
            raise RuntimeError(f"job {name} did not start within 30 s")
        time.sleep(0.002)
    attempt_started = event_ts(bench.events(name), "attempt_started") or float("nan")
    return {
        "returned": ms(returned - t0),
        "job_started": ms(job_started - t0),
        "status_running": ms(running - t0),
        "to_attempt_started": ms(attempt_started - t0),
        "attempt_started_to_job": ms(job_started - attempt_started),
    }


def submit_latency(bench: Bench, script: Path, n: int, prefix: str, *args: str) -> dict[str, Any]:
    """Submit n jobs one after another (earlier ones keep running); they stay up."""
    rows = [submit_once(bench, f"{prefix}-{i:02d}", script, *args) for i in range(n)]

    def pick(key: str) -> list[float]:
        return [r[key] for r in rows]

    return {
        "job_first_act_ms": summary(pick("job_started")),
        "status_running_with_pid_ms": summary(pick("status_running")),
        "start_request_returned_ms": summary(pick("returned")),
        "phases_ms": {
            "request_to_attempt_started_event": summary(pick("to_attempt_started")),
            "attempt_started_event_to_job_first_act": summary(pick("attempt_started_to_job")),
        },
    }


# exit -> next attempt -------------------------------------------------------------------


def restart_latency(bench: Bench, script: Path, n: int, run_for: float) -> dict[str, Any]:
    name = "crashloop"
    folder = bench.root / name
    folder.mkdir()
    restart = {"max_attempts": 100_000, "backoff": {"initial": 0, "max": 0}}
    bench.submit(name, [sys.executable, str(script), str(folder), str(run_for)], restart=restart)
    last = n + 1
    wait_until(lambda: (folder / f"start.{last}").exists(), 30 + n * 5, f"attempt {last}", 0.02)
    bench.client.call("stop", name=name, force=True, wait=True)
    events = bench.events(name)
    gaps, detect, decide, launch = [], [], [], []
    for k in range(1, last):
        end, nxt = read_float(folder / f"end.{k}"), read_float(folder / f"start.{k + 1}")
        ended, started = (
            event_ts(events, "attempt_ended", k),
            event_ts(events, "attempt_started", k + 1),
        )
        if end is None or nxt is None or ended is None or started is None:
            continue
        gaps.append(ms(nxt - end))
        detect.append(ms(ended - end))
        decide.append(ms(started - ended))
        launch.append(ms(nxt - started))
    return {
        "ms": summary(gaps),
        "job_ran_for_s": run_for,
        "phases_ms": {
            "exit_to_attempt_ended_event": summary(detect),
            "attempt_ended_to_attempt_started_event": summary(decide),
            "attempt_started_event_to_job_first_act": summary(launch),
        },
    }


# stop -> no descendants -----------------------------------------------------------------


def _proc_start(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(raw[raw.rindex(b")") + 2 :].split()[19])


def _watch_gone(procs: list[tuple[int, int]], done: list[float], stop: threading.Event) -> None:
    """Record the moment none of (pid, start time) is in /proc any more (reaped, not zombie)."""
    left = list(procs)
    while not stop.is_set():
        left = [(pid, st) for pid, st in left if _proc_start(pid) == st]
        if not left:
            done.append(time.time())
            return
        time.sleep(0.0005)


def stop_once(bench: Bench, name: str, force: bool) -> dict[str, float]:
    pidfile = bench.root / f"{name}.pids"
    argv = [sys.executable, str(FIXTURES / "forky.py"), str(pidfile), "wait",
            "--children", str(FORKY_CHILDREN)]  # fmt: skip
    bench.submit(name, argv, stop={"grace": STOP_GRACE})
    expected = 4 + FORKY_CHILDREN
    wait_until(lambda: pidfile.exists() and len(pidfile.read_text().splitlines()) >= expected,
               30, f"{name}'s processes", 0.01)  # fmt: skip
    wait_until(lambda: bench.status(name)["pid"], 10, f"{name} to show its pid", 0.01)
    procs = [
        (int(p), int(s)) for p, s, _ in (line.split() for line in pidfile.read_text().splitlines())
    ]
    done: list[float] = []
    quit_watch = threading.Event()
    watcher = threading.Thread(target=_watch_gone, args=(procs, done, quit_watch), daemon=True)
    t0 = time.time()
    watcher.start()
    result = bench.client.call("stop", name=name, force=force, wait=True)
    returned = time.time()
    watcher.join(30)
    quit_watch.set()
    if not done:
        raise RuntimeError(f"{name}: processes still alive 30 s after the stop")
    state = result[0]["state"]
    if state != "stopped":
        raise RuntimeError(f"{name}: stop left the job {state}")
    return {"all_gone": ms(done[0] - t0), "returned": ms(returned - t0), "processes": len(procs)}


def stop_latency(bench: Bench, n: int, force: bool) -> dict[str, Any]:
    rows = [
        stop_once(bench, f"stop-{'kill' if force else 'term'}-{i:02d}", force) for i in range(n)
    ]
    return {
        "no_descendants_ms": summary([r["all_gone"] for r in rows]),
        "stop_request_returned_ms": summary([r["returned"] for r in rows]),
        "processes_per_job": rows[0]["processes"],
        "signal": "SIGKILL (--force)" if force else f"SIGTERM (grace {STOP_GRACE} s, obeyed)",
    }


# rsupd footprint ----------------------------------------------------------------------


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def _shims(daemon: psutil.Process) -> list[psutil.Process]:
    return [p for p in daemon.children() if "rsup.workers.shim" in " ".join(p.cmdline())]


def footprint(bench: Bench, seconds: float, jobs: int) -> dict[str, Any]:
    """rsupd's RSS and CPU share over `seconds` (and the shims', for scale)."""
    daemon = bench.process()
    shims = _shims(daemon)
    if len(shims) != jobs:
        raise RuntimeError(f"expected {jobs} shims under rsupd, found {len(shims)}")
    cpu0, shim_cpu0, t0 = _cpu(daemon), sum(_cpu(s) for s in shims), time.monotonic()
    rss = []
    while time.monotonic() - t0 < seconds:
        rss.append(daemon.memory_info().rss / 2**20)
        time.sleep(min(1.0, max(0.0, seconds - (time.monotonic() - t0))))
    wall = time.monotonic() - t0
    cpu, shim_cpu = _cpu(daemon) - cpu0, sum(_cpu(s) for s in shims) - shim_cpu0
    shim_rss = sorted(s.memory_info().rss / 2**20 for s in shims)
    return {
        "jobs": jobs,
        "window_s": round(wall, 1),
        "rsupd_rss_mb": {"mean": round(sum(rss) / len(rss), 1), "max": round(max(rss), 1)},
        "rsupd_cpu_percent": round(100 * cpu / wall, 3),
        "rsupd_cpu_s": round(cpu, 3),
        "shim_rss_mb_median": round(shim_rss[len(shim_rss) // 2], 1),
        "shims_cpu_percent_total": round(100 * shim_cpu / wall, 3),
    }


def wait_running(bench: Bench, names: list[str]) -> None:
    def pids() -> bool:
        return all(bench.status(name)["pid"] for name in names)

    wait_until(pids, 30, f"{len(names)} jobs to run", 0.05)


# main ------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle-seconds", type=float, default=30.0,
                        help="length of each RSS/CPU window (default 30)")  # fmt: skip
    parser.add_argument("--n", type=int, default=20, help="jobs for submit latency and footprint")
    parser.add_argument("--restarts", type=int, default=25, help="exit -> next attempt samples")
    parser.add_argument("--stops", type=int, default=10, help="stop samples per signal")
    return parser.parse_args()


def run(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    idle = bench.script("idle_job.py", IDLE_JOB)
    crash = bench.script("crash_job.py", CRASH_JOB)
    out: dict[str, Any] = {"bench": "core", "machine": machine()}
    out["rsupd_rss_mb_no_jobs"] = round(bench.process().memory_info().rss / 2**20, 1)

    log("python start-up alone (bare job, no rsup)")
    out["python_startup_ms"] = python_startup(bench, idle, 10)
    log("first job after rsupd start (cold)")
    cold = submit_once(bench, "cold", idle)
    bench.client.call("stop", name="cold", force=True, wait=True)
    out["submit_cold_first_job_ms"] = {k: round(v, 2) for k, v in cold.items()}

    log(f"submit -> running, {args.n} jobs (they stay up as the idle jobs)")
    out["submit_to_running"] = submit_latency(bench, idle, args.n, "idle")
    log(f"rsupd footprint: {args.n} silent jobs for {args.idle_seconds:g} s")
    silent = footprint(bench, args.idle_seconds, args.n)

    log(f"stop --all of {args.n} jobs")
    t0 = time.time()
    bench.client.call("stop", all=True, wait=True)
    out["stop_all_ms"] = {"jobs": args.n, "ms": round(ms(time.time() - t0), 1)}

    log(f"rsupd footprint: {args.n} jobs printing a line a second for {args.idle_seconds:g} s")
    names = [f"chatty-{i:02d}" for i in range(args.n)]
    for name in names:
        bench.submit(name, [sys.executable, str(idle), str(bench.root / f"{name}.ts"), "chatty"])
    wait_running(bench, names)
    chatty = footprint(bench, args.idle_seconds, args.n)
    bench.client.call("stop", all=True, wait=True)
    out["rsupd_footprint"] = {"silent_jobs": silent, "one_line_per_second": chatty}

    log(f"exit -> next attempt running, zero backoff, {args.restarts} restarts")
    out["exit_to_next_attempt_running"] = restart_latency(bench, crash, args.restarts, 0.1)

    log(f"stop -> no descendants, {args.stops} jobs, SIGTERM")
    term = stop_latency(bench, args.stops, force=False)
    log(f"stop -> no descendants, {args.stops} jobs, --force")
    out["stop_to_no_descendants"] = {"term": term, "force": stop_latency(bench, args.stops, True)}
    return out


def main() -> int:
    args = parse_args()
    started = time.monotonic()
    with Bench("rsup-bench-core-") as bench:
        out = run(bench, args)
    out["bench_wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.pop("RSUP_SOCKET", None)
    sys.exit(main())
