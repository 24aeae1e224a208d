"""GPUs as resources: which exist, which job holds which, and what they report.

Telemetry is best effort (NVML for NVIDIA, amdsmi or `rocm-smi --json` for AMD) and
returns nothing where none of them is present; nothing in rsup requires it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.effects.procwait import wait_event

FAKE_GPUS_ENV = "RSUP_FAKE_GPUS"  # test double: "0,1" stands for two GPUs that are not here
FAKE_IDS_ENV = "RSUP_FAKE_GPU_IDS"  # test double: "0=GPU-aa,1=GPU-bb", their stable ids
KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")


def visible_gpus(env: dict[str, str] | None = None) -> list[str]:
    """Indexes of the GPUs on this machine, as strings ("0", "1", ...)."""
    env = dict(os.environ if env is None else env)
    if env.get(FAKE_GPUS_ENV) is not None:
        return [g for g in env[FAKE_GPUS_ENV].split(",") if g.strip()]
    nvidia = sorted(p.name for p in Path("/dev").glob("nvidia[0-9]*"))
    if nvidia:
        return [name.removeprefix("nvidia") for name in nvidia]
    return [str(i) for i in range(_amd_gpu_count())]


def gpu_ids(env: dict[str, str] | None = None) -> dict[str, str]:
    """Stable id (lower case) -> current index: NVIDIA UUIDs through NVML, AMD ones from the
    kernel's KFD topology; {} where neither is to be had."""
    env = dict(os.environ if env is None else env)
    if env.get(FAKE_IDS_ENV) is not None:
        pairs = (p.split("=", 1) for p in env[FAKE_IDS_ENV].split(",") if "=" in p)
        return {uuid.strip().lower(): index.strip() for index, uuid in pairs}
    gpus = _nvml() or kfd_gpus()
    return {g["uuid"].lower(): g["index"] for g in gpus if g.get("uuid")}


def resolve(device: str, env: dict[str, str] | None = None) -> str | None:
    """An index for a stable id ("GPU-..." or "uuid:..."), the device itself otherwise;
    None when no GPU here has that id."""
    if not device.startswith(("gpu-", "uuid:")):
        return device
    return gpu_ids(env).get(device.removeprefix("uuid:"))


def _amd_gpu_count() -> int:
    return len(kfd_gpus())


def kfd_gpus(nodes: Path | None = None) -> list[dict[str, str]]:
    """AMD GPUs in the kernel's KFD topology, in ROCm's device order: their index and, where
    the card reports a unique_id, the stable id ROCm gives it (GPU-<16 hex digits>), which
    ROCR_VISIBLE_DEVICES also accepts. Nodes whose gpu_id is 0 are CPUs."""
    nodes = nodes or KFD_NODES
    try:
        entries = [p for p in nodes.iterdir() if p.name.isdigit()]
    except OSError:
        return []
    gpus: list[dict[str, str]] = []
    for node in sorted(entries, key=lambda p: int(p.name)):  # 10 after 9, not after 1
        try:
            if int((node / "gpu_id").read_text().strip() or 0) == 0:
                continue
        except (OSError, ValueError):
            continue
        gpu = {"index": str(len(gpus))}
        unique = _kfd_property(node, "unique_id")
        if unique:
            gpu["uuid"] = f"GPU-{unique:016x}"
        gpus.append(gpu)
    return gpus


def _kfd_property(node: Path, key: str) -> int:
    try:
        for line in (node / "properties").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value.strip())
    except (OSError, ValueError):
        pass
    return 0


def is_gpu(device: str | None) -> bool:
    return bool(device) and device not in ("cpu", "auto")


def index_of(device: str) -> str:
    return device.removeprefix("cuda:")


def indexes(device: str) -> list[str]:
    """ "0,1" (several GPUs for one torchrun job) -> ["0", "1"]; "cuda:1" -> ["1"]."""
    return [index_of(part.strip()) for part in device.split(",") if part.strip()]


def gpus_wanted(spec: JobSpec) -> int:
    """How many GPUs the job needs: torchrun's nproc_per_node ranks, one each; else one."""
    if spec.kind != "torchrun":
        return 1
    nproc = spec.torchrun.nproc_per_node
    return nproc if isinstance(nproc, int) and nproc > 0 else 1


class Pool:
    """Which job holds which GPU: one job per GPU, unless every holder allows sharing."""

    def __init__(self) -> None:
        self.held: dict[str, str] = {}  # index -> the first holder
        self.sharers: dict[str, set[str]] = {}  # index -> every job on it, when shared
        self.sharing: set[str] = set()  # jobs whose spec says share_gpu
        self.waiting: list[str] = []  # jobs queued for a GPU, in the order they asked
        self.freed = asyncio.Event()  # replaced on each release: waiters see one generation

    def holder(self, device: str) -> str | None:
        return self.held.get(index_of(device))

    def _fits(self, key: str, job: str) -> bool:
        holders = self.sharers.get(key, {self.held[key]} if key in self.held else set())
        if not holders or holders == {job}:
            return True
        return job in self.sharing and holders <= self.sharing

    def take(self, device: str, job: str) -> bool:
        """Hold every GPU `device` names, or none of them."""
        keys = indexes(device)
        if not all(self._fits(key, job) for key in keys):
            return False
        for key in keys:
            self.held.setdefault(key, job)
            self.sharers.setdefault(key, set()).add(job)
        return True

    def free_one(self, gpus: list[str], job: str, count: int = 1) -> str | None:
        """Hold `count` free GPUs for `job`; "0" or "0,1"; None while too few are free."""
        free = [g for g in gpus if self._fits(index_of(g), job)][:count]
        if len(free) < count:
            return None
        device = ",".join(free)
        self.take(device, job)
        return device

    async def release(self, job: str) -> None:
        self.sharing.discard(job)
        for key, jobs in list(self.sharers.items()):
            jobs.discard(job)
            if not jobs:
                del self.sharers[key]
                self.held.pop(key, None)
            elif self.held.get(key) == job:
                self.held[key] = next(iter(jobs))
        self.freed.set()
        self.freed = asyncio.Event()

    async def wait_freed(self, timeout: float) -> None:
        await wait_event(self.freed, timeout)


async def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait (bounded) until `pids` have exited: a process stuck in the GPU driver keeps
    its VRAM. Returns those still there at the deadline."""
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if Path(f"/proc/{p}").exists()]
    while alive and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        alive = [p for p in alive if Path(f"/proc/{p}").exists()]
    return alive


def telemetry() -> list[dict[str, Any]]:
    """Per-GPU utilization and memory, from whichever tool is present; [] where none is."""
    return _nvml() or _rocm_smi()


def _nvml() -> list[dict[str, Any]]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            util = pynvml.nvmlDeviceGetUtilizationRates(handle)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            out.append({"index": str(i), "util": util.gpu, "mem_used": mem.used,
                        "mem_total": mem.total, "source": "nvml", "uuid": uuid})  # fmt: skip
        return out
    except Exception:  # the library is there but no driver: no telemetry
        return []


def _rocm_smi() -> list[dict[str, Any]]:
    tool = shutil.which("rocm-smi")
    if tool is None:
        return []
    try:
        raw = subprocess.run([tool, "--showuse", "--showmeminfo", "vram", "--json"],
                             capture_output=True, text=True, timeout=10).stdout  # fmt: skip
        data = json.loads(raw)
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    out = []
    for key, card in sorted(data.items()):
        if not key.startswith("card"):
            continue
        out.append({
            "index": key.removeprefix("card"),
            "util": _num(card.get("GPU use (%)")),
            "mem_used": _num(card.get("VRAM Total Used Memory (B)")),
            "mem_total": _num(card.get("VRAM Total Memory (B)")),
            "source": "rocm-smi",
        })  # fmt: skip
    return out


def _num(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
