"""Which device a probe runs on: vendor, name, arch and driver, as the detect stage says.

Standard library only; torch is passed in by the caller.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
_VISIBILITY_ENV = (
    "HIP_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HSA_OVERRIDE_GFX_VERSION",
)


def cpu_identity(torch: Any) -> dict[str, Any]:
    """The host CPU: its model name, machine arch and torch's thread count."""
    name = platform.processor() or "unknown"
    try:
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        name = found.group(1).strip() if found else name
    except OSError:
        pass
    return {"vendor": "cpu", "name": name, "arch": platform.machine(), "driver": None,
            "threads": torch.get_num_threads()}  # fmt: skip


def gpu_identity(torch: Any, device: str) -> dict[str, Any]:
    """GPU `device` (cuda or cuda:N) as torch and the driver see it; raises when absent."""
    if not torch.cuda.is_available():
        hip = getattr(torch.version, "hip", None)
        raise RuntimeError(f"torch.cuda.is_available() is False (torch {torch.__version__}, "
                           f"hip {hip}, cuda {torch.version.cuda})")  # fmt: skip
    index = torch.device(device).index or 0
    count = torch.cuda.device_count()
    if index >= count:
        raise RuntimeError(f"no device {device}: {count} GPU(s) visible")
    props = torch.cuda.get_device_properties(index)
    amd = bool(getattr(torch.version, "hip", None))
    compiled: list[str] = list(torch.cuda.get_arch_list())
    arch = _gpu_arch(props, amd, index)
    return {
        "vendor": "amd" if amd else "nvidia",
        "name": props.name,
        "arch": arch,
        "capability": f"{props.major}.{props.minor}",
        "total_memory": int(props.total_memory),
        "uuid": str(getattr(props, "uuid", "")) or None,
        "driver": _driver_version(amd, torch),
        "device_count": count,
        "compiled_archs": compiled,
        "arch_compiled": (arch in compiled) if amd and arch else None,
        "env": {k: os.environ[k] for k in _VISIBILITY_ENV if k in os.environ},
    }


def _gpu_arch(props: Any, amd: bool, index: int) -> str | None:
    if not amd:
        return f"sm_{props.major}{props.minor}"
    name = str(getattr(props, "gcnArchName", "") or "").split(":")[0]
    if name:
        return name
    archs = kfd_gfx_archs()  # torch before 2.0 has no gcnArchName
    return archs[index] if index < len(archs) else None


def _driver_version(amd: bool, torch: Any) -> str | None:
    path = Path("/sys/module/amdgpu/version" if amd else "/proc/driver/nvidia/version")
    try:
        text = path.read_text()
    except OSError:
        text = ""
    if amd:
        return text.strip() or "kernel " + platform.release()
    found = re.search(r"Kernel Module\s+(\S+)", text)
    if found:
        return found.group(1)
    get = getattr(torch._C, "_cuda_getDriverVersion", None)
    return str(get()) if get is not None else None


def kfd_gfx_archs(nodes: Path = KFD_NODES) -> list[str]:
    """The gfx targets of the AMD GPUs the kernel driver lists (``gfx1031``), in node order."""
    archs: list[str] = []
    try:
        entries = sorted((p for p in nodes.iterdir() if p.name.isdigit()), key=_node_number)
    except OSError:
        return archs
    for node in entries:
        try:
            text = (node / "properties").read_text()
        except OSError:
            continue
        found = re.search(r"^gfx_target_version\s+(\d+)", text, re.MULTILINE)
        if found and int(found.group(1)):
            value = int(found.group(1))
            archs.append(f"gfx{value // 10000}{value // 100 % 100:x}{value % 100:x}")
    return archs


def _node_number(node: Path) -> int:
    return int(node.name)
