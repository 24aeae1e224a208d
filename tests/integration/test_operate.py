"""Operating long runs: dependencies, runtime/cost budgets, completion hooks."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from rsup.supervisor.effects.store import Store
from rsup.supervisor.surfaces.report import report_data

from tests.conftest import Rsupd, running_rsupd, wait_for, write_spec

SLEEP = [sys.executable, "-c", "import time\nwhile True: time.sleep(0.1)"]


def test_after_waits_for_success_and_fails_with_a_failed_dependency(
    rsupd: Rsupd, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    gate = (
        f"import pathlib, time\nwhile not pathlib.Path({str(release)!r}).exists(): time.sleep(0.05)"
    )
    first = write_spec(tmp_path, "prep", [sys.executable, "-c", gate])
    second = write_spec(
        tmp_path, "train", [sys.executable, "-c", "print('trained')"], after=["prep"]
    )
    assert rsupd.cli("start", str(first)).returncode == 0
    assert rsupd.cli("start", str(second)).returncode == 0
    waiting = wait_for(lambda: "waiting for prep" in (s := rsupd.status("train"))["reason"] and s)
    assert waiting["state"] == "queued" and waiting["attempts"] == 0
    release.write_text("go")
    rsupd.wait_state("train", "succeeded")
    bad = write_spec(
        tmp_path,
        "broken",
        [sys.executable, "-c", "raise SystemExit(3)"],
        restart={"max_attempts": 1},
    )
    child = write_spec(tmp_path, "child", [sys.executable, "-c", "1"], after=["broken"])
    assert rsupd.cli("start", str(bad)).returncode == 0
    rsupd.wait_state("broken", "failed")
    assert rsupd.cli("start", str(child)).returncode == 0
    failed = rsupd.wait_state("child", "failed")
    assert "dependency broken is failed" in failed["reason"] and failed["attempts"] == 0


def test_runtime_limit_stops_the_job_and_says_why(rsupd: Rsupd, tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        "capped",
        SLEEP,
        limits={"max_runtime": "2s"},
        cost={"per_hour": 3.6, "currency": "USD"},
    )
    assert rsupd.cli("start", str(spec)).returncode == 0
    job = rsupd.wait_state("capped", "stopped", timeout=30)
    assert "limits.max_runtime reached" in job["reason"]
    assert job["elapsed_s"] >= 2 and job["cost"] >= 0.002 and job["currency"] == "USD"
    assert any(e["event"] == "limit_stop" for e in rsupd.events("capped"))


def test_hooks_run_with_the_outcome_in_their_env(rsupd: Rsupd, tmp_path: Path) -> None:
    out = tmp_path / "hook.out"
    hook = ["/bin/sh", "-c", f"echo $RSUP_JOB $RSUP_OUTCOME $RSUP_ATTEMPTS >> {out}"]
    hooks = {"on_success": hook, "on_failure": ["/bin/false"], "on_exit": hook}
    spec = write_spec(tmp_path, "hooked", [sys.executable, "-c", "print(1)"], hooks=hooks)
    assert rsupd.cli("start", str(spec)).returncode == 0
    rsupd.wait_state("hooked", "succeeded")
    wait_for(lambda: out.exists() and len(out.read_text().splitlines()) == 2, 10, "both hooks")
    assert out.read_text().splitlines() == ["hooked succeeded 1", "hooked succeeded 1"]
    ran = wait_for(lambda: [e for e in rsupd.events("hooked") if e["event"] == "hook_ran"])
    assert {e["hook"] for e in ran} == {"on_success", "on_exit"}
    assert all(e["exit_code"] == 0 for e in ran)


def test_failed_preflight_fails_fast_with_the_diagnosis(rsupd: Rsupd, tmp_path: Path) -> None:
    broken = "import no_such_module_here"
    spec = write_spec(
        tmp_path,
        "preflown",
        SLEEP,
        preflight={"command": [sys.executable, "-c", broken], "timeout": 60},
    )
    assert rsupd.cli("start", str(spec)).returncode == 0
    job = rsupd.wait_state("preflown", "failed")
    assert job["attempts"] == 0
    assert "preflight failed: config_error" in job["reason"]
    assert "no_such_module_here" in job["reason"]


def test_passing_preflight_then_the_real_run(rsupd: Rsupd, tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        "checked",
        [sys.executable, "-c", "print('real run')"],
        preflight={"command": [sys.executable, "-c", "print('check')"]},
    )
    assert rsupd.cli("start", str(spec)).returncode == 0
    job = rsupd.wait_state("checked", "succeeded")
    assert job["attempts"] == 1
    results = [e for e in rsupd.events("checked") if e["event"] == "preflight_result"]
    assert [r["passed"] for r in results] == [True]


def test_budget_reached_during_backoff_is_not_restarted(rsupd: Rsupd, tmp_path: Path) -> None:
    crash = [sys.executable, "-c", "raise SystemExit(1)"]
    spec = write_spec(
        tmp_path, "spender", crash,
        cost={"per_hour": 3600, "budget": 2},  # 1 per second: 2 s of running
        restart={"backoff": {"initial": 3, "max": 3}},
    )  # fmt: skip
    assert rsupd.cli("start", str(spec)).returncode == 0
    job = rsupd.wait_state("spender", "stopped", timeout=30)
    assert "cost budget reached" in job["reason"] and "not restarted" in job["reason"]
    assert job["attempts"] == 1


def test_sigusr2_writes_what_grew_since_ready(tmp_path: Path) -> None:
    with running_rsupd(tmp_path, {"PYTHONTRACEMALLOC": "1"}) as daemon:
        spec = write_spec(tmp_path, "talk", [sys.executable, "-c", "print('hello')"])
        assert daemon.cli("start", str(spec)).returncode == 0
        daemon.wait_state("talk", "succeeded")
        report = daemon.state / "memory-report.txt"
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGUSR2)
        wait_for(lambda: "memory report written" in daemon.log.read_text())
        text = report.read_text()
        assert daemon.proc.poll() is None  # a report, not a death
        lines = text.splitlines()
        assert lines[0].startswith(f"rsupd {daemon.proc.pid}: ")
        assert lines[1].startswith("rss ") and " MB -> " in lines[1]
        assert "object types that grew most" in text
        sites = text.split("allocation sites that grew most")[1]
        assert '.py", line ' in sites  # tracemalloc named real frames


def test_retention_keeps_the_first_and_newest_attempts(tmp_path: Path) -> None:
    config = tmp_path / "rsupd.toml"
    config.write_text("[retention]\nattempts = 3\n")
    with running_rsupd(tmp_path, args=["--config", str(config)]) as daemon:
        crash = [sys.executable, "-c", "print('attempt output'); raise SystemExit(1)"]
        restart = {"max_attempts": 8, "backoff": {"initial": 0, "max": 0}}
        spec = write_spec(tmp_path, "loop", crash, restart=restart)
        assert daemon.cli("start", str(spec)).returncode == 0
        failed = daemon.wait_state("loop", "failed", timeout=60)
        assert failed["attempts"] == 8
        folders = daemon.state / "jobs" / "loop" / "attempts"
        assert sorted(int(p.name) for p in folders.iterdir()) == [1, 6, 7, 8]
        events = [e for e in daemon.events("loop") if e["attempt"] is not None]
        ended = {e["attempt"] for e in events if e["event"] == "attempt_ended"}
        assert ended == {1, 6, 7, 8}  # bookkeeping of pruned attempts is gone
        pruned = {e["event"] for e in events if 1 < e["attempt"] < 6}
        assert pruned == {"attempt_started", "decision"}  # what `rsup report` draws stays
        assert {e["attempt"] for e in events if e["event"] == "decision"} == set(range(1, 9))
        store = Store(daemon.state / "state.db")
        try:
            drawn = report_data(store, "loop")["attempts"]
        finally:
            store.close()
        assert [a["device"] for a in drawn] == ["cpu"] * 8  # no "?" for a pruned attempt
        assert all(a["decision"] for a in drawn[:-1])
        assert "attempt output" in daemon.cli("logs", "loop", "--attempt", "1").stdout
        gone = daemon.cli("logs", "loop", "--attempt", "3")
        assert gone.returncode != 0
        assert "attempt 3 of job loop is no longer kept" in gone.stderr
        assert "attempts 6..8" in gone.stderr and "[retention] attempts = 3" in gone.stderr


def test_remove_waits_for_the_completion_hooks(rsupd: Rsupd, tmp_path: Path) -> None:
    release = tmp_path / "release"
    hook = ["/bin/sh", "-c", f"while [ ! -e {release} ]; do sleep 0.02; done"]
    spec = write_spec(tmp_path, "hooked", [sys.executable, "-c", "1"], hooks={"on_exit": hook})
    assert rsupd.cli("start", str(spec)).returncode == 0
    rsupd.wait_state("hooked", "succeeded")
    refused = rsupd.cli("remove", "hooked")
    assert refused.returncode != 0
    assert "completion hooks are still running" in refused.stderr
    assert (rsupd.state / "jobs" / "hooked").exists()  # nothing was removed
    release.write_text("")
    wait_for(lambda: any(e["event"] == "hook_ran" for e in rsupd.events("hooked")))
    wait_for(lambda: rsupd.cli("remove", "hooked").returncode == 0)
    assert not (rsupd.state / "jobs" / "hooked").exists()
