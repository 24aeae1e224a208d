"""Server-sent events for the dashboard: pushed when the engine or the store says so.

Nothing polls. The engine's listeners mark the jobs table stale, the store's listeners
hand over each committed event, the watcher's output listeners say a job printed; each
kind is coalesced for a moment, so a burst (a log flood, twenty jobs changing together)
makes one message per client, not thousands.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

log = structlog.get_logger("rsupd")

COALESCE = 0.2  # seconds a burst of changes is gathered into one message
QUEUE_LIMIT = 256  # a client this far behind is dropped; its browser reconnects
KEEPALIVE = 15.0

Status = Callable[[int], Awaitable[list[dict[str, Any]]]]  # uid -> the jobs it may see
Visible = Callable[[str, int], bool]  # (job, uid) -> may this user see it


@dataclass(eq=False)
class Client:
    uid: int
    job: str | None  # the job page follows one job's events and output
    queue: asyncio.Queue[bytes | None] = field(default_factory=lambda: asyncio.Queue(QUEUE_LIMIT))

    def send(self, kind: str, data: Any) -> bool:
        """Queue one message; False when the client is too far behind to keep."""
        try:
            self.queue.put_nowait(frame(kind, data))
        except asyncio.QueueFull:
            return False
        return True


def frame(kind: str, data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, default=str)}\n\n".encode()


class Hub:
    """Every connected dashboard, and what each of them is told."""

    def __init__(self, status: Status, visible: Visible) -> None:
        self.status = status
        self.visible = visible
        self.clients: set[Client] = set()
        self._jobs_due: asyncio.TimerHandle | None = None
        self._output: dict[str, int] = {}  # job -> attempt that printed since the last flush
        self._output_due: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # listeners (called on rsupd's loop; they only schedule) ----------------------

    def jobs_changed(self) -> None:
        if self.clients and self._jobs_due is None:
            loop = asyncio.get_running_loop()
            self._jobs_due = loop.call_later(COALESCE, self._spawn_jobs)

    def on_event(self, record: dict[str, Any]) -> None:
        job = str(record.get("job"))
        for client in list(self.clients):
            if client.job == job and self.visible(job, client.uid):
                self._keep(client, client.send("event", record))

    def on_output(self, job: str, attempt: int, _data: bytes) -> None:
        if not any(c.job == job for c in self.clients):
            return
        self._output[job] = attempt
        if self._output_due is None:
            loop = asyncio.get_running_loop()
            self._output_due = loop.call_later(COALESCE, self._flush_output)

    # sending -------------------------------------------------------------------

    def _spawn_jobs(self) -> None:
        self._jobs_due = None
        task = asyncio.get_running_loop().create_task(self._send_jobs())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_jobs(self) -> None:
        by_uid: dict[int, list[dict[str, Any]]] = {}
        for client in list(self.clients):
            if client.uid not in by_uid:
                try:
                    by_uid[client.uid] = await self.status(client.uid)
                except Exception as exc:  # the dashboard must never take rsupd down
                    log.error("dashboard update failed", error=repr(exc))
                    return
            self._keep(client, client.send("jobs", by_uid[client.uid]))

    def _flush_output(self) -> None:
        self._output_due, pending = None, self._output
        self._output = {}
        for client in list(self.clients):
            attempt = pending.get(client.job or "")
            if attempt is not None and self.visible(str(client.job), client.uid):
                self._keep(client, client.send("output", {"job": client.job, "attempt": attempt}))

    def _keep(self, client: Client, ok: bool) -> None:
        if not ok:
            self.drop(client)

    # clients -------------------------------------------------------------------

    def add(self, client: Client) -> None:
        self.clients.add(client)

    def drop(self, client: Client) -> None:
        """Forget a client; its stream ends (the browser's EventSource reconnects)."""
        if client in self.clients:
            self.clients.discard(client)
            while True:
                try:
                    client.queue.put_nowait(None)
                    break
                except asyncio.QueueFull:
                    client.queue.get_nowait()

    def close(self) -> None:
        for handle in (self._jobs_due, self._output_due):
            if handle is not None:
                handle.cancel()
        for client in list(self.clients):
            self.drop(client)
        for task in self._tasks:
            task.cancel()
