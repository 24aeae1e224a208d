"""QUEUED: may the job start yet? Its `after:` jobs, and a device for it (GPUs are held
one job at a time, first come first served, unless every holder allows sharing)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from rsup.supervisor.core.job import Job
from rsup.supervisor.core.states import JobState
from rsup.supervisor.effects import devices
from rsup.supervisor.effects.procwait import wait_any
from rsup.supervisor.effects.store import Store

S = JobState
GPU_WAIT_POLL = 5.0  # a queued job looks again at least this often


class Admission:
    def __init__(self, store: Store, pool: devices.Pool, base_env: dict[str, str],
                 job_done: Callable[[], asyncio.Event]) -> None:  # fmt: skip
        self.store, self.pool, self.base_env, self.job_done = store, pool, base_env, job_done

    async def dependencies_ready(self, job: Job, stop: asyncio.Event) -> bool:
        """`after:` jobs must have succeeded; one that failed or stopped fails this one."""
        waiting = []
        for dep in job.spec.after:
            other = self.store.get_job(dep)
            if other is None or other.state in (S.FAILED, S.STOPPED):
                why = "does not exist" if other is None else f"is {other.state.value}"
                self.store.move(job.name, S.FAILED, f"dependency {dep} {why}; not started")
                return False
            if other.state != S.SUCCEEDED:
                waiting.append(f"{dep} ({other.state.value})")
        if not waiting:
            return True
        reason = f"waiting for {', '.join(waiting)} to succeed"
        if job.reason != reason:
            self.store.update_job(job.name, reason=reason)
            self.store.emit(job.name, None, "queued", reason=reason)
        await wait_any([self.job_done(), stop], GPU_WAIT_POLL)
        return False

    def pick_device(self, job: Job, wanted: str) -> str | None:
        """A device for the job (`wanted`: its spec's, stable ids resolved), holding it;
        None while every fitting GPU is held."""
        if wanted == "cpu":
            return "cpu"
        if job.spec.share_gpu:
            self.pool.sharing.add(job.name)
        gpus = devices.visible_gpus(self.base_env)
        if wanted == "auto" and not gpus:
            return "cpu"
        if self.earlier_waiter(job):
            return None  # first come, first served
        if wanted == "auto":
            count = devices.gpus_wanted(job.spec)
            if count > len(gpus):
                return "cpu" if job.spec.fallback.cpu else None
            return self.pool.free_one(gpus, job.name, count)
        return wanted if self.pool.take(wanted, job.name) else None

    def earlier_waiter(self, job: Job) -> bool:
        """Another job submitted before this one is still queued for a GPU."""
        for other in self.pool.waiting:
            peer = self.store.get_job(other)
            if peer is None or other == job.name or peer.state != S.QUEUED:
                continue
            if peer.created < job.created:
                return True
        return False

    async def wait_for_gpu(self, job: Job, stop: asyncio.Event) -> None:
        if job.name not in self.pool.waiting:
            self.pool.waiting.append(job.name)
        holders = sorted(set(self.pool.held.values()))
        reason = f"waiting for a free GPU (held by {', '.join(holders) or 'another job'})"
        if job.reason != reason:
            self.store.update_job(job.name, reason=reason)
            self.store.emit(job.name, None, "queued", reason=reason)
        await wait_any([self.pool.freed, stop], GPU_WAIT_POLL)
