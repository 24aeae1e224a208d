"""torchrun's agent lines: the workers it saw fail and the ChildFailedError report's root cause."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

_AGENT_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_FIELD_RANK = re.compile(r"^\s+rank\s*: (\d+) \(local_rank: (\d+)\)")
_FIELD_EXIT = re.compile(r"^\s+exitcode\s*: (-?\d+) \(pid: (\d+)\)")
_FIELD_TRACE = re.compile(r"^\s+traceback\s*: (.*)")
_BLOCK_END = re.compile(r"^(?:-{8,}|={8,}|\[\d+\]:\s*$)")
_ROOT_HEADER = "Root Cause (first observed failure):"


@dataclass
class WorkerExit:
    """One failed worker as the agent reported it."""

    local_rank: int
    rank: int | None = None
    exitcode: int | None = None
    pid: int | None = None
    text: str = ""
    root: bool = False

    def how_it_ended(self) -> str:
        """The exit code or killing signal, and the pid; empty when the agent gave no code."""
        if self.exitcode is None:
            return ""
        if self.exitcode < 0:
            try:
                name = signal.Signals(-self.exitcode).name
            except ValueError:
                name = f"signal {-self.exitcode}"
            return f"killed by {name}, pid {self.pid}"
        return f"exit code {self.exitcode}, pid {self.pid}"


class AgentReport:
    """Fed the lines of output.log no rank prefixed (the agent's), in order."""

    def __init__(self) -> None:
        self.exits: list[WorkerExit] = []  # the ChildFailedError report's entries
        self.failed: WorkerExit | None = None  # the last `failed (exitcode ...)` line
        self._in_root = False
        self._current: WorkerExit | None = None

    def feed(self, text: str) -> WorkerExit | None:
        """Take one line; return the report entry it opens (which names a global rank)."""
        failed = _AGENT_FAILED.search(text)
        if failed:
            code, local, pid = (int(g) for g in failed.groups())
            self.failed = WorkerExit(local, exitcode=code, pid=pid)
        elif _ROOT_HEADER in text:
            self._in_root = True
        elif text.startswith("Failures:"):
            self._in_root = False
        elif (rank := _FIELD_RANK.match(text)) is not None:
            global_rank, local = int(rank.group(1)), int(rank.group(2))
            self._current = WorkerExit(local, global_rank, root=self._in_root)
            self.exits.append(self._current)
            return self._current
        elif self._current is not None:
            self._field(text)
        return None

    def _field(self, text: str) -> None:
        current = self._current
        assert current is not None
        if _BLOCK_END.match(text):
            self._current = None
        elif (code := _FIELD_EXIT.match(text)) is not None:
            current.exitcode, current.pid = int(code.group(1)), int(code.group(2))
        elif (trace := _FIELD_TRACE.match(text)) is not None:
            current.text = trace.group(1).strip()
        elif current.text and text.strip() and not text.startswith("    "):
            current.text = text.strip()  # the exception line that ends the traceback

    def exit_of(self, rank: int | None, local_rank: int | None) -> WorkerExit | None:
        """How the agent saw this rank's process end (by global rank when known), if it said."""
        for ex in reversed(self.exits):
            same = ex.rank == rank if rank is not None else ex.local_rank == local_rank
            if same:
                return ex
        if self.failed is not None and local_rank == self.failed.local_rank:
            return self.failed
        return None
