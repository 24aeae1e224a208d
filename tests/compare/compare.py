"""rsupd and supervisord side by side on the same jobs, in one run.

    .venv/bin/python tests/compare/compare.py [--runs 3] [--idle-seconds 60] [--table F]

Both daemons run for the whole comparison, each in its own temp dir (supervisord from pip
`supervisor`, a unix_http_server, programs with autorestart=true and startsecs=0, driven
over its XML-RPC socket; rsupd driven over its own socket, as `rsup` would). Scenarios
alternate between them so drifting load on the machine hits both alike:

(a) exit -> running again: tests/fixtures/cmp_flap.py notes time.time() as its first act
    and again right before it exits 1; the gap to the next attempt's first act, N times.
    rsup with zero backoff; supervisord restarts an exited RUNNING process at once.
(b) stop completeness: tests/fixtures/forky.py (a child, a setsid child, a double-forked
    orphan in its own session, and 2 workers: 6 processes); after each tool's stop returns,
    the job's processes still alive are counted (at once, and 1 s later). supervisord both
    with its defaults and with stopasgroup=true killasgroup=true.
(c) footprint: 20 idle jobs under each at the same time; CPU and RSS of each daemon over
    the window (rsup also with its per-job shims, which supervisord does not have).
(d) torchrun: tests/bench/bench_torchrun.py, when present: rank death -> group running
    again, rsup vs torchrun --max-restarts (its own JSON, included as is).

Each figure is taken in every run; the summary gives the median over runs. Prints one JSON
document on stdout and a markdown table on stderr (or into --table F). Every process is
cleaned up: supervisord shut down, rsupd terminated, leftovers killed.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib.metadata
import importlib.util
import io
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import xmlrpc.client
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from benchlib import FIXTURES, REPO, Bench, log, machine, read_float, summary, wait_until

FLAP = FIXTURES / "cmp_flap.py"
IDLE = FIXTURES / "cmp_idle.py"
FORKY = FIXTURES / "forky.py"
FORKY_CHILDREN = 2
FORKY_PROCESSES = 4 + FORKY_CHILDREN
STOP_GRACE = 10  # seconds, supervisord's default stopwaitsecs; forky obeys SIGTERM anyway
SURVIVOR_SETTLE = 1.0  # seconds after the stop returned before the second count
TORCHRUN_BENCH = REPO / "tests" / "bench" / "bench_torchrun.py"
SUPERVISORD = Path(sys.executable).parent / "supervisord"
COMMAND = "make compare  # .venv/bin/python tests/compare/compare.py --runs 3"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="whole comparisons (default 3)")
    parser.add_argument("--n", type=int, default=25, help="restarts timed per side and run")
    parser.add_argument("--run-for", type=float, default=0.2, help="seconds each flap runs")
    parser.add_argument("--stops", type=int, default=3, help="stops per side, setting and run")
    parser.add_argument("--jobs", type=int, default=20, help="idle jobs for the footprint")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="footprint window")
    parser.add_argument("--torchrun-n", type=int, default=3, help="bench_torchrun trials")
    parser.add_argument("--skip-torchrun", action="store_true", help="leave (d) out")
    parser.add_argument("--table", type=Path, help="write the markdown table here")
    return parser.parse_args()


# supervisord -------------------------------------------------------------------------------


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class _UnixTransport(xmlrpc.client.Transport):
    """XML-RPC over supervisord's unix_http_server (no supervisorctl start-up in the figures)."""

    def __init__(self, path: str, timeout: float = 60.0) -> None:
        super().__init__()
        self._path = path
        self._timeout = timeout

    def make_connection(self, host: Any) -> http.client.HTTPConnection:
        return _UnixHTTPConnection(self._path, self._timeout)


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

[supervisorctl]
serverurl=unix://{root}/supervisor.sock
"""

PROGRAM = """
[program:{name}]
command={command}
directory={root}
autostart=false
autorestart=true
startsecs=0
startretries=3
stopwaitsecs={grace}
stopasgroup={group}
killasgroup={group}
redirect_stderr=true
"""


class Supervisord:
    """A real supervisord in a temp dir, with the programs the scenarios need."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rsup-compare-supervisord-"))
        (self.root / "logs").mkdir()
        self.flap = self.root / "flap"
        self.proc: subprocess.Popen[bytes] | None = None
        self.rpc = xmlrpc.client.ServerProxy(
            "http://localhost", transport=_UnixTransport(str(self.root / "supervisor.sock"))
        )
        self.conf = self.root / "supervisord.conf"
        self.conf.write_text(self._config(args))

    def _config(self, args: argparse.Namespace) -> str:
        py = sys.executable
        programs = {
            "flap": (f"{py} {FLAP} {self.flap} {args.run_for}", False, 1),
            "forky_default": (self._forky("forky_default"), False, 1),
            "forky_group": (self._forky("forky_group"), True, 1),
            "idle": (f"{py} {IDLE}", False, args.jobs),
        }
        text = SUPERVISORD_CONF.format(root=self.root)
        for name, (command, group, count) in programs.items():
            text += PROGRAM.format(name=name, command=command, root=self.root, grace=STOP_GRACE,
                                   group=str(group).lower())  # fmt: skip
            if count > 1:
                text += f"numprocs={count}\nprocess_name=%(program_name)s_%(process_num)02d\n"
        return text

    def _forky(self, name: str) -> str:
        return f"{sys.executable} {FORKY} {self.pidfile(name)} wait --children {FORKY_CHILDREN}"

    def pidfile(self, name: str) -> Path:
        return self.root / f"{name}.pids"

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

    def process(self) -> psutil.Process:
        assert self.proc is not None
        return psutil.Process(self.proc.pid)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError, xmlrpc.client.Error):
                self.rpc.supervisor.stopAllProcesses(True)
            with contextlib.suppress(OSError, xmlrpc.client.Error):
                self.rpc.supervisor.shutdown()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        kill_under(self.root)
        shutil.rmtree(self.root, ignore_errors=True)


def kill_under(root: Path) -> int:
    """SIGKILL every process whose command line names root (a scenario's debris)."""
    killed = 0
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if proc.pid != os.getpid() and str(root) in " ".join(proc.info["cmdline"] or []):
                proc.kill()
                killed += 1
    return killed


# (a) exit -> running again ---------------------------------------------------------------


def gaps_ms(folder: Path, n: int) -> list[float]:
    """start.{k+1} - end.{k} for the first n restarts, in milliseconds."""
    gaps = []
    for k in range(1, n + 1):
        end, nxt = read_float(folder / f"end.{k}"), read_float(folder / f"start.{k + 1}")
        if end is not None and nxt is not None:
            gaps.append((nxt - end) * 1000.0)
    return gaps


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _wait_attempts(folder: Path, n: int, run_for: float) -> None:
    last = folder / f"start.{n + 1}"
    wait_until(last.exists, 30 + n * (run_for + 2), f"{last}", 0.02)


def restart_rsup(bench: Bench, run: int, args: argparse.Namespace) -> list[float]:
    name = f"flap-{run}"
    folder = _fresh(bench.root / name)
    restart = {"max_attempts": 10**6, "backoff": {"initial": 0, "max": 0}}
    bench.submit(name, [sys.executable, str(FLAP), str(folder), str(args.run_for)],
                 restart=restart)  # fmt: skip
    _wait_attempts(folder, args.n, args.run_for)
    bench.client.call("stop", name=name, force=True, wait=True)
    return gaps_ms(folder, args.n)


def restart_supervisord(sv: Supervisord, args: argparse.Namespace) -> list[float]:
    folder = _fresh(sv.flap)
    sv.rpc.supervisor.startProcess("flap", False)
    _wait_attempts(folder, args.n, args.run_for)
    sv.rpc.supervisor.stopProcess("flap", True)
    return gaps_ms(folder, args.n)


# (b) stop completeness ---------------------------------------------------------------------


def _start_time(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    return None if fields[0] == b"Z" else int(fields[19])  # a zombie has already died


def read_pids(pidfile: Path) -> list[tuple[int, int, str]]:
    rows = [line.split() for line in pidfile.read_text().splitlines()]
    return [(int(pid), int(start), role) for pid, start, role in rows]


def alive(procs: list[tuple[int, int, str]]) -> list[str]:
    """Roles of the processes in procs that still run (same pid, same start time)."""
    return [role for pid, start, role in procs if _start_time(pid) == start]


def _wait_forky(pidfile: Path) -> list[tuple[int, int, str]]:
    def complete() -> bool:
        return pidfile.exists() and len(pidfile.read_text().splitlines()) >= FORKY_PROCESSES

    wait_until(complete, 30, f"{pidfile.name}'s processes", 0.01)
    return read_pids(pidfile)


def count_survivors(procs: list[tuple[int, int, str]], stop_returned: float) -> dict[str, Any]:
    at_return = alive(procs)
    time.sleep(max(0.0, stop_returned + SURVIVOR_SETTLE - time.time()))
    later = alive(procs)
    for pid, start, _role in procs:  # leave nothing behind for the next trial
        if _start_time(pid) == start:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return {"at_return": len(at_return), "after_1s": len(later), "roles_after_1s": later}


def stop_rsup(bench: Bench, name: str) -> dict[str, Any]:
    pidfile = bench.root / f"{name}.pids"
    argv = [sys.executable, str(FORKY), str(pidfile), "wait", "--children", str(FORKY_CHILDREN)]
    bench.submit(name, argv, stop={"grace": STOP_GRACE})
    procs = _wait_forky(pidfile)
    wait_until(lambda: bench.status(name)["pid"], 10, f"{name} to show its pid", 0.01)
    t0 = time.time()
    bench.client.call("stop", name=name, wait=True)
    returned = time.time()
    return {**count_survivors(procs, returned), "stop_ms": round((returned - t0) * 1000, 1)}


def stop_supervisord(sv: Supervisord, program: str) -> dict[str, Any]:
    pidfile = sv.pidfile(program)
    pidfile.unlink(missing_ok=True)
    sv.rpc.supervisor.startProcess(program, True)
    procs = _wait_forky(pidfile)
    t0 = time.time()
    sv.rpc.supervisor.stopProcess(program, True)
    returned = time.time()
    return {**count_survivors(procs, returned), "stop_ms": round((returned - t0) * 1000, 1)}


# (c) footprint -----------------------------------------------------------------------------


def _cpu_s(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def _mb(procs: list[psutil.Process], kind: str) -> float:
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            info = proc.memory_full_info() if kind in ("pss", "uss") else proc.memory_info()
            total += getattr(info, kind)
    return total / 2**20


def _shims(daemon: psutil.Process) -> list[psutil.Process]:
    return [p for p in daemon.children() if "rsup.workers.shim" in " ".join(p.cmdline())]


def start_idle(bench: Bench, sv: Supervisord, run: int, jobs: int) -> list[str]:
    names = [f"idle-{run}-{i:02d}" for i in range(jobs)]
    for name in names:
        bench.submit(name, [sys.executable, str(IDLE)], stop={"grace": STOP_GRACE})
    sv.rpc.supervisor.startProcessGroup("idle", True)

    def all_running() -> bool:
        rsup_up = all(bench.status(name)["pid"] for name in names)
        infos = sv.rpc.supervisor.getAllProcessInfo()
        sv_up = sum(i["group"] == "idle" and i["statename"] == "RUNNING" for i in infos)
        return rsup_up and sv_up == jobs

    wait_until(all_running, 60, f"{jobs} idle jobs under each daemon", 0.1)
    return names


def footprint(bench: Bench, sv: Supervisord, seconds: float, jobs: int) -> dict[str, Any]:
    """Both daemons measured over the same window, each with its jobs idle."""
    rsupd, supervisord = bench.process(), sv.process()
    shims = _shims(rsupd)
    if len(shims) != jobs:
        raise RuntimeError(f"expected {jobs} shims under rsupd, found {len(shims)}")
    sides = {"rsupd": [rsupd], "rsupd_with_shims": [rsupd, *shims], "supervisord": [supervisord]}
    cpu0 = {side: _cpu_s(procs) for side, procs in sides.items()}
    rss: dict[str, list[float]] = {side: [] for side in sides}
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for side, procs in sides.items():
            rss[side].append(_mb(procs, "rss"))
        time.sleep(min(1.0, max(0.0, seconds - (time.monotonic() - t0))))
    wall = time.monotonic() - t0
    out: dict[str, Any] = {"jobs": jobs, "window_s": round(wall, 1)}
    for side, procs in sides.items():
        out[side] = {
            "cpu_percent": round(100 * (_cpu_s(procs) - cpu0[side]) / wall, 3),
            "rss_mb": round(statistics.mean(rss[side]), 1),
            "pss_mb": round(_mb(procs, "pss"), 1),
        }
    return out


def stop_idle(bench: Bench, sv: Supervisord, names: list[str]) -> None:
    for name in names:
        bench.client.call("stop", name=name, force=True, wait=False)
    sv.rpc.supervisor.stopProcessGroup("idle", True)
    for name in names:
        bench.client.call("stop", name=name, force=True, wait=True)


# (d) torchrun --------------------------------------------------------------------------------


def torchrun_comparison(args: argparse.Namespace) -> dict[str, Any]:
    """Run tests/bench/bench_torchrun.py's main() and keep the JSON it prints."""
    if args.skip_torchrun:
        return {"status": "skipped (--skip-torchrun)"}
    if not TORCHRUN_BENCH.exists():
        return {"status": "not available", "why": f"{TORCHRUN_BENCH.relative_to(REPO)} missing"}
    spec = importlib.util.spec_from_file_location("bench_torchrun", TORCHRUN_BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    printed = io.StringIO()
    saved_argv = sys.argv
    sys.argv = [str(TORCHRUN_BENCH), "--n", str(args.torchrun_n)]
    try:
        spec.loader.exec_module(module)
        with contextlib.redirect_stdout(printed):
            module.main()
        return {"status": "ok", "result": json.loads(printed.getvalue())}
    except Exception as exc:  # any failure there is reported, and the rest of the run stands
        return {"status": "not available", "why": f"{type(exc).__name__}: {exc}"}
    finally:
        sys.argv = saved_argv


# one run and the summary ---------------------------------------------------------------------


def one_run(bench: Bench, sv: Supervisord, run: int, args: argparse.Namespace) -> dict[str, Any]:
    log(f"run {run}: (a) exit -> running again, {args.n} restarts each")
    restart = {"rsup": summary(restart_rsup(bench, run, args)),
               "supervisord": summary(restart_supervisord(sv, args))}  # fmt: skip
    log(f"run {run}: (b) stop completeness, {args.stops} stops per side and setting")
    stops: dict[str, list[dict[str, Any]]] = {"rsup": [], "supervisord_default": [],
                                              "supervisord_group": []}  # fmt: skip
    for i in range(args.stops):
        stops["rsup"].append(stop_rsup(bench, f"forky-{run}-{i}"))
        stops["supervisord_default"].append(stop_supervisord(sv, "forky_default"))
        stops["supervisord_group"].append(stop_supervisord(sv, "forky_group"))
    log(f"run {run}: (c) {args.jobs} idle jobs under each for {args.idle_seconds:g} s")
    names = start_idle(bench, sv, run, args.jobs)
    time.sleep(2.0)  # let the start-up work settle before the window
    foot = footprint(bench, sv, args.idle_seconds, args.jobs)
    stop_idle(bench, sv, names)
    return {"restart_ms": restart, "stop": {k: _stop_summary(v) for k, v in stops.items()},
            "footprint": foot}  # fmt: skip


def _stop_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "processes": FORKY_PROCESSES,
        "survivors_at_return": [r["at_return"] for r in rows],
        "survivors_after_1s": [r["after_1s"] for r in rows],
        "roles_after_1s": sorted({role for r in rows for role in r["roles_after_1s"]}),
        "stop_ms": [r["stop_ms"] for r in rows],
    }


def median_of(runs: list[dict[str, Any]], *path: str) -> float:
    values = []
    for run in runs:
        value: Any = run
        for key in path:
            value = value[key]
        values.extend(value if isinstance(value, list) else [value])
    return round(statistics.median(values), 3)


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for side in ("rsup", "supervisord"):
        out[f"restart_p50_ms_{side}"] = median_of(runs, "restart_ms", side, "p50")
        out[f"restart_p90_ms_{side}"] = median_of(runs, "restart_ms", side, "p90")
    for side in ("rsup", "supervisord_default", "supervisord_group"):
        out[f"survivors_after_1s_{side}"] = median_of(runs, "stop", side, "survivors_after_1s")
        out[f"stop_ms_{side}"] = median_of(runs, "stop", side, "stop_ms")
    for side in ("rsupd", "rsupd_with_shims", "supervisord"):
        for key in ("cpu_percent", "rss_mb", "pss_mb"):
            out[f"{key}_{side}"] = median_of(runs, "footprint", side, key)
    return out


def ratios(m: dict[str, Any]) -> dict[str, float | None]:
    def ratio(a: str, b: str) -> float | None:
        return round(m[a] / m[b], 2) if m[b] else None

    return {
        "restart_p50_rsup_over_supervisord": ratio("restart_p50_ms_rsup",
                                                   "restart_p50_ms_supervisord"),
        "restart_p90_rsup_over_supervisord": ratio("restart_p90_ms_rsup",
                                                   "restart_p90_ms_supervisord"),
        "cpu_rsupd_over_supervisord": ratio("cpu_percent_rsupd", "cpu_percent_supervisord"),
        "cpu_rsupd_with_shims_over_supervisord": ratio("cpu_percent_rsupd_with_shims",
                                                       "cpu_percent_supervisord"),
        "rss_rsupd_over_supervisord": ratio("rss_mb_rsupd", "rss_mb_supervisord"),
        "pss_rsupd_with_shims_over_supervisord": ratio("pss_mb_rsupd_with_shims",
                                                       "pss_mb_supervisord"),
    }  # fmt: skip


# the table -------------------------------------------------------------------------------


def table(out: dict[str, Any], args: argparse.Namespace) -> str:
    m, r = out["median"], out["ratios"]
    jobs, window = args.jobs, f"{args.idle_seconds:g} s"
    rows = [
        ("exit → running again, p50 (ms)", m["restart_p50_ms_rsup"],
         m["restart_p50_ms_supervisord"], "same", r["restart_p50_rsup_over_supervisord"]),
        ("exit → running again, p90 (ms)", m["restart_p90_ms_rsup"],
         m["restart_p90_ms_supervisord"], "same", r["restart_p90_rsup_over_supervisord"]),
        (f"processes left 1 s after stop (of {FORKY_PROCESSES}: setsid + double fork)",
         m["survivors_after_1s_rsup"], m["survivors_after_1s_supervisord_default"],
         m["survivors_after_1s_supervisord_group"], None),
        ("stop returned after (ms)", m["stop_ms_rsup"], m["stop_ms_supervisord_default"],
         m["stop_ms_supervisord_group"], None),
        (f"daemon CPU, {jobs} idle jobs, {window} (% of a core)", m["cpu_percent_rsupd"],
         m["cpu_percent_supervisord"], "same", r["cpu_rsupd_over_supervisord"]),
        ("… with rsup's per-job shims (% of a core)", m["cpu_percent_rsupd_with_shims"],
         m["cpu_percent_supervisord"], "same", r["cpu_rsupd_with_shims_over_supervisord"]),
        (f"daemon RSS, {jobs} idle jobs (MB)", m["rss_mb_rsupd"], m["rss_mb_supervisord"],
         "same", r["rss_rsupd_over_supervisord"]),
        ("… with rsup's shims, PSS (MB)", m["pss_mb_rsupd_with_shims"], m["pss_mb_supervisord"],
         "same", r["pss_rsupd_with_shims_over_supervisord"]),
    ]  # fmt: skip
    lines = [
        "| measure (median of runs) | rsup | supervisord | supervisord stopasgroup/killasgroup"
        " | rsup ÷ supervisord |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [f"| {a} | {_fmt(b)} | {_fmt(c)} | {_fmt(d)} | {_fmt(e)} |" for a, b, c, d, e in rows]
    lines += _torchrun_rows(out["torchrun"])
    mach, v = out["machine"], out["versions"]
    lines += [
        "",
        f"{args.runs} runs, {args.n} restarts per side and run, {args.stops} stops per side,"
        f" setting and run; {mach['cpus']} CPUs, load {mach['loadavg_1m_at_start']} at start;"
        f" rsup {v['rsup']}, supervisor {v['supervisor']}, Python {mach['python']}.",
        f"Reproduce: `{COMMAND}`",
    ]
    return "\n".join(lines) + "\n"


def _torchrun_rows(torchrun: dict[str, Any]) -> list[str]:
    """A second table: each side bench_torchrun reports, with the p50 of each latency."""
    if torchrun.get("status") != "ok":
        why = f" ({torchrun['why']})" if torchrun.get("why") else ""
        return ["", f"torchrun rank death: {torchrun.get('status')}{why}."]
    result = torchrun["result"]
    sides = {name: value for name, value in result.items() if _latencies(value)}
    shared = [m for v in sides.values() for m in _latencies(v)]  # what sides can be compared on
    metrics = sorted({m for m in shared if shared.count(m) > 1} or set(shared))
    lines = [
        "",
        f"Rank death -> group running again ({result.get('fault', 'bench_torchrun')}), p50 ms:",
        "",
        "| side | recovered | " + " | ".join(metrics) + " |",
        "|---|---:|" + "---:|" * len(metrics),
    ]
    for name, value in sides.items():
        cells = [_fmt(value[m]["p50"]) if m in value else "-" for m in metrics]
        lines.append(f"| {name} | {value.get('recovered', '')} | " + " | ".join(cells) + " |")
    return lines


def _latencies(value: Any) -> list[str]:
    """The keys of value that hold a latency summary (`*_ms`, a dict with a p50)."""
    if not isinstance(value, dict):
        return []
    return [k for k, v in value.items() if k.endswith("ms") and isinstance(v, dict) and "p50" in v]


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.0f}"
    return str(value)


# main ------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    out = {}
    for dist in ("rsup", "supervisor"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def main() -> int:
    args = parse_args()
    if not SUPERVISORD.exists():
        print(f"{SUPERVISORD} not found: pip install supervisor into this venv", file=sys.stderr)
        return 2
    started = time.monotonic()
    out: dict[str, Any] = {"compare": "rsup_vs_supervisord", "machine": machine(),
                           "versions": versions(), "command": COMMAND}  # fmt: skip
    sv = Supervisord(args)
    try:
        with Bench("rsup-compare-") as bench:
            sv.start()
            runs = [one_run(bench, sv, run, args) for run in range(1, args.runs + 1)]
    finally:
        sv.close()
    log("(d) torchrun rank death: rsup vs torchrun --max-restarts")
    out["torchrun"] = torchrun_comparison(args)
    out["runs"] = runs
    out["median"] = medians(runs)
    out["ratios"] = ratios(out["median"])
    out["wall_s"] = round(time.monotonic() - started, 1)
    out["table_markdown"] = table(out, args)
    print(json.dumps(out, indent=2))
    if args.table is not None:
        args.table.write_text(out["table_markdown"])
        log(f"table written to {args.table}")
    else:
        print(out["table_markdown"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.pop("RSUP_SOCKET", None)
    sys.exit(main())
