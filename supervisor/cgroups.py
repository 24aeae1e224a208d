"""Which isolation rsupd can use: its own cgroup v2 subtree, or the shim's subreaper tree.

With `Delegate=yes` systemd hands rsupd a cgroup v2 folder it may write to. There each
attempt could get its own cgroup (stop through `cgroup.kill`, `memory.max`, OOM counts in
`memory.events`). Without one (containers, CI, cgroup v1 hosts) the shim, a child subreaper
that kills its whole process tree, remains the mechanism. Only detection lives here so far.
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP = "cgroup"
SUBREAPER = "subreaper"
# Files rsupd must be able to write in its own cgroup to create and run children under it.
WRITABLE = ("cgroup.procs", "cgroup.subtree_control")


def own_cgroup(proc_self: Path = Path("/proc/self")) -> Path | None:
    """This process's cgroup v2 folder, or None without a mounted unified hierarchy."""
    try:
        lines = (proc_self / "cgroup").read_text().splitlines()
        mounts = (proc_self / "mountinfo").read_text().splitlines()
    except OSError:
        return None
    relative = next((ln[3:] for ln in lines if ln.startswith("0::")), None)
    mount = next((ln.split() for ln in mounts if " - cgroup2 " in ln), None)
    if relative is None or mount is None:
        return None
    # mountinfo: id parent major:minor root mount-point ...; `root` is the part of the
    # hierarchy mounted there (not "/" when a container sees only its own subtree).
    root, point = mount[3], mount[4].replace("\\040", " ")
    inside = Path(relative)
    if root != "/":
        if not inside.is_relative_to(root):
            return None  # our cgroup is outside what is mounted: nothing to manage
        inside = Path("/") / inside.relative_to(root)
    return Path(point) / str(inside).lstrip("/")


def delegated(folder: Path) -> bool:
    """True when `folder` is a non-root cgroup v2 folder this process may manage."""
    if not (folder / "cgroup.controllers").is_file():
        return False
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    if not all(os.access(folder / name, os.W_OK) for name in WRITABLE):
        return False
    # cgroup.kill (Linux 5.14) is how an attempt is stopped; the host's root cgroup has none,
    # so it is never taken for ours. memory.max needs the memory controller.
    controllers = (folder / "cgroup.controllers").read_text().split()
    return (folder / "cgroup.kill").exists() and "memory" in controllers


def isolation_mode(proc_self: Path = Path("/proc/self")) -> str:
    """ "cgroup" when a delegated cgroup v2 subtree is available, else "subreaper"."""
    folder = own_cgroup(proc_self)
    try:
        return CGROUP if folder is not None and delegated(folder) else SUBREAPER
    except OSError:
        return SUBREAPER
