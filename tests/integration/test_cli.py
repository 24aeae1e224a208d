"""The CLI contract: exit codes, bad specs refused before anything is submitted, logs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import Rsupd, env_without_socket, wait_for, write_spec


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rsup.supervisor.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env_without_socket(),
    )


def test_unreachable_daemon_exits_3(tmp_path: Path) -> None:
    result = run_cli("--socket", str(tmp_path / "nobody.sock"), "status")
    assert result.returncode == 3
    assert "cannot reach rsupd" in result.stderr and "nobody.sock" in result.stderr


def test_bad_spec_exits_2_and_submits_nothing(rsupd: Rsupd, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: fine\ncommand: [python, x.py]\nrestart:\n  max_atempts: 3\n")
    result = rsupd.cli("start", str(bad))
    assert result.returncode == 2
    assert "bad.yaml:4" in result.stderr and "restart.max_atempts" in result.stderr
    assert rsupd.cli("status", "--json").stdout.strip() == "[]"


def test_missing_spec_file_exits_2(rsupd: Rsupd, tmp_path: Path) -> None:
    result = rsupd.cli("start", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2
    assert "nope.yaml" in result.stderr


def test_logs_tail_and_follow(rsupd: Rsupd, tmp_path: Path) -> None:
    script = (
        "import time\nfor i in range(30):\n    print('line', i, flush=True); time.sleep(0.02)\n"
    )
    spec = write_spec(tmp_path, "talker", [sys.executable, "-c", script])
    assert rsupd.cli("start", str(spec)).returncode == 0
    follow = rsupd.cli("logs", "talker", "-f", timeout=60)
    assert follow.returncode == 0
    assert "line 29" in follow.stdout
    rsupd.wait_state("talker", "succeeded")
    tail = rsupd.cli("logs", "talker", "-n", "3").stdout.splitlines()
    assert tail == ["line 27", "line 28", "line 29"]


def test_events_show_decisions_for_people(rsupd: Rsupd, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "once", [sys.executable, "-c", "raise SystemExit(0)"])
    assert rsupd.cli("start", str(spec)).returncode == 0
    rsupd.wait_state("once", "succeeded")
    text = wait_for(lambda: "decision" in (o := rsupd.cli("events", "once").stdout) and o)
    assert "action=succeed" in text


def test_env_profile_reaches_the_job_and_unknown_profile_is_refused(
    rsupd: Rsupd, tmp_path: Path
) -> None:
    script = "import os; print('gemm', os.environ.get('MIOPEN_DEBUG_CONV_IMPLICIT_GEMM'))"
    spec = write_spec(
        tmp_path, "profiled", [sys.executable, "-c", script], env_profile="rocm-rdna1"
    )
    assert rsupd.cli("start", str(spec)).returncode == 0
    rsupd.wait_state("profiled", "succeeded")
    assert "gemm 1" in rsupd.cli("logs", "profiled").stdout
    bad = write_spec(tmp_path, "noprofile", [sys.executable, "-c", "1"], env_profile="rocm-nope")
    refused = rsupd.cli("start", str(bad))
    assert refused.returncode == 2
    assert "rocm-nope" in refused.stderr and "rocm-rdna1" in refused.stderr
