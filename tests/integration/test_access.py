"""Access control with two real uids: SO_PEERCRED, per-user jobs, jobs run as their owner."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rsup.supervisor.cli.client import Client, ClientError
from rsup.supervisor.core.spec import load_spec

from tests.conftest import Rsupd, running_rsupd, write_spec

USER = "rsuptest"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a second uid")


def as_user(uid: int, daemon: Rsupd, op: str, **fields: Any) -> dict[str, Any]:
    """Send one request from a forked child running as `uid` (the real peer credentials);
    the interpreter of this test run may not be reachable by that user, so no exec."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to uid, ask, report, and leave without cleanup
        try:
            os.setgroups([])
            os.setgid(pwd.getpwuid(uid).pw_gid)
            os.setuid(uid)
            try:
                reply = {"ok": True, "result": Client(daemon.socket, 30).call(op, **fields)}
            except ClientError as exc:
                reply = {"ok": False, "error": str(exc), "code": exc.code}
            os.write(write_end, json.dumps(reply).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return dict(json.loads(data))


@pytest.fixture(scope="module")
def other_uid() -> Iterator[int]:
    if shutil.which("useradd") is None:
        pytest.skip("useradd is not installed")
    created = False
    try:
        uid = pwd.getpwnam(USER).pw_uid
    except KeyError:
        subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True
        )
        created, uid = True, pwd.getpwnam(USER).pw_uid
    yield uid
    if created:
        subprocess.run(["userdel", USER], check=False)


@pytest.fixture
def shared_rsupd() -> Iterator[Rsupd]:
    """A daemon whose folder other users can reach (pytest's tmp dirs are private)."""
    root = Path(tempfile.mkdtemp(prefix="rsup-access-"))
    root.chmod(0o755)
    try:
        with running_rsupd(root) as daemon:
            daemon.socket.chmod(0o666)  # the test's stand-in for a shared group on the socket
            yield daemon
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_other_user_cannot_see_or_control_root_jobs(shared_rsupd: Rsupd, other_uid: int) -> None:
    spec = write_spec(
        shared_rsupd.root, "rootjob", [sys.executable, "-c", "import time; time.sleep(60)"]
    )
    assert shared_rsupd.cli("start", str(spec)).returncode == 0
    shared_rsupd.wait_state("rootjob", "running")
    listing = as_user(other_uid, shared_rsupd, "status")
    assert listing["ok"] and listing["result"] == []
    refused = as_user(other_uid, shared_rsupd, "stop", name="rootjob")
    assert not refused["ok"] and refused["code"] == 1
    assert "belongs to another user" in refused["error"]
    assert shared_rsupd.status("rootjob")["state"] == "running"


def test_job_runs_as_the_user_who_submitted_it(shared_rsupd: Rsupd, other_uid: int) -> None:
    work = shared_rsupd.root / "work"
    work.mkdir()
    os.chown(work, other_uid, -1)
    spec = write_spec(work, "userjob", ["/bin/sh", "-c", "echo uid $(id -u) euid $(id -u -r)"])
    payload = load_spec(spec).model_dump(mode="json")
    started = as_user(other_uid, shared_rsupd, "start", spec=payload)
    assert started["ok"], started
    job = shared_rsupd.wait_state("userjob", "succeeded")
    assert job["owner_uid"] == other_uid
    logs = as_user(other_uid, shared_rsupd, "logs", name="userjob")
    assert f"uid {other_uid} euid {other_uid}" in logs["result"]["data"]
    theirs = as_user(other_uid, shared_rsupd, "status")
    assert [j["name"] for j in theirs["result"]] == ["userjob"]


def test_only_root_may_name_another_user(shared_rsupd: Rsupd, other_uid: int) -> None:
    spec = write_spec(shared_rsupd.root, "sneaky", ["/bin/true"], user="root")
    refused = as_user(
        other_uid, shared_rsupd, "start", spec=load_spec(spec).model_dump(mode="json")
    )
    assert not refused["ok"] and refused["code"] == 2
    assert "only root may run a job as another user" in refused["error"]
