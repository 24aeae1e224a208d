"""The fault matrix: each row a real fault against a real rsupd, and what must come of it.

A row names the fault, the outcome it must have (job state, attempts, no surviving
process, nothing lost that had been written) and checks it; the module prints every
row's result as one table when it ends. Rows that need no daemon of their own share one.

    RSUP_FM_CYCLES=N   start/stop cycles of the `start-stop-cycles` row (default 30); the
                       `start-stop-1000` row (marked slow, out of `make test`) runs 1,000
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from rsup.supervisor.cli.client import Client
from rsup.supervisor.core.spec import load_spec

from tests.conftest import FIXTURES, Rsupd, pid_alive, wait_for, write_spec
from tests.integration.test_access import as_user

CRASH = FIXTURES / "fm_crash.py"
JOB = FIXTURES / "fm_job.py"
FAST = {"restart": {"backoff": {"initial": 0.2, "factor": 1, "max": 0.2}, "max_attempts": 3}}
NOBODY = 65534
MIB = 1024 * 1024
CYCLES = int(os.environ.get("RSUP_FM_CYCLES", "30"))
PROMPT = 2.0  # seconds: an answer slower than this, on a busy 2-core box, is not prompt
FLOOD_ANSWER = 5.0  # a flood is classified in 256 KiB slices between requests; headroom for CI load


# talking to a daemon (in-process: a CLI run per poll costs an interpreter start) -------


def call(daemon: Rsupd, op: str, **fields: Any) -> Any:
    return Client(daemon.socket, 60).call(op, **fields)


def status(daemon: Rsupd, name: str) -> dict[str, Any]:
    return dict(call(daemon, "status", name=name)[0])


def events(daemon: Rsupd, name: str, event: str | None = None) -> list[dict[str, Any]]:
    found = call(daemon, "events", name=name)
    return [e for e in found if event is None or e["event"] == event]


def poll(
    cond: Callable[[], Any], timeout: float, what: str | Callable[[], str], every: float = 0.1
) -> Any:
    """conftest.wait_for at a pace that leaves a busy daemon some CPU."""
    return wait_for(cond, timeout, what, every)


def wait_state(daemon: Rsupd, name: str, *states: str, timeout: float = 60) -> dict[str, Any]:
    def what() -> str:
        job = status(daemon, name)
        return f"job {name} to reach {'/'.join(states)} (it is {job['state']}: {job['reason']})"

    return dict(poll(lambda: (s := status(daemon, name))["state"] in states and s, timeout, what))


def attempt_dir(daemon: Rsupd, name: str, n: int) -> Path:
    return daemon.state.resolve() / "jobs" / name / "attempts" / str(n)


def output(daemon: Rsupd, name: str, n: int) -> bytes:
    return (attempt_dir(daemon, name, n) / "output.log").read_bytes()


def exit_json(daemon: Rsupd, name: str, n: int) -> dict[str, Any]:
    return dict(json.loads((attempt_dir(daemon, name, n) / "exit.json").read_text()))


def survivors(daemon: Rsupd, *names: str) -> list[int]:
    """Living processes of any attempt of the jobs (their shims, and all that inherited
    RSUP_ATTEMPT_DIR, setsid'ed or double-forked or not)."""
    folders = tuple(str(daemon.state.resolve() / "jobs" / name) + os.sep for name in names)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "environ", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.info["cmdline"] or [])
            env = proc.info["environ"] or {}
        except (psutil.Error, TypeError):
            continue
        marked = env.get("RSUP_ATTEMPT_DIR", "").startswith(folders)
        if marked or any(folder in cmdline for folder in folders):
            found.append(proc.pid)
    return found


def assert_none_left(daemon: Rsupd, name: str, pids: Iterable[int] = ()) -> None:
    left = [p for p in pids if pid_alive(p)]
    assert not left, f"processes {left} of job {name} outlived it"
    found = survivors(daemon, name)
    assert not found, f"processes {found} of job {name} outlived it: {describe(found)}"


def describe(pids: list[int]) -> str:
    names = []
    for pid in pids[:5]:
        with contextlib.suppress(psutil.Error):
            names.append(f"{pid} {' '.join(psutil.Process(pid).cmdline())[:80]}")
    return "; ".join(names)


def read_pids(path: Path) -> list[tuple[int, int, str]]:
    """forky.py's records: pid, start time, role."""
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [(int(p), int(t), role) for p, t, role in rows]


def same_alive(pid: int, start: int) -> bool:
    try:
        proc = psutil.Process(pid)
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except (psutil.Error, OSError):
        return False
    started = int(raw[raw.rindex(b")") + 2 :].split()[19])
    return started == start and proc.status() != psutil.STATUS_ZOMBIE


def daemon_fds(daemon: Rsupd) -> int:
    assert daemon.proc is not None
    return len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))


def daemon_children(daemon: Rsupd) -> int:
    assert daemon.proc is not None
    return len(psutil.Process(daemon.proc.pid).children(recursive=True))


def ping_time(daemon: Rsupd) -> float:
    started = time.monotonic()
    call(daemon, "ping")
    return time.monotonic() - started


# the matrix ---------------------------------------------------------------------------


@dataclass
class Ctx:
    """What a row gets: its own folder, the shared daemon, and daemons of its own."""

    tmp: Path
    request: pytest.FixtureRequest
    own: list[Rsupd] = field(default_factory=list)
    jobs: list[tuple[Rsupd, str]] = field(default_factory=list)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def shared(self) -> Rsupd:
        return self.request.getfixturevalue("shared_daemon")  # type: ignore[no-any-return]

    def daemon(self, daemon: Rsupd | None = None) -> Rsupd:
        daemon = daemon or Rsupd(self.tmp / "own")
        daemon.root.mkdir(parents=True, exist_ok=True)
        self.own.append(daemon)
        daemon.start()
        return daemon

    def submit(self, daemon: Rsupd, spec: Path) -> dict[str, Any]:
        """Start the job in `spec`; close() ends it and anything it left, pass or fail."""
        payload = load_spec(spec).model_dump(mode="json")
        self.jobs.append((daemon, payload["name"]))
        return dict(call(daemon, "start", spec=payload))

    def close(self) -> None:
        for cleanup in reversed(self.cleanups):
            with contextlib.suppress(Exception):
                cleanup()
        shared = [name for daemon, name in self.jobs if daemon not in self.own]
        if shared:
            daemon = self.shared()
            with contextlib.suppress(Exception):
                call(daemon, "stop", all=True, force=True)
            kill_all(survivors(daemon, *shared))
        for daemon in self.own:
            daemon.shutdown()


@dataclass(frozen=True)
class Row:
    id: str
    fault: str
    expected: str
    run: Callable[[Ctx], str]
    marks: tuple[Any, ...] = ()


ROWS: dict[str, Row] = {}
MATRIX: list[dict[str, str]] = []
RESULTS = ("ok", "known bug (xfail)", "FAILED", "skipped")


def row(key: str, fault: str, expected: str, *marks: Any) -> Callable[[Callable[[Ctx], str]], Any]:
    def register(run: Callable[[Ctx], str]) -> Callable[[Ctx], str]:
        ROWS[key] = Row(key, fault, expected, run, marks)
        return run

    return register


# job crashes, one row per failure category -------------------------------------------------

CRASHES = {
    # category: (what the job prints and how it ends, the first decision)
    "gpu_memory_fault": ("'Memory access fault by GPU node-1', abort()", "restart"),
    "oom": ("'torch.OutOfMemoryError: HIP out of memory', exit 1", "restart"),
    "host_oom": ("kernel 'Out of memory: Killed process', SIGKILL", "restart"),
    "hip_runtime_init": ("'hipErrorNoBinaryForGpu', abort()", "restart"),
    "dataloader_worker": ("'DataLoader worker (pid(s) N) exited unexpectedly', exit 1", "restart"),
    "nccl_distributed": ("'DistBackendError: NCCL error', exit 1", "restart"),
    "segfault_abort": ("a real SIGSEGV (read of address 0)", "restart"),
    "hang": ("prints a line, then sleeps in silence (hang.timeout 2 s)", "restart"),
    "config_error": ("a real ModuleNotFoundError", "fail"),
    "unknown": ("'ValueError: too many values to unpack' after step 12, exit 1", "restart"),
}


def crash_row(category: str, how: str, action: str) -> None:
    final, attempts = ("failed", 1) if action == "fail" else ("succeeded", 2)
    expected = (
        f"last_fault {category}, decision {action}; {final}, {attempts} attempt(s); "
        "output before the crash kept; 0 left"
    )

    def run(ctx: Ctx) -> str:
        daemon = ctx.shared()
        name = "crash-" + category.replace("_", "-")
        extra: dict[str, Any] = {"device": "cpu", **FAST}
        if category == "hang":
            extra["hang"] = {"timeout": 2, "startup_timeout": 2}
        command = ["python", str(CRASH), category, str(ctx.tmp / "crashed")]
        ctx.submit(daemon, write_spec(ctx.tmp, name, command, **extra))
        job = wait_state(daemon, name, "succeeded", "failed", timeout=90)
        ended = events(daemon, name, "attempt_ended")
        decisions = events(daemon, name, "decision")
        assert (job["state"], job["attempts"]) == (final, attempts), job["reason"]
        assert job["last_fault"] == category, (job["last_fault"], decisions[0]["evidence"])
        assert ended[0]["category"] == category
        assert decisions[0]["action"] == action, decisions[0]["reason"]
        assert len(ended) == attempts, "each attempt is processed exactly once"
        first = output(daemon, name, 1)
        assert b"fm: written before the crash" in first
        for fault in events(daemon, name, "fault_detected"):
            assert fault["text"].encode() in first, "the line that told the fault is kept"
        if attempts == 2:
            assert b"fm: recovered" in output(daemon, name, 2)
        assert_none_left(daemon, name)
        return (
            f"{job['state']}, {job['attempts']} attempt(s); fault {ended[0]['category']}"
            f" -> {decisions[0]['action']} ({decisions[0]['reason'][:60]}); 0 left"
        )

    verb = "hangs" if category == "hang" else "crashes"
    row(f"crash-{category}", f"job {verb}: {how}", expected)(run)


for _category, (_how, _action) in CRASHES.items():
    crash_row(_category, _how, _action)


# the job's process tree ---------------------------------------------------------------------


def wait_output(daemon: Rsupd, name: str, n: int, text: bytes, timeout: float = 30) -> None:
    def seen() -> bool:
        with contextlib.suppress(OSError):
            return text in output(daemon, name, n)
        return False

    poll(seen, timeout, f"{text!r} in the output of {name}")


@row(
    "sigterm-ignored",
    "job ignores SIGTERM; `rsup stop` (stop.grace 1 s)",
    "stopped after the grace (SIGKILL), 1 attempt, 0 left",
)
def sigterm_ignored(ctx: Ctx) -> str:
    daemon = ctx.shared()
    spec = write_spec(
        ctx.tmp,
        "ignores-term",
        ["python", str(FIXTURES / "termjob.py"), "ignore"],
        stop={"grace": 1},
    )
    ctx.submit(daemon, spec)
    wait_output(daemon, "ignores-term", 1, b"ready")
    pid = status(daemon, "ignores-term")["pid"]
    started = time.monotonic()
    job = call(daemon, "stop", name="ignores-term")[0]
    took = time.monotonic() - started
    assert job["state"] == "stopped" and job["attempts"] == 1
    assert took >= 1.0, f"stopped in {took:.2f} s: the grace was not given"
    ended = exit_json(daemon, "ignores-term", 1)
    assert ended["signal_name"] == "SIGKILL", ended
    assert_none_left(daemon, "ignores-term", [pid])
    return f"stopped in {took:.1f} s, job ended by {ended['signal_name']}; 0 left"


def forky_row(ctx: Ctx, name: str, children: int, *flags: str) -> tuple[int, float, list[str]]:
    daemon = ctx.shared()
    pidfile = ctx.tmp / "pids"
    command = ["python", str(FIXTURES / "forky.py"), str(pidfile), "wait", *flags]
    if children:
        command += ["--children", str(children)]
    ctx.submit(daemon, write_spec(ctx.tmp, name, command, stop={"grace": 2}))
    wait_output(daemon, name, 1, b"ready", timeout=60)
    tree = read_pids(pidfile)
    assert len(tree) == 4 + children
    assert all(same_alive(p, t) for p, t, _ in tree)
    started = time.monotonic()
    job = call(daemon, "stop", name=name)[0]
    took = time.monotonic() - started
    assert job["state"] == "stopped" and job["attempts"] == 1
    left = [p for p, t, _ in tree if same_alive(p, t)]
    assert not left, f"{len(left)} of {len(tree)} processes outlived the stop"
    assert_none_left(daemon, name)
    return len(tree), took, sorted({role for _, _, role in tree})


@row(
    "fork-200",
    "job forks 200 children; `rsup stop`",
    "stopped, 1 attempt, none of the 204 processes left",
)
def fork_200(ctx: Ctx) -> str:
    count, took, _ = forky_row(ctx, "forks-200", 200)
    return f"stopped in {took:.1f} s; {count} processes, 0 left"


@row(
    "double-fork-setsid",
    "job double-forks and setsids (children ignore SIGTERM); `rsup stop`",
    "stopped after the grace, 1 attempt, setsid'ed and orphaned processes gone",
)
def double_fork(ctx: Ctx) -> str:
    count, took, roles = forky_row(ctx, "double-fork", 0, "--ignore-term")
    return f"stopped in {took:.1f} s; {count} processes ({', '.join(roles)}), 0 left"


@row(
    "exit-leaving-orphans",
    "job exits 3, leaving setsid'ed and double-forked processes that ignore SIGTERM",
    "failed (max_attempts 1), 1 attempt, orphans killed, 0 left",
)
def exit_leaving_orphans(ctx: Ctx) -> str:
    daemon = ctx.shared()
    pidfile = ctx.tmp / "pids"
    command = ["python", str(FIXTURES / "forky.py"), str(pidfile), "exit", "--ignore-term"]
    spec = write_spec(ctx.tmp, "orphans", command, stop={"grace": 1}, restart={"max_attempts": 1})
    ctx.submit(daemon, spec)
    job = wait_state(daemon, "orphans", "failed", "succeeded", timeout=60)
    assert (job["state"], job["attempts"]) == ("failed", 1), job["reason"]
    tree = read_pids(pidfile)
    assert not [p for p, t, _ in tree if same_alive(p, t)]
    ended = exit_json(daemon, "orphans", 1)
    assert ended["exit_code"] == 3 and ended["killed_descendants"] == 3, ended
    assert_none_left(daemon, "orphans")
    return f"failed, exit 3, {ended['killed_descendants']} orphans killed; 0 left"


# the job's output -----------------------------------------------------------------------------


@row(
    "closes-stdout",
    "job closes fds 1 and 2, runs on, exits 0",
    "succeeded, 1 attempt, output before the close kept, the job ran to its end",
)
def closes_stdout(ctx: Ctx) -> str:
    daemon = ctx.shared()
    done = ctx.tmp / "done"
    ctx.submit(
        daemon, write_spec(ctx.tmp, "closes-out", ["python", str(JOB), "closeout", str(done)])
    )
    job = wait_state(daemon, "closes-out", "succeeded", "failed", "backoff")
    assert (job["state"], job["attempts"]) == ("succeeded", 1), job["reason"]
    assert b"before the close" in output(daemon, "closes-out", 1)
    assert done.read_text() == "ran to the end\n"
    assert_none_left(daemon, "closes-out")
    return "succeeded, 1 attempt; output kept; job ran on after the close"


@row(
    "flood-1gb",
    "job writes 1 GB of output in 4 MiB writes (limits.log_max_bytes 8 MiB)",
    "succeeded; output.log <= 8 MiB with head + drop marker + tail; rsupd answers throughout",
)
def flood(ctx: Ctx) -> str:
    daemon = ctx.shared()
    total = 1024 * MIB
    spec = write_spec(
        ctx.tmp,
        "flood",
        ["python", str(JOB), "flood", str(total)],
        limits={"log_max_bytes": "8MiB"},
    )
    started = time.monotonic()
    ctx.submit(daemon, spec)
    slowest, answers = 0.0, 0
    while True:
        asked = time.monotonic()
        state = status(daemon, "flood")["state"]
        slowest, answers = max(slowest, time.monotonic() - asked), answers + 1
        if state in ("succeeded", "failed", "backoff"):
            break
        assert time.monotonic() - started < 180, "the flood did not end in 180 s"
        time.sleep(0.2)
    took = time.monotonic() - started
    job = status(daemon, "flood")
    assert (job["state"], job["attempts"]) == ("succeeded", 1), job["reason"]
    log = output(daemon, "flood", 1)
    assert len(log) <= 8 * MIB, len(log)
    assert log.startswith(b"FM-HEAD first line of the flood\n")
    assert b"[rsup: dropped " in log
    assert log.endswith(f"FM-TAIL sent {total} bytes\n".encode())
    dropped = exit_json(daemon, "flood", 1)["log_dropped_bytes"]
    assert dropped >= total - 8 * MIB, dropped
    assert slowest < FLOOD_ANSWER, f"rsupd took {slowest:.2f} s to answer during the flood"
    assert_none_left(daemon, "flood")
    return (
        f"succeeded in {took:.1f} s; log {len(log) / MIB:.1f} MiB, {dropped / MIB:.0f} MiB "
        f"dropped; {answers} status calls, slowest {slowest * 1000:.0f} ms"
    )


@row(
    "line-1mb",
    "job writes a single 1 MiB line",
    "succeeded, the line kept whole, lines around it kept",
)
def big_line(ctx: Ctx) -> str:
    daemon = ctx.shared()
    size = MIB
    ctx.submit(daemon, write_spec(ctx.tmp, "big-line", ["python", str(JOB), "bigline", str(size)]))
    job = wait_state(daemon, "big-line", "succeeded", "failed", "backoff")
    assert (job["state"], job["attempts"]) == ("succeeded", 1), job["reason"]
    log = output(daemon, "big-line", 1)
    expected = b"before the big line\n" + b"L" * size + b"\nafter the big line\n"
    assert log == expected, f"{len(log)} bytes, not the {len(expected)} written"
    tail = call(daemon, "logs", name="big-line", lines=1)
    assert tail["data"] == "after the big line\n"
    assert_none_left(daemon, "big-line")
    return "succeeded; 1 MiB line kept byte for byte"


@row(
    "binary-output",
    "job writes 1 MiB of random bytes",
    "succeeded, the bytes kept exactly, `rsup logs` still works",
)
def binary(ctx: Ctx) -> str:
    daemon = ctx.shared()
    kept = ctx.tmp / "written.bin"
    command = ["python", str(JOB), "binary", str(kept), str(MIB)]
    ctx.submit(daemon, write_spec(ctx.tmp, "binary", command))
    job = wait_state(daemon, "binary", "succeeded", "failed", "backoff")
    assert (job["state"], job["attempts"]) == ("succeeded", 1), job["reason"]
    assert output(daemon, "binary", 1) == kept.read_bytes() + b"\nafter the binary\n"
    logs = daemon.cli("logs", "binary", "-n", "1")
    assert logs.returncode == 0 and "after the binary" in logs.stdout, logs.stderr
    assert_none_left(daemon, "binary")
    return f"succeeded ({job['last_fault'] or 'no fault'}); bytes kept exactly; logs exit 0"


# rsup's own processes die -------------------------------------------------------------------


@row(
    "shim-sigkill",
    "the shim is SIGKILLed (the job has a child, a setsid'ed child and a double-forked one)",
    "the whole tree of attempt 1 killed, attempt 1 processed once, attempt 2 runs; 0 left",
)
def shim_killed(ctx: Ctx) -> str:
    daemon = ctx.shared()
    pidfile = ctx.tmp / "pids"
    command = ["python", str(FIXTURES / "forky.py"), str(pidfile), "wait"]
    spec = write_spec(ctx.tmp, "shim-killed", command, stop={"grace": 1}, **FAST)
    ctx.submit(daemon, spec)
    wait_output(daemon, "shim-killed", 1, b"ready")
    tree = read_pids(pidfile)
    shim = events(daemon, "shim-killed", "attempt_started")[0]["shim_pid"]
    os.kill(shim, signal.SIGKILL)
    poll(lambda: events(daemon, "shim-killed", "attempt_started")[1:], 30, "attempt 2")
    poll(lambda: status(daemon, "shim-killed")["pid"], 30, "attempt 2 to run")
    ended = events(daemon, "shim-killed", "attempt_ended")
    assert [e["attempt"] for e in ended] == [1], "attempt 1 is processed exactly once"
    killed = events(daemon, "shim-killed", "tree_killed")
    left = [f"{p} ({role})" for p, t, role in tree if same_alive(p, t)]
    assert not left, f"attempt 1's processes outlived its shim: {', '.join(left)}"
    call(daemon, "stop", name="shim-killed")
    assert_none_left(daemon, "shim-killed")
    return (
        f"tree_killed ({killed[0]['processes'] if killed else 0} processes), "
        f"attempt 1 ended once as {ended[0]['category']}, attempt 2 started; 0 left"
    )


def hold_job(ctx: Ctx, name: str, **extra: Any) -> tuple[Path, Path]:
    pidfile, release = ctx.tmp / "pids", ctx.tmp / "release"
    command = ["python", str(JOB), "hold", str(pidfile), str(release)]
    return write_spec(ctx.tmp, name, command, **extra), release


def ticks_in_order(log: bytes) -> int:
    numbers = [int(line.split()[1]) for line in log.splitlines() if line.startswith(b"tick ")]
    assert numbers == list(range(len(numbers))), "a tick line is missing or repeated"
    return len(numbers)


@row(
    "rsupd-kill-attempt",
    "rsupd is SIGKILLed while an attempt runs, and started again",
    "the job runs on and is re-adopted (same pid, job_readopted event), ends once; no line lost",
)
def rsupd_killed_mid_attempt(ctx: Ctx) -> str:
    daemon = ctx.daemon()
    spec, release = hold_job(ctx, "held")
    ctx.submit(daemon, spec)
    job = poll(lambda: (s := status(daemon, "held"))["pid"] and s, 30, "the job's pid")
    daemon.kill(signal.SIGKILL)
    before = len(output(daemon, "held", 1))
    poll(lambda: len(output(daemon, "held", 1)) > before + 40, 10, "output while rsupd is down")
    assert pid_alive(job["pid"]), "the job must outlive rsupd"
    daemon.start()
    again = status(daemon, "held")
    assert (again["state"], again["pid"], again["attempts"]) == ("running", job["pid"], 1)
    release.write_text("go")
    done = wait_state(daemon, "held", "succeeded", "failed", "backoff")
    assert (done["state"], done["attempts"]) == ("succeeded", 1), done["reason"]
    assert len(events(daemon, "held", "attempt_ended")) == 1
    log = output(daemon, "held", 1)
    ticks = ticks_in_order(log)
    assert log.endswith(b"released\n")
    assert_none_left(daemon, "held", [job["pid"]])
    readopted = events(daemon, "held", "job_readopted")
    assert readopted, "no job_readopted event (DESIGN.md lists it among the event names)"
    return f"re-adopted pid {job['pid']}, succeeded, 1 attempt ended once; {ticks} ticks, none lost"


@row(
    "rsupd-kill-backoff",
    "rsupd is SIGKILLed during a 4 s backoff, and started again at once",
    "the restart comes when the stored backoff ends, exactly one new attempt; succeeded",
)
def rsupd_killed_mid_backoff(ctx: Ctx) -> str:
    daemon = ctx.daemon()
    command = ["python", str(JOB), "failonce", str(ctx.tmp / "failed")]
    backoff = {"initial": 4, "factor": 1, "max": 4}
    spec = write_spec(ctx.tmp, "backs-off", command, restart={"backoff": backoff})
    ctx.submit(daemon, spec)
    job = wait_state(daemon, "backs-off", "backoff")
    due = float(job["next_start_at"])
    daemon.kill(signal.SIGKILL)
    killed_at = time.time()
    daemon.start()
    done = wait_state(daemon, "backs-off", "succeeded", "failed")
    assert (done["state"], done["attempts"]) == ("succeeded", 2), done["reason"]
    starts = events(daemon, "backs-off", "attempt_started")
    assert len(starts) == 2, "exactly one new attempt"
    early = due - starts[1]["ts"]
    assert early < 0.1, f"attempt 2 started {early:.2f} s before the backoff ended"
    late = starts[1]["ts"] - due
    assert late < 5, f"attempt 2 started {late:.2f} s after the backoff ended"
    assert len(events(daemon, "backs-off", "attempt_ended")) == 2
    assert_none_left(daemon, "backs-off")
    return (
        f"killed {due - killed_at:.1f} s before the restart was due; attempt 2 started "
        f"{late:+.2f} s from it; succeeded, 2 attempts"
    )


def probes_of(daemon: Rsupd) -> list[int]:
    assert daemon.proc is not None
    found = []
    for child in psutil.Process(daemon.proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "rsup.workers.probe" in child.cmdline():
                found.append(child.pid)
    return found


@row(
    "rsupd-kill-probe",
    "rsupd is SIGKILLed while `status` says probing and the probe hangs in a stage "
    "(device cpu, an extra stage that never returns the first time)",
    "after the restart the probe runs again and the job proceeds: succeeded, 1 attempt, "
    "1 verdict; the hung probe of the killed rsupd is gone",
)
def rsupd_killed_mid_probe(ctx: Ctx) -> str:
    daemon = ctx.daemon()
    count = ctx.tmp / "probe-runs"
    spec = write_spec(
        ctx.tmp,
        "probed",
        ["python", "-c", "print('after the probe', flush=True)"],
        device="cpu",
        env={"FM_PROBE_COUNT": str(count)},
        probe={"extra_stages": [str(FIXTURES / "fm_probe_stage.py")]},
    )
    ctx.submit(daemon, spec)
    poll(lambda: count.exists(), 120, "the probe to reach the hanging stage")
    assert status(daemon, "probed")["state"] == "probing"
    hung = probes_of(daemon)
    ctx.cleanups.append(lambda: kill_all(hung))
    daemon.kill(signal.SIGKILL)
    daemon.start()
    done = wait_state(daemon, "probed", "succeeded", "failed", "backoff", timeout=180)
    assert (done["state"], done["attempts"]) == ("succeeded", 1), done["reason"]
    verdicts = events(daemon, "probed", "probe_verdict")
    assert len(verdicts) == 1 and verdicts[0]["verdict"] == "cpu", verdicts
    runs = count.read_text().split()
    assert len(runs) == 2, f"the stage ran {len(runs)} times, not once more after the restart"
    assert b"after the probe" in output(daemon, "probed", 1)
    left = [p for p in hung if pid_alive(p)]
    assert not left, f"the hung probe {left} of the killed rsupd is still running"
    return "probe ran again; verdict cpu; succeeded, 1 attempt; 0 left"


def kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# state on disk ------------------------------------------------------------------------------


class NamespacedRsupd(Rsupd):
    """rsupd in a private mount namespace whose state dir is a small tmpfs."""

    def __init__(self, root: Path, size: str) -> None:
        super().__init__(root)
        self.size = size

    def start(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        script = 'mount -t tmpfs -o size="$1" fm-state "$2" && shift 2 && exec "$@"'
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
        argv += [self.size, str(self.state), sys.executable, "-m", "rsup.supervisor.daemon"]
        argv += ["--state-dir", str(self.state), "--socket", str(self.socket)]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_for(lambda: self.socket.exists() or self.proc.poll() is not None, 30, "rsupd")
        if self.proc.poll() is not None:
            pytest.skip(f"no tmpfs in a private mount namespace here: {self.log.read_text()}")
        wait_for(lambda: self.cli("status", "--json").returncode == 0, 15, "rsupd to answer")

    def inside(self, path: Path) -> Path:
        """`path` as rsupd sees it (its mount namespace, through /proc/PID/root)."""
        assert self.proc is not None
        return Path(f"/proc/{self.proc.pid}/root{path}")

    def sql(self, query: str) -> Any:
        """Run `query` on rsupd's state.db from inside its mount namespace (SQLite follows
        the /proc/PID/root link back to ours, where the file is not)."""
        assert self.proc is not None
        code = (
            "import json, sqlite3, sys; db = sqlite3.connect(sys.argv[1]);"
            "db.execute('SELECT count(*) FROM jobs').fetchall();"
            "print(json.dumps(db.execute(sys.argv[2]).fetchall()))"
        )
        argv = ["nsenter", "--target", str(self.proc.pid), "--mount", sys.executable, "-c"]
        argv += [code, str(self.state / "state.db"), query]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


# Waits for $5, floods, says so in $6, waits for $7, exits 0; the second run just exits 0.
FILL_DISK = (
    'if [ -e "$1" ]; then echo second run; exit 0; fi; : > "$1"; '
    'until [ -e "$5" ]; do sleep 0.05; done; "$2" "$3" flood "$4"; : > "$6"; '
    'until [ -e "$7" ]; do sleep 0.05; done'
)


@row(
    "disk-full",
    "the state dir is a 4 MiB tmpfs (1 MiB of it ballast); the job fills it with output, "
    "then exits 0 while state.db cannot grow; then the ballast is deleted",
    "rsupd answers throughout and logs why; head of the output kept, the rest counted as "
    "dropped; once space is back the attempt is processed once: succeeded, 1 attempt; "
    "state.db intact",
)
def disk_full(ctx: Ctx) -> str:
    if not (shutil.which("unshare") and shutil.which("nsenter")) or os.geteuid() != 0:
        pytest.skip("needs root, unshare(1) and nsenter(1) for a tmpfs in a private namespace")
    daemon = NamespacedRsupd(ctx.tmp / "own", "4m")
    ctx.daemon(daemon)
    ballast = daemon.inside(daemon.state / "ballast")
    ballast.write_bytes(b"\0" * MIB)
    go, flooded, release = (ctx.tmp / n for n in ("go", "flooded", "release"))
    command = ["/bin/sh", "-c", FILL_DISK, "sh", str(ctx.tmp / "ran"), sys.executable]
    command += [str(JOB), str(8 * MIB), str(go), str(flooded), str(release)]
    ctx.submit(daemon, write_spec(ctx.tmp, "fills-disk", command, **FAST))
    poll(lambda: status(daemon, "fills-disk")["pid"], 30, "the job to run")
    daemon.sql("PRAGMA wal_checkpoint(TRUNCATE)")  # so that rsupd's next write must grow it
    go.touch()
    poll(flooded.exists, 60, "the flood to fill the disk")
    release.touch()
    time.sleep(1.5)  # rsupd takes the attempt's end in, or fails to, on a full disk
    full = status(daemon, "fills-disk")
    assert call(daemon, "ping"), "rsupd answers on a full disk"
    ballast.unlink()
    job = wait_state(daemon, "fills-disk", "succeeded", "failed", timeout=20)
    adir = daemon.inside(attempt_dir(daemon, "fills-disk", 1))
    log = (adir / "output.log").read_bytes()
    assert log.startswith(b"FM-HEAD"), "the output written before the disk filled is kept"
    assert "database or disk is full" in daemon.log.read_text(), "rsupd's log says why"
    integrity = daemon.sql("PRAGMA integrity_check")[0][0]
    assert integrity == "ok", integrity
    assert (job["state"], job["attempts"]) == ("succeeded", 1), (job["state"], job["reason"])
    ended = events(daemon, "fills-disk", "attempt_ended")
    assert len(ended) == 1, "attempt 1 is processed exactly once"
    dropped = ended[0]["exit"]["log_dropped_bytes"]
    assert dropped > 0, "the lost output is counted where `rsup events` shows it"
    assert_none_left(daemon, "fills-disk")
    return (
        f"while full: {full['state']} ({full['reason']}); space back: succeeded, 1 attempt; "
        f"log {len(log) / MIB:.1f} MiB kept, {dropped / MIB:.1f} MiB dropped; integrity ok"
    )


@row(
    "state-db-garbage",
    "state.db holds garbage when rsupd starts",
    "rsupd exits 1 naming the file and how to recover; the file is left byte for byte",
)
def state_db_garbage(ctx: Ctx) -> str:
    state = ctx.tmp / "state"
    state.mkdir()
    db = state / "state.db"
    garbage = b"this is not an SQLite database\n" + random.Random(9).randbytes(64 * 1024)
    db.write_bytes(garbage)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rsup.supervisor.daemon",
            "--state-dir",
            str(state),
            "--socket",
            str(ctx.tmp / "rsupd.sock"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, (result.returncode, result.stderr[-500:])
    message = result.stderr.strip().splitlines()[-1]
    assert str(db.resolve()) in message, message
    assert "move it aside" in message, message
    assert hashlib.sha256(db.read_bytes()).digest() == hashlib.sha256(garbage).digest()
    assert not (ctx.tmp / "rsupd.sock").exists(), "a refusing rsupd must not listen"
    assert os.listdir(state) == ["state.db"], "nothing written beside it (no -wal, no -shm)"
    return f"exit 1: {message[:110]}..."


# load ---------------------------------------------------------------------------------------


@row(
    "jobs-50",
    "50 jobs submitted at once",
    "all 50 succeeded, each exactly 1 attempt and its own output",
)
def fifty_jobs(ctx: Ctx) -> str:
    daemon = ctx.shared()
    names = [f"fifty-{i:02d}" for i in range(50)]
    started = time.monotonic()
    for name in names:
        command = ["/bin/sh", "-c", 'echo "job $RSUP_JOB done"']
        ctx.submit(daemon, write_spec(ctx.tmp, name, command))

    def all_done() -> list[dict[str, Any]] | None:
        rows = [j for j in call(daemon, "status") if j["name"] in names]
        return rows if all(j["state"] in ("succeeded", "failed") for j in rows) else None

    rows = poll(all_done, 180, "50 jobs to end")
    took = time.monotonic() - started
    assert len(rows) == 50
    bad = [(j["name"], j["state"], j["attempts"]) for j in rows if j["state"] != "succeeded"]
    assert not bad, bad
    assert all(j["attempts"] == 1 for j in rows)
    for name in names:
        assert output(daemon, name, 1) == f"job {name} done\n".encode()
        assert len(events(daemon, name, "attempt_started")) == 1
    return f"50 succeeded in {took:.1f} s, 1 attempt each"


def cycles(ctx: Ctx, count: int) -> str:
    daemon = ctx.daemon()
    spec = load_spec(write_spec(ctx.tmp, "cycler", ["sleep", "1000"])).model_dump(mode="json")

    def cycle() -> None:
        call(daemon, "start", spec=spec)
        poll(lambda: status(daemon, "cycler")["pid"], 30, "the job to run", every=0.01)
        job = call(daemon, "stop", name="cycler")[0]
        assert job["state"] == "stopped", job
        call(daemon, "remove", name="cycler")

    cycle()  # the first one creates what lives as long as rsupd (inotify thread, ...)
    fds, children = daemon_fds(daemon), daemon_children(daemon)
    started = time.monotonic()
    for _ in range(count):
        cycle()
    took = time.monotonic() - started
    fds_after, children_after = daemon_fds(daemon), daemon_children(daemon)
    assert abs(fds_after - fds) <= 2, f"rsupd's open fds went from {fds} to {fds_after}"
    assert abs(children_after - children) <= 2, (children, children_after)
    assert_none_left(daemon, "cycler")
    return (
        f"{count} cycles in {took:.0f} s ({took / count * 1000:.0f} ms each); fds {fds} -> "
        f"{fds_after}, children {children} -> {children_after}"
    )


@row(
    "start-stop-cycles",
    f"{CYCLES} cycles: start a sleeping job, stop it, remove it (RSUP_FM_CYCLES)",
    "every stop complete; rsupd's fds and children the same before and after (within 2)",
)
def start_stop_cycles(ctx: Ctx) -> str:
    return cycles(ctx, CYCLES)


@row(
    "start-stop-1000",
    "1,000 cycles: start a sleeping job, stop it, remove it",
    "every stop complete; rsupd's fds and children the same before and after (within 2)",
    pytest.mark.slow,
)
def start_stop_1000(ctx: Ctx) -> str:
    return cycles(ctx, 1000)


# the socket ---------------------------------------------------------------------------------


def pings_while(daemon: Rsupd, busy: Callable[[], bool], least: int = 5) -> list[float]:
    """Ping the daemon while `busy()` holds (at least `least` times)."""
    times: list[float] = []
    while busy() or len(times) < least:
        times.append(ping_time(daemon))
        time.sleep(0.05)
    return times


def unix(daemon: Rsupd, timeout: float = 30) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(str(daemon.socket))
    return sock


@row(
    "client-garbage",
    "20 clients send random bytes and a newline",
    "each gets an error reply (code 2); others are answered promptly; fds back to before",
)
def garbage_clients(ctx: Ctx) -> str:
    daemon = ctx.shared()
    fds = daemon_fds(daemon)
    rng = random.Random(1)
    codes = []
    for _ in range(20):
        data = bytes(b for b in rng.randbytes(4096) if b != 0x0A)
        with unix(daemon) as sock, sock.makefile("rwb") as stream:
            stream.write(data + b"\n")
            stream.flush()
            reply = json.loads(stream.readline())
        assert reply["ok"] is False, reply
        codes.append(reply["code"])
    times = pings_while(daemon, lambda: False)
    assert set(codes) == {2}, codes
    assert max(times) < PROMPT, times
    poll(lambda: abs(daemon_fds(daemon) - fds) <= 2, 10, "rsupd's fds to settle")
    return f"20 error replies (code 2); ping {max(times) * 1000:.0f} ms at worst"


@row(
    "client-huge",
    "a client sends a 5 MB line",
    "the connection is dropped unanswered; others answered promptly meanwhile; rsupd lives",
)
def huge_client(ctx: Ctx) -> str:
    daemon = ctx.shared()
    result: dict[str, Any] = {}

    def send() -> None:
        with unix(daemon) as sock:
            try:
                sock.sendall(b'{"op": "ping", "pad": "' + b"x" * (5 * 1000 * 1000) + b'"}\n')
                result["reply"] = sock.recv(4096)
            except OSError as exc:
                result["error"] = type(exc).__name__

    sender = threading.Thread(target=send)
    sender.start()
    times = pings_while(daemon, sender.is_alive)
    sender.join()
    assert result.get("reply", b"") == b"", f"a 5 MB request was answered: {result}"
    assert max(times) < PROMPT, times
    assert daemon.proc is not None and daemon.proc.poll() is None
    how = result.get("error") or "closed"
    return f"dropped ({how}); {len(times)} pings meanwhile, worst {max(times) * 1000:.0f} ms"


@row(
    "client-slow",
    "20 clients connect and send nothing; one sends a byte a second",
    "others are answered promptly meanwhile",
)
def slow_clients(ctx: Ctx) -> str:
    daemon = ctx.shared()
    idle = [unix(daemon) for _ in range(20)]
    ctx.cleanups.extend(s.close for s in idle)
    trickle = unix(daemon)
    ctx.cleanups.append(trickle.close)
    request = b'{"op": "ping"}\n'
    times: list[float] = []
    for byte in request[:4]:
        trickle.send(bytes([byte]))
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            times.append(ping_time(daemon))
            time.sleep(0.1)
    trickle.send(request[4:])
    reply = json.loads(trickle.makefile("rb").readline())
    assert reply["ok"], reply
    assert max(times) < PROMPT, times
    return (
        f"{len(times)} pings over 4 s, worst {max(times) * 1000:.0f} ms; "
        "the trickled request was answered too"
    )


# access -------------------------------------------------------------------------------------


@row(
    "foreign-uid",
    "uid 65534 (nobody) asks for a root job: status, logs, events, stop, remove, start, inject",
    "every request refused; the job is not listed to them and runs on",
)
def foreign_uid(ctx: Ctx) -> str:
    if os.geteuid() != 0:
        pytest.skip("needs root to take another uid")
    daemon = ctx.shared()
    ctx.submit(daemon, write_spec(ctx.tmp, "roots", ["sleep", "1000"], stop={"grace": 1}))
    job = poll(lambda: (s := status(daemon, "roots"))["pid"] and s, 30, "the job's pid")
    refused = []
    for op in ("status", "logs", "events", "stop", "remove", "start", "inject"):
        extra = {"kind": "kill"} if op == "inject" else {}
        reply = as_user(NOBODY, daemon, op, name="roots", **extra)
        assert not reply["ok"] and "belongs to another user" in reply["error"], (op, reply)
        refused.append(op)
    listed = as_user(NOBODY, daemon, "status")
    assert listed["ok"] and "roots" not in [j["name"] for j in listed["result"]]
    again = status(daemon, "roots")
    assert (again["state"], again["pid"]) == ("running", job["pid"])
    call(daemon, "stop", name="roots")
    assert_none_left(daemon, "roots")
    return f"refused: {', '.join(refused)}; not listed; the job ran on"


# the test and the table ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_daemon() -> Iterator[Rsupd]:
    """One daemon for the rows that do not kill it, reachable by other uids."""
    root = Path(tempfile.mkdtemp(prefix="rsup-fm-"))
    root.chmod(0o755)
    daemon = Rsupd(root)
    daemon.start()
    daemon.socket.chmod(0o666)
    try:
        yield daemon
    finally:
        daemon.shutdown()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def matrix_table(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print the rows that ran as one table once the module is done."""
    yield
    if not MATRIX:
        return
    text = table(MATRIX)
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print("\n" + text, flush=True)


def table(rows: list[dict[str, str]]) -> str:
    heads = ["row", "fault", "expected", "result", "observed", "s"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in rows:
        cells = [r[h].replace("|", "/").replace("\n", " ") for h in heads]
        lines.append("| " + " | ".join(cells) + " |")
    counts = {result: sum(r["result"] == result for r in rows) for result in RESULTS}
    said = ", ".join(f"{n} {result}" for result, n in counts.items() if n)
    lines.append(f"\nfault matrix, {len(rows)} rows: {said}")
    return "\n".join(lines)


def _params() -> list[Any]:
    return [pytest.param(r.id, marks=list(r.marks), id=r.id) for r in ROWS.values()]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("row_id", _params())
def test_fault(row_id: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    spec = ROWS[row_id]
    ctx = Ctx(tmp_path, request)
    started = time.monotonic()
    result, observed = "FAILED", ""
    try:
        observed = spec.run(ctx)
        result = "ok"
    except pytest.skip.Exception as exc:
        result, observed = "skipped", str(exc.msg)
        raise
    except BaseException as exc:
        text = str(exc).strip().splitlines()
        observed = f"{type(exc).__name__}: {text[0] if text else ''}"[:200]
        if request.node.get_closest_marker("xfail"):
            result = "known bug (xfail)"
        raise
    finally:
        ctx.close()
        MATRIX.append(
            {
                "row": spec.id,
                "fault": spec.fault,
                "expected": spec.expected,
                "result": result,
                "observed": observed,
                "s": f"{time.monotonic() - started:.1f}",
            }
        )
