"""Per-attempt cgroups where rsupd has a writable cgroup v2 folder.

The build machines have a hybrid hierarchy: cgroup v2 at /sys/fs/cgroup/unified without
the memory controller. A folder made there stands for the subtree systemd delegates to
rsupd (Delegate=yes); cgroup.kill and membership are real, memory.max is not testable.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, pid_alive, running_rsupd, wait_for, write_spec

UNIFIED = Path("/sys/fs/cgroup/unified")


@pytest.fixture
def cgroup_root() -> Iterator[Path]:
    if os.geteuid() != 0 or not (UNIFIED / "cgroup.procs").exists():
        pytest.skip("needs root and a mounted cgroup v2 hierarchy")
    root = UNIFIED / f"rsup-test-{os.getpid()}"
    try:
        root.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup here: {exc}")
    if not (root / "cgroup.kill").exists():
        root.rmdir()
        pytest.skip("this kernel has no cgroup.kill")
    yield root
    for folder in sorted(root.glob("**/"), key=lambda p: len(p.parts), reverse=True):
        if folder != root:
            (folder / "cgroup.kill").write_text("1\n")
            wait_for(lambda f=folder: not (f / "cgroup.procs").read_text().strip(), 10)
            folder.rmdir()
    root.rmdir()


def cgroup_of(pid: int) -> str:
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    return next(line[3:] for line in lines if line.startswith("0::"))


def test_attempt_cgroup_holds_the_tree_and_kills_it_when_the_shim_dies(
    cgroup_root: Path, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    with running_rsupd(tmp_path, env={"RSUP_CGROUP_ROOT": str(cgroup_root)}) as daemon:
        spec = write_spec(tmp_path, "caged", [sys.executable, str(FIXTURES / "tree_job.py"),
                          str(pids)], restart={"backoff": {"initial": 30}})  # fmt: skip
        assert daemon.cli("start", str(spec)).returncode == 0
        wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 5, 20, "the tree")
        tree = [int(p) for p in pids.read_text().split()]
        expected = f"/{cgroup_root.name}/caged-1"
        assert all(cgroup_of(pid) == expected for pid in tree)
        assert daemon.status("caged")["isolation"] == "cgroup"
        shim = next(e for e in daemon.events("caged") if e["event"] == "attempt_started")
        os.kill(shim["shim_pid"], signal.SIGKILL)
        wait_for(lambda: not any(pid_alive(p) for p in tree), 15, "cgroup.kill of the tree")
        daemon.wait_state("caged", "backoff")
        assert not (cgroup_root / "caged-1").exists()
        killed = [e for e in daemon.events("caged") if e["event"] == "tree_killed"]
        assert killed and killed[0]["attempt"] == 1


def test_stop_empties_and_removes_the_attempt_cgroup(cgroup_root: Path, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    with running_rsupd(tmp_path, env={"RSUP_CGROUP_ROOT": str(cgroup_root)}) as daemon:
        spec = write_spec(tmp_path, "stopme", [sys.executable, str(FIXTURES / "tree_job.py"),
                          str(pids)], stop={"grace": 1})  # fmt: skip
        assert daemon.cli("start", str(spec)).returncode == 0
        wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 5, 20, "the tree")
        tree = [int(p) for p in pids.read_text().split()]
        assert daemon.cli("stop", "stopme").returncode == 0
        assert not any(pid_alive(p) for p in tree)
        assert not (cgroup_root / "stopme-1").exists()
