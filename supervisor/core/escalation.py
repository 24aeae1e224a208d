"""Stopping an attempt: TERM (or the forced signal), a grace, then KILL of the whole tree.

A pure state machine on a clock passed in, so the grace logic is proven without a process
or a sleep. The shim does the TERM -> grace -> KILL of the job itself; rsupd's side asks
the shim and, when the shim has not finished within grace + slack (stuck, or killed),
kills the tree itself.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

SHIM_READY_WAIT = 10.0  # seconds a just-launched shim gets to take charge of its job
SHIM_SLACK = 30.0  # beyond the stop grace, before rsupd kills a stuck shim's job itself

ASK = "ask"  # signal the shim: it stops the job (TERM, grace, KILL of every descendant)
KILL_TREE = "kill_tree"  # rsupd kills the shim, the job's tree and the attempt's cgroup
WAIT = "wait"


@dataclass(frozen=True)
class Action:
    kind: str  # ASK | KILL_TREE | WAIT
    signal: int | None = None
    wait: float = 0.0  # for WAIT: seconds until something is due


@dataclass
class Escalation:
    grace: float
    force: bool = False  # `rsup stop --force`, or a hang: no grace for the job
    slack: float = SHIM_SLACK
    ready_wait: float = SHIM_READY_WAIT
    created: float = 0.0
    asked_at: float | None = None
    killed: bool = False

    @property
    def signal(self) -> int:
        """SIGUSR1 tells the shim to skip the grace; SIGTERM starts it."""
        return int(signal.SIGUSR1 if self.force else signal.SIGTERM)

    def next(self, now: float, shim_ready: bool, ended: bool) -> Action:
        """What to do at `now`: ask the shim once it is ready (or once waiting for it is
        pointless), then wait for the end until grace + slack, then kill the tree."""
        if ended or self.killed:
            return Action(WAIT, wait=0.0)
        if self.asked_at is None:
            if shim_ready or now - self.created >= self.ready_wait:
                self.asked_at = now
                return Action(ASK, signal=self.signal)
            return Action(WAIT, wait=min(0.02, self.created + self.ready_wait - now))
        deadline = self.asked_at + self.grace + self.slack
        if now >= deadline:
            self.killed = True
            return Action(KILL_TREE)
        return Action(WAIT, wait=deadline - now)
