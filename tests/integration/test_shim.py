"""The shim against real processes: exit records, output, stops, process trees, log bound."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rsup.workers.constants import (
    EXIT_JSON,
    OUTPUT_LOG,
    ROTATION_JSON,
    SHIM_EXIT_BAD_ARGS,
    SHIM_EXIT_OK,
    SHIM_EXIT_SPAWN_FAILED,
    SHIM_JSON,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PY = sys.executable
MARKER = re.compile(rb"\n\[rsup: dropped (\d+) bytes of output here\]\n")


def wait_for(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll `check` until it holds; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def start_time(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(raw[raw.rindex(b")") + 2 :].split()[19])


def exists(pid: int, started: int) -> bool:
    """True while `pid` is still that process, zombie included (it still has a /proc entry)."""
    return start_time(pid) == started


def read_pids(path: Path) -> list[tuple[int, int, str]]:
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [(int(pid), int(started), role) for pid, started, role in rows]


class Attempt:
    """One shim run in its own attempt folder, started the way the daemon starts it."""

    def __init__(
        self, root: Path, argv: list[str], grace: float, max_log: int, stop_signal: str
    ) -> None:
        self.dir = root / "attempt"
        self.dir.mkdir(exist_ok=True)  # a second shim on one attempt appends to it
        self.pidfile = root / "job.pids"
        cmd = [
            PY, "-m", "rsup.workers.shim", "--attempt-dir", str(self.dir),
            "--grace", str(grace), "--stop-signal", stop_signal,
            "--max-log-bytes", str(max_log), "--cwd", str(root), "--", *argv,
        ]  # fmt: skip
        with open(root / "shim.stderr", "wb") as err:
            self.proc = subprocess.Popen(
                cmd, start_new_session=True, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        self.stderr = root / "shim.stderr"

    def log(self) -> bytes:
        path = self.dir / OUTPUT_LOG
        return path.read_bytes() if path.exists() else b""

    def json(self, name: str) -> dict[str, Any]:
        data = json.loads((self.dir / name).read_text())
        assert isinstance(data, dict)
        return data

    def wait_output(self, needle: bytes, timeout: float = 20.0) -> None:
        wait_for(f"{needle!r} in output.log", lambda: needle in self.log(), timeout)

    def finish(self, timeout: float = 30.0) -> dict[str, Any]:
        """Wait for exit.json and the shim's own exit; return exit.json."""
        wait_for("exit.json", (self.dir / EXIT_JSON).exists, timeout)
        record = self.json(EXIT_JSON)
        self.proc.wait(timeout)
        assert self.proc.returncode == SHIM_EXIT_OK, self.stderr.read_text()
        return record

    def job_pids(self) -> list[tuple[int, int, str]]:
        return read_pids(self.pidfile)

    def cleanup(self) -> None:
        """Kill whatever this attempt left, so no test leaks a process."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        found = list(self.job_pids())
        if (self.dir / SHIM_JSON).exists():
            shim = self.json(SHIM_JSON)
            found.append((shim["job_pid"], shim["job_start_time"], "job"))
        for pid, started, _ in found:
            if exists(pid, started):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def attempt(tmp_path: Path) -> Iterator[Callable[..., Attempt]]:
    started: list[Attempt] = []

    def start(
        argv: list[str], grace: float = 5.0, max_log: int = 1 << 20, stop_signal: str = "SIGTERM"
    ) -> Attempt:
        run = Attempt(tmp_path, argv, grace, max_log, stop_signal)
        started.append(run)
        return run

    yield start
    for run in started:
        run.cleanup()


def forky(run_root: Path, mode: str, *extra: str) -> list[str]:
    return [PY, str(FIXTURES / "forky.py"), str(run_root / "job.pids"), mode, *extra]


def assert_all_gone(pids: list[tuple[int, int, str]]) -> None:
    left = [(pid, role) for pid, started, role in pids if exists(pid, started)]
    assert not left, f"processes survived the attempt: {left}"


# Exit records and output ---------------------------------------------------------------


def test_exit_code_and_both_streams_land_in_output_log(attempt: Callable[..., Attempt]) -> None:
    code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(3)"
    run = attempt([PY, "-c", code])
    record = run.finish()
    assert record["exit_code"] == 3
    assert record["signal"] is None and record["signal_name"] is None
    assert not record["stop_requested"] and not record["forced"]
    assert record["spawn_error"] is None and record["survivors"] == []
    assert record["killed_descendants"] == 0 and record["log_dropped_bytes"] == 0
    assert record["ended"] >= record["started"] and record["duration"] >= 0
    assert set(record["rusage"]) == {"utime", "stime", "maxrss_kb"}
    assert b"to stdout\n" in run.log() and b"to stderr\n" in run.log()


def test_death_by_signal_is_recorded(attempt: Callable[..., Attempt]) -> None:
    run = attempt([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGUSR2)"])
    record = run.finish()
    assert record["exit_code"] is None
    assert record["signal"] == signal.SIGUSR2 and record["signal_name"] == "SIGUSR2"


def test_shim_json_names_shim_and_job(attempt: Callable[..., Attempt], tmp_path: Path) -> None:
    run = attempt([PY, str(FIXTURES / "termjob.py"), "trap"])
    run.wait_output(b"ready")
    shim = run.json(SHIM_JSON)
    assert shim["shim_pid"] == run.proc.pid
    assert shim["shim_start_time"] == start_time(run.proc.pid)
    assert shim["job_start_time"] == start_time(shim["job_pid"])
    assert shim["argv"] == [PY, str(FIXTURES / "termjob.py"), "trap"]
    assert shim["cwd"] == str(tmp_path)
    assert abs(shim["started"] - time.time()) < 60
    os.kill(run.proc.pid, signal.SIGTERM)
    assert run.finish()["job_pid"] == shim["job_pid"]


def test_job_that_closes_its_output_is_still_waited_for(
    attempt: Callable[..., Attempt], tmp_path: Path
) -> None:
    go = tmp_path / "go"
    code = (
        "import os, sys, time\n"
        "print('closing', flush=True); os.close(1); os.close(2)\n"
        "open('closed', 'w').close()\n"
        "while not os.path.exists('go'): time.sleep(0.01)\n"
        "sys.exit(7)\n"
    )
    run = attempt([PY, "-c", code])
    wait_for("the job to close its stdout", (tmp_path / "closed").exists)
    assert run.proc.poll() is None and not (run.dir / EXIT_JSON).exists()
    go.touch()
    assert run.finish()["exit_code"] == 7
    assert b"closing\n" in run.log()


# Spawn failures and bad arguments ---------------------------------------------------------


def test_missing_program_is_a_spawn_failure(attempt: Callable[..., Attempt]) -> None:
    run = attempt(["rsup-no-such-program", "--flag"])
    wait_for("the shim to exit", lambda: run.proc.poll() is not None)
    assert run.proc.returncode == SHIM_EXIT_SPAWN_FAILED
    record = run.json(EXIT_JSON)
    assert record["exit_code"] == 127 and record["job_pid"] is None
    assert "No such file or directory" in record["spawn_error"]
    assert b"rsup: cannot start job: [Errno 2] No such file or directory" in run.log()
    assert not (run.dir / SHIM_JSON).exists()


def test_unexecutable_program_is_a_spawn_failure(
    attempt: Callable[..., Attempt], tmp_path: Path
) -> None:
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\necho never\n")
    script.chmod(0o644)
    run = attempt([str(script)])
    wait_for("the shim to exit", lambda: run.proc.poll() is not None)
    assert run.proc.returncode == SHIM_EXIT_SPAWN_FAILED
    assert run.json(EXIT_JSON)["exit_code"] == 126
    assert b"Permission denied" in run.log()


@pytest.mark.parametrize(
    "args",
    [
        ["--attempt-dir", "{tmp}", "python3"],  # no "--"
        ["--attempt-dir", "{tmp}", "--"],  # no command
        ["--attempt-dir", "{tmp}/missing", "--", "true"],
        ["--attempt-dir", "{tmp}", "--stop-signal", "SIGNOPE", "--", "true"],
        ["--attempt-dir", "{tmp}", "--max-log-bytes", "10", "--", "true"],
    ],
)
def test_bad_arguments_exit_64(args: list[str], tmp_path: Path) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = subprocess.run(
        [PY, "-m", "rsup.workers.shim", *argv], capture_output=True, timeout=30, check=False
    )
    assert done.returncode == SHIM_EXIT_BAD_ARGS, done.stderr
    assert not (tmp_path / EXIT_JSON).exists()


# Stops -------------------------------------------------------------------------------------


def test_stop_lets_a_trapping_job_exit_cleanly(attempt: Callable[..., Attempt]) -> None:
    run = attempt([PY, str(FIXTURES / "termjob.py"), "trap"], grace=30)
    run.wait_output(b"ready")
    job = run.json(SHIM_JSON)
    os.kill(run.proc.pid, signal.SIGTERM)
    record = run.finish()
    assert record["exit_code"] == 0 and record["signal"] is None
    assert record["stop_requested"] and not record["forced"]
    assert record["duration"] < 20  # it did not wait out the grace
    assert b"got TERM, exiting cleanly" in run.log()
    assert_all_gone([(job["job_pid"], job["job_start_time"], "job")])


def test_job_ignoring_stop_signal_is_killed_after_grace(attempt: Callable[..., Attempt]) -> None:
    run = attempt([PY, str(FIXTURES / "termjob.py"), "ignore"], grace=1)
    run.wait_output(b"ready")
    sent = time.monotonic()
    os.kill(run.proc.pid, signal.SIGTERM)
    record = run.finish()
    assert time.monotonic() - sent >= 1.0
    assert record["signal"] == signal.SIGKILL and record["signal_name"] == "SIGKILL"
    assert record["stop_requested"] and record["forced"]
    assert b"outlived the grace" in run.log()


def test_stop_signal_is_configurable(attempt: Callable[..., Attempt]) -> None:
    code = (
        "import signal\n"
        "try:\n"
        "    print('ready', flush=True); signal.pause()\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True); raise SystemExit(5)\n"
    )
    run = attempt([PY, "-c", code], grace=30, stop_signal="INT")
    run.wait_output(b"ready")
    os.kill(run.proc.pid, signal.SIGHUP)
    record = run.finish()
    assert record["exit_code"] == 5 and record["stop_requested"]
    assert b"sent SIGINT" in run.log() and b"interrupted" in run.log()


def test_stopped_job_is_continued_so_it_can_exit(attempt: Callable[..., Attempt]) -> None:
    run = attempt([PY, str(FIXTURES / "termjob.py"), "trap"], grace=30)
    run.wait_output(b"ready")
    job_pid = run.json(SHIM_JSON)["job_pid"]
    os.kill(job_pid, signal.SIGSTOP)
    os.kill(run.proc.pid, signal.SIGTERM)
    record = run.finish()
    assert record["exit_code"] == 0 and record["duration"] < 20  # no SIGKILL after 30 s


def test_stop_right_after_start(attempt: Callable[..., Attempt]) -> None:
    run = attempt([PY, str(FIXTURES / "termjob.py"), "trap"], grace=30)
    wait_for("shim.json", (run.dir / SHIM_JSON).exists)
    os.kill(run.proc.pid, signal.SIGTERM)
    record = run.finish()
    assert record["stop_requested"]
    # Either the job had its handler in place yet or it died of the signal.
    assert record["exit_code"] == 0 or record["signal"] == signal.SIGTERM


def test_second_shim_appends_to_output_log(attempt: Callable[..., Attempt]) -> None:
    first = attempt([PY, "-c", "print('first run')"])
    first.finish()
    (first.dir / EXIT_JSON).unlink()
    second = attempt([PY, "-c", "print('second run')"])  # the same attempt folder
    assert second.dir == first.dir
    second.finish()
    assert first.log() == b"first run\nsecond run\n"


def test_sigusr1_kills_at_once(attempt: Callable[..., Attempt]) -> None:
    run = attempt([PY, str(FIXTURES / "termjob.py"), "ignore"], grace=60)
    run.wait_output(b"ready")
    os.kill(run.proc.pid, signal.SIGUSR1)
    record = run.finish(timeout=20)  # far less than the 60 s grace
    assert record["signal"] == signal.SIGKILL
    assert record["stop_requested"] and record["forced"]


# Process trees -------------------------------------------------------------------------------


def test_stop_leaves_no_process_of_the_tree(
    attempt: Callable[..., Attempt], tmp_path: Path
) -> None:
    run = attempt(forky(tmp_path, "wait"), grace=5)
    run.wait_output(b"ready")
    pids = run.job_pids()
    assert {role for *_, role in pids} == {"main", "child", "setsid", "orphan"}
    os.kill(run.proc.pid, signal.SIGTERM)
    wait_for("exit.json", (run.dir / EXIT_JSON).exists)
    assert_all_gone(pids)  # already when exit.json appears: every one was reaped
    record = run.finish()
    assert record["signal"] == signal.SIGTERM and record["stop_requested"]
    assert record["killed_descendants"] == 3
    assert record["survivors"] == []


def test_job_exiting_by_itself_leaves_no_process(
    attempt: Callable[..., Attempt], tmp_path: Path
) -> None:
    run = attempt(forky(tmp_path, "exit"), grace=30)
    record = run.finish()
    pids = run.job_pids()
    assert len(pids) == 4
    assert_all_gone(pids)
    assert record["exit_code"] == 3 and not record["stop_requested"]
    assert record["killed_descendants"] == 3
    # What the leftovers printed while dying was drained, not lost.
    assert run.log().count(b"got TERM") == 3


def test_leftovers_ignoring_sigterm_get_sigkill(
    attempt: Callable[..., Attempt], tmp_path: Path
) -> None:
    run = attempt(forky(tmp_path, "exit", "--ignore-term"), grace=1)
    record = run.finish()
    assert_all_gone(run.job_pids())
    assert record["exit_code"] == 3 and not record["forced"]
    assert record["duration"] >= 1.0
    assert b"outlived the grace: sending SIGKILL" in run.log()


def test_job_with_200_children_is_fully_killed(
    attempt: Callable[..., Attempt], tmp_path: Path
) -> None:
    run = attempt(forky(tmp_path, "wait", "--children", "200", "--ignore-term"), grace=1)
    run.wait_output(b"ready", timeout=120)
    pids = run.job_pids()
    assert len(pids) == 204
    os.kill(run.proc.pid, signal.SIGTERM)
    record = run.finish(timeout=60)
    assert_all_gone(pids)
    assert record["killed_descendants"] == 203


# The bounded log --------------------------------------------------------------------------------


def test_output_log_keeps_head_and_tail_within_bound(attempt: Callable[..., Attempt]) -> None:
    bound = 200_000
    run = attempt([PY, str(FIXTURES / "chatty.py"), "2000000"], max_log=bound)
    record = run.finish()
    data = run.log()
    assert len(data) <= bound
    assert data.startswith(b"HEAD rsup-fixture version 1.2.3 config lr=0.01\nline 0000000 ")
    assert data.endswith(b"LAST LINE\n")
    markers = list(MARKER.finditer(data))
    assert len(markers) == 1
    dropped = int(markers[0].group(1))
    # Nothing lost but what the marker counts: 47 + 31250 * 64 + 10 bytes were written.
    assert len(data) - len(markers[0].group(0)) + dropped == 47 + 31250 * 64 + 10
    # The tail starts on a whole line and runs without a gap to the end.
    tail = data[markers[0].end() :].splitlines()
    numbers = [int(line.split()[1]) for line in tail[:-1]]
    assert numbers == list(range(numbers[0], 31250))
    rotation = run.json(ROTATION_JSON)
    assert rotation["generation"] >= 1
    assert rotation["dropped_bytes_total"] == dropped == record["log_dropped_bytes"]
    assert rotation["inode"] == os.stat(run.dir / OUTPUT_LOG).st_ino
    assert markers[0].end() <= rotation["resume_offset"] <= len(data)
    assert data[: rotation["resume_offset"]].endswith(b"\n")


def test_fast_output_is_copied_at_speed(attempt: Callable[..., Attempt]) -> None:
    lines = 1_000_000  # 64 MB in 64-byte lines, written in blocks as a buffered job does
    run = attempt([PY, str(FIXTURES / "chatty.py"), str(lines * 64)], max_log=1 << 30)
    record = run.finish(timeout=120)
    log_size = (run.dir / OUTPUT_LOG).stat().st_size
    assert log_size == 47 + lines * 64 + 10 and record["log_dropped_bytes"] == 0
    # The shim sustains millions of lines/s; a per-line copy would fall far short of this.
    assert lines / record["duration"] > 200_000, record["duration"]


def test_a_stray_sigusr2_leaves_shim_and_job_alone(
    attempt: Callable[..., Attempt], tmp_path: Path
) -> None:
    # `systemctl kill -s USR2 rsupd` without --kill-whom=main reaches the shims too.
    go = tmp_path / "go"
    job = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.02)\nprint('done')"
    run = attempt([PY, "-c", job])
    wait_for("shim.json", (run.dir / SHIM_JSON).exists, 20)
    run.proc.send_signal(signal.SIGUSR2)  # pending at once: it would kill before exit.json
    go.write_text("")
    record = run.finish()
    assert record["exit_code"] == 0 and record["signal"] is None
    assert run.log() == b"done\n"
