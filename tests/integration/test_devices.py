"""GPUs as resources, with a test double for GPUs that are not here (RSUP_FAKE_GPUS).

The fake stands for the device list rsupd reads from /dev/nvidia* or the KFD topology;
the jobs are real processes that see the chosen GPU through CUDA/HIP_VISIBLE_DEVICES.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Rsupd, running_rsupd, wait_for, write_spec

SHOW = "import os, time, pathlib, sys\nprint('cuda', os.environ['CUDA_VISIBLE_DEVICES'], 'hip', os.environ['HIP_VISIBLE_DEVICES'], flush=True)\nwhile not pathlib.Path(sys.argv[1]).exists(): time.sleep(0.05)\n"  # noqa: E501


@pytest.fixture
def one_gpu(tmp_path: Path) -> Iterator[Rsupd]:
    with running_rsupd(tmp_path, env={"RSUP_FAKE_GPUS": "0"}) as daemon:
        yield daemon


def test_one_job_per_gpu_and_the_next_waits_queued(one_gpu: Rsupd, tmp_path: Path) -> None:
    release = tmp_path / "release"
    no_probe = {"probe": {"enabled": False}}
    first = write_spec(tmp_path, "first", [sys.executable, "-c", SHOW, str(release)], **no_probe)
    second = write_spec(tmp_path, "second", [sys.executable, "-c", SHOW, str(release) + "2"],
                        **no_probe)  # fmt: skip
    assert one_gpu.cli("start", str(first)).returncode == 0
    one_gpu.wait_state("first", "running")
    assert one_gpu.cli("start", str(second)).returncode == 0
    queued = wait_for(lambda: "free GPU" in (s := one_gpu.status("second"))["reason"] and s)
    assert queued["state"] == "queued" and "first" in queued["reason"]
    assert one_gpu.status("first")["device"] == "0"
    release.write_text("go")
    one_gpu.wait_state("first", "succeeded")
    running = one_gpu.wait_state("second", "running")
    assert running["device"] == "0"
    wait_for(lambda: "cuda 0 hip 0" in one_gpu.cli("logs", "second").stdout)
    Path(str(release) + "2").write_text("go")
    one_gpu.wait_state("second", "succeeded")


def test_cpu_job_does_not_take_the_gpu(one_gpu: Rsupd, tmp_path: Path) -> None:
    script = "import os; print(repr(os.environ['CUDA_VISIBLE_DEVICES']))"
    spec = write_spec(tmp_path, "cpujob", [sys.executable, "-c", script], device="cpu")
    assert one_gpu.cli("start", str(spec)).returncode == 0
    job = one_gpu.wait_state("cpujob", "succeeded")
    assert job["device"] == "cpu"
    assert "''" in one_gpu.cli("logs", "cpujob").stdout


def test_queued_jobs_get_the_gpu_in_submission_order(one_gpu: Rsupd, tmp_path: Path) -> None:
    gates = {name: tmp_path / f"{name}.go" for name in ("holder", "early", "late")}
    no_probe = {"probe": {"enabled": False}}
    for name, gate in gates.items():
        spec = write_spec(tmp_path, name, [sys.executable, "-c", SHOW, str(gate)], **no_probe)
        assert one_gpu.cli("start", str(spec)).returncode == 0
        if name == "holder":
            one_gpu.wait_state("holder", "running")
        else:
            wait_for(lambda n=name: "free GPU" in one_gpu.status(n)["reason"])
    gates["holder"].write_text("go")
    one_gpu.wait_state("early", "running")
    assert one_gpu.status("late")["state"] == "queued"
    gates["early"].write_text("go")
    one_gpu.wait_state("late", "running")
    gates["late"].write_text("go")
    one_gpu.wait_state("late", "succeeded")


def test_torchrun_job_gets_one_gpu_per_rank(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "show_ranks.py"
    script.write_text(
        "import os\n"
        "print('rank', os.environ['LOCAL_RANK'], 'sees', os.environ['CUDA_VISIBLE_DEVICES'],"
        " flush=True)\n"
    )
    with running_rsupd(tmp_path, env={"RSUP_FAKE_GPUS": "0,1,2"}) as daemon:
        spec = write_spec(tmp_path, "ddp", [str(script)], kind="torchrun",
                          torchrun={"nproc_per_node": 2}, probe={"enabled": False})  # fmt: skip
        assert daemon.cli("start", str(spec)).returncode == 0
        job = daemon.wait_state("ddp", "succeeded", "failed", timeout=120)
        assert job["state"] == "succeeded", daemon.cli("logs", "ddp").stdout[-2000:]
        assert job["device"] == "0,1"
        out = daemon.cli("logs", "ddp").stdout
        assert "rank 0 sees 0,1" in out and "rank 1 sees 0,1" in out


def test_stable_gpu_id_and_sharing(tmp_path: Path) -> None:
    env = {"RSUP_FAKE_GPUS": "0,1", "RSUP_FAKE_GPU_IDS": "0=GPU-aaaa,1=GPU-bbbb"}
    gate = tmp_path / "gate"
    wait = [sys.executable, "-c", SHOW, str(gate)]
    no_probe = {"probe": {"enabled": False}}
    with running_rsupd(tmp_path, env=env) as daemon:
        by_id = write_spec(tmp_path, "byid", wait, device="GPU-bbbb", share_gpu=True, **no_probe)
        assert daemon.cli("start", str(by_id)).returncode == 0
        assert daemon.wait_state("byid", "running")["device"] == "1"
        wait_for(lambda: "cuda 1 hip 1" in daemon.cli("logs", "byid").stdout)
        sharer = write_spec(tmp_path, "sharer", wait, device="1", share_gpu=True, **no_probe)
        assert daemon.cli("start", str(sharer)).returncode == 0
        assert daemon.wait_state("sharer", "running")["device"] == "1"
        loner = write_spec(tmp_path, "loner", wait, device="1", **no_probe)
        assert daemon.cli("start", str(loner)).returncode == 0
        wait_for(lambda: "free GPU" in daemon.status("loner")["reason"])
        ghost = write_spec(tmp_path, "ghost", wait, device="GPU-cccc", **no_probe)
        assert daemon.cli("start", str(ghost)).returncode == 0
        failed = daemon.wait_state("ghost", "failed")
        assert "GPU-cccc" in failed["reason"] or "gpu-cccc" in failed["reason"]
        gate.write_text("go")
        daemon.wait_state("loner", "succeeded", timeout=60)
