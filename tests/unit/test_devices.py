"""AMD GPUs and their stable ids from the kernel's KFD topology.

The folder written here stands for /sys/class/kfd/kfd/topology/nodes on a machine with
AMD cards (none is here): node N has gpu_id (0 for a CPU) and properties, one
"name value" pair a line, as the amdkfd driver writes them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rsup.supervisor.effects import devices


def _node(root: Path, n: int, gpu_id: int, unique_id: int | None) -> None:
    node = root / str(n)
    node.mkdir(parents=True)
    (node / "gpu_id").write_text(f"{gpu_id}\n")
    props = ["cpu_cores_count 0", "simd_count 80"]
    if unique_id is not None:
        props.append(f"unique_id {unique_id}")
    (node / "properties").write_text("\n".join([*props, "max_engine_clk_fccompute 2100"]) + "\n")


@pytest.fixture
def topology(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "nodes"
    _node(root, 0, 0, None)  # the CPU
    for n, gpu_id, unique in [(1, 4413, 0x1A2B3C4D5E6F7081), (2, 61271, 0), (10, 22145, 255)]:
        _node(root, n, gpu_id, unique)
    for n in range(3, 10):
        _node(root, n, 0, None)  # more CPU sockets: 10 must still come after 2
    monkeypatch.setattr(devices, "KFD_NODES", root)
    monkeypatch.setattr(devices, "_nvml", lambda: [])
    return root


def test_gpus_in_rocm_order_with_their_stable_ids(topology: Path) -> None:
    assert devices.kfd_gpus() == [
        {"index": "0", "uuid": "GPU-1a2b3c4d5e6f7081"},
        {"index": "1"},  # a card without a unique_id (many consumer cards): index only
        {"index": "2", "uuid": "GPU-00000000000000ff"},
    ]
    assert devices.visible_gpus({}) == ["0", "1", "2"]


def test_a_stable_id_resolves_to_the_index_it_has_today(topology: Path) -> None:
    assert devices.resolve("gpu-1a2b3c4d5e6f7081", {}) == "0"
    assert devices.resolve("uuid:gpu-00000000000000ff", {}) == "2"
    assert devices.resolve("gpu-0000000000000001", {}) is None
    assert devices.resolve("1", {}) == "1"


def test_no_topology_means_no_amd_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "KFD_NODES", tmp_path / "absent")
    assert devices.kfd_gpus() == []
