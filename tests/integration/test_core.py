"""The core supervisor with real processes: rsupd, shims, jobs, signals, SQLite."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from tests.conftest import FIXTURES, Rsupd, pid_alive, wait_for, write_spec

FAST_RESTART = {"restart": {"backoff": {"initial": 0.2, "factor": 2, "max": 1}, "max_attempts": 5}}


def test_crash_backoff_restart_success(rsupd: Rsupd, tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        "crashy",
        ["python", str(FIXTURES / "crash_once.py"), str(tmp_path / "marker")],
        **FAST_RESTART,
    )
    result = rsupd.cli("start", str(spec))
    assert result.returncode == 0, result.stderr
    job = rsupd.wait_state("crashy", "succeeded")
    assert job["attempts"] == 2
    names = [e["event"] for e in rsupd.events("crashy")]
    assert names.count("attempt_started") == 2
    decisions = [e for e in rsupd.events("crashy") if e["event"] == "decision"]
    assert decisions[0]["action"] == "restart" and decisions[0]["delay"] == 0.2
    assert decisions[-1]["action"] == "succeed"
    first = rsupd.cli("logs", "crashy", "--attempt", "1").stdout
    assert "RuntimeError: boom" in first
    assert "all good" in rsupd.cli("logs", "crashy").stdout


def test_stop_leaves_no_descendant(rsupd: Rsupd, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    spec = write_spec(
        tmp_path,
        "tree",
        [sys.executable, str(FIXTURES / "tree_job.py"), str(pids)],
        stop={"grace": 1},
    )
    assert rsupd.cli("start", str(spec)).returncode == 0
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 5, 20, "the tree")
    tree = [int(p) for p in pids.read_text().split()]
    assert all(pid_alive(p) for p in tree)
    stopped = rsupd.cli("stop", "tree")
    assert stopped.returncode == 0, stopped.stderr
    assert rsupd.status("tree")["state"] == "stopped"
    wait_for(lambda: not any(pid_alive(p) for p in tree), 10, "every process of the tree to die")


def test_stop_during_backoff_cancels_restart(rsupd: Rsupd, tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        "flap",
        [sys.executable, "-c", "raise SystemExit(1)"],
        restart={"backoff": {"initial": 60}},
    )
    assert rsupd.cli("start", str(spec)).returncode == 0
    rsupd.wait_state("flap", "backoff")
    assert rsupd.cli("stop", "flap").returncode == 0
    job = rsupd.status("flap")
    assert job["state"] == "stopped" and job["attempts"] == 1


def test_rsupd_sigkill_readopts_running_job(rsupd: Rsupd, tmp_path: Path) -> None:
    release = tmp_path / "release"
    script = (
        "import time, pathlib, sys\n"
        "i = 0\n"
        f"while not pathlib.Path({str(release)!r}).exists():\n"
        "    print('tick', i, flush=True); i += 1; time.sleep(0.1)\n"
        "print('released', flush=True)\n"
    )
    spec = write_spec(tmp_path, "longrun", [sys.executable, "-c", script])
    assert rsupd.cli("start", str(spec)).returncode == 0
    job = wait_for(lambda: (s := rsupd.status("longrun"))["pid"] and s, 20, "the job's pid")
    pid = job["pid"]
    rsupd.kill(signal.SIGKILL)
    assert pid_alive(pid), "the job must survive the daemon's death"
    rsupd.start()
    again = rsupd.status("longrun")
    assert again["state"] == "running" and again["pid"] == pid and again["attempts"] == 1
    release.write_text("go")
    done = rsupd.wait_state("longrun", "succeeded")
    assert done["attempts"] == 1
    ended = [e for e in rsupd.events("longrun") if e["event"] == "attempt_ended"]
    assert len(ended) == 1, "an attempt is processed exactly once"
    assert "released" in rsupd.cli("logs", "longrun").stdout


def test_attempt_that_ended_while_rsupd_was_down_is_processed_once(
    rsupd: Rsupd, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    script = (
        "import time, pathlib, sys\n"
        f"while not pathlib.Path({str(release)!r}).exists(): time.sleep(0.05)\n"
        "sys.exit(0)\n"
    )
    spec = write_spec(tmp_path, "endsalone", [sys.executable, "-c", script])
    assert rsupd.cli("start", str(spec)).returncode == 0
    job = wait_for(lambda: (s := rsupd.status("endsalone"))["pid"] and s, 20, "the job's pid")
    rsupd.kill(signal.SIGKILL)
    release.write_text("go")
    wait_for(lambda: not pid_alive(job["pid"]), 10, "the job to end")
    rsupd.start()
    rsupd.wait_state("endsalone", "succeeded")
    assert [e["event"] for e in rsupd.events("endsalone")].count("attempt_ended") == 1


def test_checkpoint_placeholder_expands_once_the_file_exists(rsupd: Rsupd, tmp_path: Path) -> None:
    ckpt = tmp_path / "last.ckpt"
    script = (
        "import sys, pathlib\n"
        "print('argv', sys.argv[1:], flush=True)\n"
        f"p = pathlib.Path({str(ckpt)!r})\n"
        "if len(sys.argv) < 3:\n"
        "    p.write_text('epoch 1'); sys.exit(1)\n"
        "print('resumed from', sys.argv[2], flush=True)\n"
    )
    spec = write_spec(
        tmp_path,
        "resumer",
        [sys.executable, "-c", script, "--resume", "{checkpoint}"],
        checkpoint=str(ckpt),
        **FAST_RESTART,
    )
    assert rsupd.cli("start", str(spec)).returncode == 0
    rsupd.wait_state("resumer", "succeeded")
    assert "argv []" in rsupd.cli("logs", "resumer", "--attempt", "1").stdout
    assert f"resumed from {ckpt}" in rsupd.cli("logs", "resumer", "--attempt", "2").stdout


def test_gives_up_after_max_attempts(rsupd: Rsupd, tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        "hopeless",
        [sys.executable, "-c", "raise SystemExit(2)"],
        restart={"max_attempts": 3, "backoff": {"initial": 0.05, "max": 0.1}},
    )
    assert rsupd.cli("start", str(spec)).returncode == 0
    job = rsupd.wait_state("hopeless", "failed")
    assert job["attempts"] == 3
    assert "max_attempts=3" in job["reason"]


def test_status_json_contract(rsupd: Rsupd, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "contract", [sys.executable, "-c", "print('hi')"])
    assert rsupd.cli("start", str(spec)).returncode == 0
    rsupd.wait_state("contract", "succeeded")
    rows = json.loads(rsupd.cli("status", "--json").stdout)
    row = next(r for r in rows if r["name"] == "contract")
    for key in ("name", "state", "attempts", "pid", "device", "last_fault", "progress"):
        assert key in row
    events = json.loads(rsupd.cli("events", "contract", "--json").stdout)
    assert all({"ts", "job", "attempt", "event"} <= set(e) for e in events)
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)


def test_remove_and_start_again_by_name(rsupd: Rsupd, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "again", [sys.executable, "-c", "print('hi')"])
    assert rsupd.cli("start", str(spec)).returncode == 0
    rsupd.wait_state("again", "succeeded")
    assert rsupd.cli("start", "again").returncode == 0
    job = rsupd.wait_state("again", "succeeded")
    # a new run: fresh counters; the first run's attempt stays as history
    assert (job["attempts"], job["attempts_total"], job["last_fault"]) == (1, 2, None)
    folder = rsupd.state / "jobs" / "again"
    assert (folder / "attempts" / "2" / "output.log").read_text() == "hi\n"
    assert rsupd.cli("remove", "again").returncode == 0
    missing = rsupd.cli("status", "again")
    assert missing.returncode == 1 and "no job named again" in missing.stderr
    assert not folder.exists()  # its logs and checkpoint copies went with it
    assert rsupd.cli("start", str(spec)).returncode == 0  # the name is free: a new job
    assert rsupd.wait_state("again", "succeeded")["attempts"] == 1


def test_the_jobs_pythonpath_never_reaches_the_shim(rsupd: Rsupd, tmp_path: Path) -> None:
    # A job tree with its own json.py (or an old enum34) on PYTHONPATH: the job sees it,
    # the shim, which imports json, must not.
    src = tmp_path / "src"
    src.mkdir()
    (src / "json.py").write_text("raise ImportError('the job tree shadowed json')\n")
    probe = f"import sys; print('on path:', {str(src)!r} in sys.path)"
    spec = write_spec(tmp_path, "shadow", [sys.executable, "-c", probe],
                      env={"PYTHONPATH": str(src)})  # fmt: skip
    assert rsupd.cli("start", str(spec)).returncode == 0
    job = rsupd.wait_state("shadow", "succeeded", "failed")
    assert job["state"] == "succeeded"
    assert "on path: True" in rsupd.cli("logs", "shadow").stdout


def test_a_removal_cut_short_is_finished_at_the_next_start(rsupd: Rsupd, tmp_path: Path) -> None:
    grave = rsupd.state / "jobs" / ".removed-gone-1"
    (grave / "attempts" / "1").mkdir(parents=True)
    (grave / "attempts" / "1" / "output.log").write_text("old\n")
    rsupd.kill(signal.SIGTERM)
    rsupd.start()
    wait_for(lambda: not grave.exists(), 10, "the set-aside folder to go")
