"""Which isolation rsupd can use: its own cgroup v2 subtree, or the shim's subreaper tree.

With `Delegate=yes` systemd hands rsupd a cgroup v2 folder it may write to. There each
attempt could get its own cgroup (stop through `cgroup.kill`, `memory.max`, OOM counts in
`memory.events`). Without one (containers, CI, cgroup v1 hosts) the shim, a child subreaper
that kills its whole process tree, remains the mechanism.
"""

from __future__ import annotations

import os
import time
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
    if os.environ.get(ROOT_ENV):
        return CGROUP if _usable(Path(os.environ[ROOT_ENV])) else SUBREAPER
    folder = own_cgroup(proc_self)
    try:
        return CGROUP if folder is not None and delegated(folder) else SUBREAPER
    except OSError:
        return SUBREAPER


ROOT_ENV = "RSUP_CGROUP_ROOT"  # a cgroup v2 folder to put attempts under (tests, odd hosts)


class AttemptCgroups:
    """One cgroup v2 folder per attempt under `base`: stop with cgroup.kill (setsid'ed and
    double-forked processes included), `limits.memory` as memory.max where the memory
    controller is enabled, and memory.events' oom_kill as host_oom evidence."""

    def __init__(self, base: Path) -> None:
        self.base = base

    @classmethod
    def find(cls, env: dict[str, str] | None = None) -> AttemptCgroups | None:
        """From $RSUP_CGROUP_ROOT, else rsupd's own delegated cgroup (rsupd then moves
        itself into a leaf, since a cgroup with children may hold no processes)."""
        env = dict(os.environ if env is None else env)
        if env.get(ROOT_ENV):
            base = Path(env[ROOT_ENV])
            return cls(base) if _usable(base) else None
        own = own_cgroup()
        if own is None or not delegated(own):
            return None
        try:
            _leaf(own)
        except OSError:
            return None
        return cls(own / "attempts")

    def folder(self, job: str, n: int) -> Path:
        return self.base / f"{job}-{n}"

    def create(self, job: str, n: int, memory_max: int | None) -> Path | None:
        folder = self.folder(job, n)
        try:
            self.base.mkdir(exist_ok=True)
            _enable(self.base, "memory")
            folder.mkdir(exist_ok=True)
            if memory_max is not None and (folder / "memory.max").exists():
                (folder / "memory.max").write_text(f"{memory_max}\n")
        except OSError:
            return None
        return folder

    @staticmethod
    def kill(folder: Path) -> bool:
        """SIGKILL every process in the attempt's cgroup at once."""
        try:
            (folder / "cgroup.kill").write_text("1\n")
        except OSError:
            return False
        return True

    @staticmethod
    def oom_kills(folder: Path) -> int:
        try:
            for line in (folder / "memory.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    @staticmethod
    def remove(folder: Path) -> None:
        """Remove the folder once it is empty (a kill is asynchronous: retry briefly)."""
        for _ in range(50):
            try:
                folder.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def _usable(folder: Path) -> bool:
    return (folder / "cgroup.procs").is_file() and os.access(folder, os.W_OK | os.X_OK)


def _leaf(own: Path) -> None:
    leaf = own / "rsupd"
    leaf.mkdir(exist_ok=True)
    (leaf / "cgroup.procs").write_text(f"{os.getpid()}\n")
    _enable(own, "memory")


def _enable(folder: Path, controller: str) -> None:
    available = (folder / "cgroup.controllers").read_text().split()
    if controller in available:
        (folder / "cgroup.subtree_control").write_text(f"+{controller}\n")
