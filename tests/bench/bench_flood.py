"""A flood of training lines: bare, under rsup and under supervisord, in one run.

    .venv/bin/python tests/bench/bench_flood.py [--lines 1000000] [--runs 3]
        [--modes print,block] [--skip-supervisord]

The job is tests/fixtures/flood.py: LINES training-shaped lines (81 bytes on average),
with PYTHONUNBUFFERED=1 (what rsup gives a job): `print` mode is one print() per line
(two writes each, the line and its newline), `block` mode the same bytes in 1 MiB writes.
Its wall time is taken inside the job (first line to last byte written, --stamps), so
interpreter start-up, the daemons' reaction time and their teardown are left out:

(a) bare: stdout redirected into a file;
(b) rsup: a real rsupd (benchlib.Bench), submitted as `rsup start` would; the job's
    stdout and stderr are a pipe to the shim, which copies them into output.log while
    rsupd follows that file (inotify) and classifies every line;
(c) supervisord: a real supervisord (PyPI `supervisor`), redirect_stderr=true,
    stdout_logfile a file with no size limit, the same environment.

Runs alternate (bare, rsup, supervisord, then the reverse order) so drifting machine load
hits each alike; figures are medians of --runs. Reported: each side's job wall times,
the job-speed ratio bare/supervised (goal for rsup: >= 0.97, and ahead of supervisord),
lines/s and MB/s the job achieved (under rsup, the rate the shim's copy sustained), the
shim's CPU seconds (and MB per CPU second: what it could move flat out), rsupd's and
supervisord's CPU seconds, rsupd's catch-up (its attempt_ended event's ts minus the
job's own end: the shim's drain, exit.json and rsupd's last classification), rsupd's live
rate over the whole attempt, and LiveClassifier.feed alone over the output.log rsup wrote.

Prints one JSON document on stdout; progress goes to stderr. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import xmlrpc.client
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compare"))
from bench_detect import ShimClock, classifier_rate
from benchlib import FIXTURES, Bench, log, machine, wait_until
from compare import SUPERVISORD, _UnixTransport, kill_under

FLOOD = FIXTURES / "flood.py"
GOAL_RATIO = 0.97
JOB_TIMEOUT = 600.0

SUPERVISORD_CONF = """\
[unix_http_server]
file={root}/supervisor.sock

[supervisord]
nodaemon=true
logfile={root}/supervisord.log
pidfile={root}/supervisord.pid
childlogdir={root}/logs
loglevel=warn

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
"""

PROGRAM = """
[program:{name}]
command={command}
directory={root}
autostart=false
autorestart=false
startsecs=0
redirect_stderr=true
stdout_logfile={root}/{name}.log
stdout_logfile_maxbytes=0
stdout_logfile_backups=0
environment=PYTHONUNBUFFERED="1"
"""


def flood_argv(lines: int, mode: str, stamps: Path) -> list[str]:
    return [sys.executable, str(FLOOD), str(lines), "--mode", mode, "--stamps", str(stamps)]


def read_stamps(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


# the three sides -----------------------------------------------------------------------


def bare_run(root: Path, lines: int, mode: str) -> dict[str, Any]:
    """The flood alone, stdout into a file (stderr apart), with rsup's environment."""
    out, stamps = root / "bare.out", root / "bare.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with out.open("wb") as sink, (root / "bare.err").open("wb") as err:
        proc = subprocess.Popen(flood_argv(lines, mode, stamps), stdout=sink, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"the bare flood exited with status {status}")
    times = read_stamps(stamps)
    size = out.stat().st_size
    out.unlink()
    if size != times["bytes"]:
        raise RuntimeError(f"bare: {size} bytes in the file, {times['bytes']} written")
    return {"wall_s": times["elapsed_s"], "bytes": size,
            "job_cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}  # fmt: skip


def rsup_run(bench: Bench, name: str, lines: int, mode: str) -> dict[str, Any]:
    stamps = bench.root / f"{name}.json"
    daemon = bench.process()
    cpu0 = sum(daemon.cpu_times()[:2])
    bench.submit(name, flood_argv(lines, mode, stamps), limits={"log_max_bytes": "8GiB"},
                 restart={"max_attempts": 1})  # fmt: skip
    shim = ShimClock(bench, name)

    def ended() -> str | None:
        shim.tick()
        state = str(bench.status(name)["state"])
        return state if state in ("succeeded", "failed") else None

    state = wait_until(ended, JOB_TIMEOUT, f"{name} to finish", 0.05)
    if state != "succeeded":
        raise RuntimeError(f"{name} ended {state}; see {bench.attempt_dir(name, 1)}")
    rsupd_cpu = sum(daemon.cpu_times()[:2]) - cpu0
    times = read_stamps(stamps)
    ended = next(e for e in bench.events(name) if e["event"] == "attempt_ended")
    exit_record = ended.get("exit") or {}
    usage = exit_record.get("rusage") or {}
    output = bench.attempt_dir(name, 1) / "output.log"
    size = output.stat().st_size
    # The flood's bytes and its own last line on stderr, nothing dropped, nothing else.
    if size <= times["bytes"] or exit_record.get("log_dropped_bytes"):
        raise RuntimeError(f"{name}: output.log has {size} bytes for {times['bytes']} written")
    followed_s = float(ended["ts"]) - times["start"]
    return {
        "wall_s": times["elapsed_s"],
        "bytes": times["bytes"],
        "output_log_bytes": size,
        "job_cpu_s": round(float(usage.get("utime", 0)) + float(usage.get("stime", 0)), 3),
        "shim_cpu_s": round(shim.seconds, 3),
        "rsupd_cpu_s": round(rsupd_cpu, 3),
        "rsupd_caught_up_after_job_end_ms": round((float(ended["ts"]) - times["end"]) * 1000, 1),
        "rsupd_follow_lines_per_s": round(lines / followed_s),
        "rsupd_follow_mb_per_s": round(size / followed_s / 1e6, 1),
    }


class Supervisord:
    """A real supervisord in a temp dir with one flood program per mode."""

    def __init__(self, lines: int, modes: list[str]) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rsup-flood-supervisord-"))
        (self.root / "logs").mkdir()
        self.rpc = xmlrpc.client.ServerProxy(
            "http://localhost", transport=_UnixTransport(str(self.root / "supervisor.sock"))
        )
        text = SUPERVISORD_CONF.format(root=self.root)
        for mode in modes:
            argv = flood_argv(lines, mode, self.stamps(mode))
            text += PROGRAM.format(name=f"flood_{mode}", command=" ".join(argv), root=self.root)
        self.conf = self.root / "supervisord.conf"
        self.conf.write_text(text)
        self.proc: subprocess.Popen[bytes] | None = None

    def stamps(self, mode: str) -> Path:
        return self.root / f"flood_{mode}.json"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        log(f"starting supervisord in {self.root}")
        with (self.root / "supervisord.out").open("ab") as out:
            self.proc = subprocess.Popen(
                [str(SUPERVISORD), "-c", str(self.conf)], cwd=self.root, env=env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        wait_until(self._ready, 30, "supervisord to answer", 0.05)

    def _ready(self) -> bool:
        try:
            return bool(self.rpc.supervisor.getState()["statename"] == "RUNNING")
        except (OSError, xmlrpc.client.Error):
            return False

    def run(self, mode: str) -> dict[str, Any]:
        name, stamps = f"flood_{mode}", self.stamps(mode)
        logfile = self.root / f"{name}.log"
        stamps.unlink(missing_ok=True)
        with contextlib.suppress(FileNotFoundError):
            logfile.write_bytes(b"")
        assert self.proc is not None
        daemon = psutil.Process(self.proc.pid)
        cpu0 = sum(daemon.cpu_times()[:2])
        self.rpc.supervisor.startProcess(name, False)

        def done() -> bool:
            info = self.rpc.supervisor.getProcessInfo(name)
            return bool(info["statename"] in ("EXITED", "FATAL", "BACKOFF"))

        wait_until(done, JOB_TIMEOUT, f"supervisord's {name} to exit", 0.05)
        times = read_stamps(stamps)
        # supervisord reads what is left in the pipe after the exit; wait for all of it.
        wait_until(lambda: logfile.stat().st_size > times["bytes"], 60, f"{name}.log", 0.05)
        cpu = sum(daemon.cpu_times()[:2]) - cpu0
        return {"wall_s": times["elapsed_s"], "bytes": times["bytes"],
                "log_bytes": logfile.stat().st_size,
                "supervisord_cpu_s": round(cpu, 3)}  # fmt: skip

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError, xmlrpc.client.Error):
                self.rpc.supervisor.shutdown()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        kill_under(self.root)
        shutil.rmtree(self.root, ignore_errors=True)


# the comparison ------------------------------------------------------------------------


def median(rows: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(float(r[key]) for r in rows))


def side(rows: list[dict[str, Any]], lines: int) -> dict[str, Any]:
    """Every run's figures and their medians; lines/s and MB/s at the median wall time."""
    wall = median(rows, "wall_s")
    size = rows[0]["bytes"]
    medians = {k: round(median(rows, k), 3) for k in rows[0] if k not in ("wall_s", "bytes")}
    return {
        "job_wall_s": [round(r["wall_s"], 3) for r in rows],
        "job_wall_s_median": round(wall, 3),
        "job_lines_per_s": round(lines / wall),
        "job_mb_per_s": round(size / wall / 1e6, 1),
        "medians": medians,
        "runs": [{k: v for k, v in r.items() if k != "wall_s"} for r in rows],
    }


def flood(
    bench: Bench, sup: Supervisord | None, lines: int, mode: str, runs: int
) -> dict[str, Any]:
    bare: list[dict[str, Any]] = []
    rsup: list[dict[str, Any]] = []
    supd: list[dict[str, Any]] = []
    for r in range(runs):
        order = ["bare", "rsup", "supervisord"]
        if r % 2:
            order.reverse()
        for who in order:
            log(f"  {mode} round {r + 1}: {who}")
            if who == "bare":
                bare.append(bare_run(bench.root, lines, mode))
            elif who == "rsup":
                rsup.append(rsup_run(bench, f"flood-{mode}-{r + 1}", lines, mode))
            elif sup is not None:
                supd.append(sup.run(mode))
    bare_s = median(bare, "wall_s")
    out: dict[str, Any] = {"bytes": bare[0]["bytes"], "bare": side(bare, lines)}
    rs = side(rsup, lines)
    shim_cpu = rs["medians"]["shim_cpu_s"]
    rs["shim_copy_mb_per_s"] = rs["job_mb_per_s"]  # the shim kept pace: the job never waited
    rs["shim_mb_per_cpu_s"] = round(out["bytes"] / shim_cpu / 1e6, 1) if shim_cpu else None
    out["rsup"] = rs
    out["ratio_bare_over_rsup"] = round(bare_s / median(rsup, "wall_s"), 3)
    out["goal_ratio"] = GOAL_RATIO
    out["goal_ratio_met"] = out["ratio_bare_over_rsup"] >= GOAL_RATIO
    if supd:
        out["supervisord"] = side(supd, lines)
        out["ratio_bare_over_supervisord"] = round(bare_s / median(supd, "wall_s"), 3)
        out["rsup_ahead_of_supervisord"] = (
            out["ratio_bare_over_rsup"] >= out["ratio_bare_over_supervisord"]
        )
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines the flood prints")
    parser.add_argument("--runs", type=int, default=3, help="runs per side and mode")
    parser.add_argument("--modes", default="print,block", help="print, block or both")
    parser.add_argument("--skip-supervisord", action="store_true", help="leave (c) out")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    modes = [m for m in args.modes.split(",") if m]
    out: dict[str, Any] = {"bench": "flood", "machine": machine(), "lines": args.lines,
                           "runs": args.runs, "statistic": "median"}  # fmt: skip
    sup = None if args.skip_supervisord else Supervisord(args.lines, modes)
    with Bench("rsup-bench-flood-") as bench:
        try:
            if sup is not None:
                sup.start()
            for mode in modes:
                log(f"flood, {args.lines} lines, {mode} mode")
                out[mode] = flood(bench, sup, args.lines, mode, args.runs)
            log("LiveClassifier.feed over the output.log rsup wrote")
            mode = modes[0]
            output = bench.attempt_dir(f"flood-{mode}-{args.runs}", 1) / "output.log"
            rate = classifier_rate(output)
            rate["mb_per_s"] = round(rate["mb"] / rate["seconds"], 1)
            out["classifier_alone"] = rate
        finally:
            if sup is not None:
                sup.close()
    out["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
