"""Every Python thread's stack of a hung job, taken with py-spy before the kill.

`py-spy dump --pid P` reads a running process's stacks without stopping it for long. The
whole dump goes to the attempt's `stacks.txt`; the top frames of each process's threads
go into the `hang_detected` event. Where ptrace is not allowed (a container without
SYS_PTRACE, kernel.yama.ptrace_scope), the event says so and the stop goes on.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil

STACKS_TXT = "stacks.txt"
DUMP_TIMEOUT = 10.0  # seconds per process
MAX_PROCESSES = 8  # the job and its busiest children (DataLoader workers, ranks)
TOP_FRAMES = 5


@dataclass(frozen=True)
class Stacks:
    top: dict[str, list[str]] = field(default_factory=dict)  # "pid thread" -> top frames
    file: str | None = None
    error: str | None = None  # why there are none (no py-spy, ptrace refused...)

    def as_fields(self) -> dict[str, object]:
        if self.error and not self.top:
            return {"stacks_error": self.error}
        fields: dict[str, object] = {"stacks": self.top, "stacks_file": self.file}
        if self.error:
            fields["stacks_error"] = self.error
        return fields


def py_spy() -> str | None:
    """py-spy next to rsupd's interpreter (its venv), else on PATH."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


def python_processes(root_pid: int | None) -> list[int]:
    """The Python processes of a job's tree, the job first."""
    if root_pid is None:
        return []
    try:
        root = psutil.Process(root_pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    found = []
    for proc in tree:
        try:
            if "python" in proc.name().lower() or "python" in (proc.cmdline() or [""])[0]:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found[:MAX_PROCESSES]


async def capture(root_pid: int | None, attempt_dir: Path) -> Stacks:
    tool = py_spy()
    if tool is None:
        return Stacks(error="py-spy is not installed next to rsupd; no stacks taken")
    pids = python_processes(root_pid)
    if not pids:
        return Stacks(error="no Python process left in the job's tree")
    dumps, errors = [], []
    for pid in pids:
        text, error = await _dump(tool, pid)
        if text:
            dumps.append(text)
        if error:
            errors.append(f"pid {pid}: {error}")
    out = attempt_dir / STACKS_TXT
    if dumps:
        out.write_text("\n".join(dumps))
    top = {key: frames for text in dumps for key, frames in top_frames(text).items()}
    error = "; ".join(errors[:3]) or None
    return Stacks(top, str(out) if dumps else None, error)


async def _dump(tool: str, pid: int) -> tuple[str, str | None]:
    """A consistent dump first; a process py-spy cannot pause (one stopped with SIGSTOP,
    as the hang drill does) is read without pausing it."""
    text, error = await _dump_once(tool, pid, ())
    if text:
        return text, None
    fallback, _ = await _dump_once(tool, pid, ("--nonblocking",))
    return (fallback, None) if fallback else ("", error)


async def _dump_once(tool: str, pid: int, extra: tuple[str, ...]) -> tuple[str, str | None]:
    try:
        proc = await asyncio.create_subprocess_exec(
            tool, "dump", *extra, "--pid", str(pid), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    except OSError as exc:
        return "", f"cannot run py-spy: {exc}"
    try:
        out, err = await asyncio.wait_for(proc.communicate(), DUMP_TIMEOUT)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return "", f"py-spy did not answer within {DUMP_TIMEOUT:g} s"
    if proc.returncode != 0:
        said = [line.strip() for line in err.decode(errors="replace").splitlines()]
        said = [line for line in said if line.startswith(("Error:", "0:"))] or said
        reason = " ".join(said[:2]) if said else f"py-spy exited {proc.returncode}"
        if "ermission" in reason or "ptrace" in reason.lower():
            reason += " (ptrace is not allowed here: run rsupd as root or with CAP_SYS_PTRACE)"
        return "", reason
    return out.decode(errors="replace"), None


def top_frames(dump: str) -> dict[str, list[str]]:
    """{"<pid> <thread>": [innermost frame, ...]} from one py-spy dump."""
    pid, key = "?", None
    frames: dict[str, list[str]] = {}
    for line in dump.splitlines():
        if line.startswith("Process "):
            pid = line.split()[1].rstrip(":")
        elif line.startswith("Thread "):
            key = f"{pid} {line.split(':', 1)[-1].strip()}"
            frames[key] = []
        elif key is not None and line.startswith("    ") and len(frames[key]) < TOP_FRAMES:
            frames[key].append(line.strip())
    return frames
