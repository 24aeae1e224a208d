"""Kernel-log evidence, where the kernel log is readable: OOM kills, GPU resets, Xid errors.

Never required: an unreadable log (containers, no permission) gives no lines.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

LINE = re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")
OOM = re.compile(
    r"Out of memory: Killed process (\d+)|oom-kill:.*\bpid=(\d+)|Memory cgroup out of memory"
)
GPU = re.compile(
    r"amdgpu.*(?:ring \S+ timeout|GPU reset|page fault|VM_L2_PROTECTION_FAULT)"
    r"|NVRM: Xid|GPU has fallen off the bus"
)


def _boot_wall() -> float | None:
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - uptime


def lines_between(start: float, end: float, timeout: float = 2.0) -> list[str]:
    """Kernel messages logged between two wall-clock times (best effort)."""
    dmesg, boot = shutil.which("dmesg"), _boot_wall()
    if dmesg is None or boot is None:
        return []
    try:
        out = subprocess.run([dmesg], capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for raw in out.splitlines():
        match = LINE.match(raw)
        if match and start - 1 <= boot + float(match.group(1)) <= end + 2:
            found.append(match.group(2))
    return found


def oom_kill(start: float, end: float) -> str | None:
    """The kernel's own OOM-kill line for that window, if there is one."""
    return next((line for line in lines_between(start, end) if OOM.search(line)), None)


def gpu_trouble(start: float, end: float) -> list[str]:
    """amdgpu ring timeouts and resets, NVIDIA Xid errors in that window."""
    return [line for line in lines_between(start, end) if GPU.search(line)][:5]
