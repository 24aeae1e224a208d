"""The supervising engine: one asyncio task per job, driven by the job's stored state.

Used by rsupd and by `rsup run`. After a restart the same loop re-adopts whatever the
store says is running, so an attempt is never started twice nor processed twice.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from rsup.supervisor.core import budget
from rsup.supervisor.core import step as core
from rsup.supervisor.core.errors import RequestRefused, UsageError
from rsup.supervisor.core.job import Job
from rsup.supervisor.core.plan import Plan
from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.core.states import JobState
from rsup.supervisor.effects import devices, hooks, launch, retention
from rsup.supervisor.effects.admission import Admission
from rsup.supervisor.effects.cgroups import AttemptCgroups
from rsup.supervisor.effects.paths import Layout
from rsup.supervisor.effects.procwait import signal_if_same, wait_event
from rsup.supervisor.effects.runner import AttemptRunner
from rsup.supervisor.effects.store import Store
from rsup.supervisor.probe import probing

log = structlog.get_logger("rsupd")
S = JobState


DRILLS = ("kill", "hang", "oom")
STORE_RETRY = 5.0  # seconds between tries of a step whose state.db write failed (disk full)


class EngineError(RequestRefused):
    """A request the engine refuses; the message is for the person who asked."""


class DrillError(UsageError):
    """A drill that cannot be: unknown kind, or one this job's kind cannot take."""


@dataclass
class Control:
    """Requests from the API to a job's task."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)
    force: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class Engine:
    def __init__(self, layout: Layout, base_env: dict[str, str] | None = None) -> None:
        self.layout = layout
        self.store = Store(layout.db)
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.controls: dict[str, Control] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.attempts: dict[str, AttemptRunner] = {}
        self.changed = asyncio.Event()
        self.pool = devices.Pool()
        self.admission = Admission(self.store, self.pool, self.base_env, lambda: self.job_done)
        self.cgroups: AttemptCgroups | None = None  # per-attempt cgroups, where rsupd has some
        self.probe_stages: tuple[str, ...] = ()  # from rsupd.toml [probe] extra_stages
        self.keep_attempts = retention.DEFAULT_KEEP  # from rsupd.toml [retention] attempts
        self.job_done = asyncio.Event()  # replaced each time a job ends
        self.listeners: list[Callable[[], None]] = []
        # Called with (job, attempt, bytes) for every piece of job output read (journald).
        self.output_listeners: list[Callable[[str, int, bytes], None]] = []

    # lifecycle of the engine itself --------------------------------------

    async def recover(self) -> None:
        """Pick every unfinished job up again (re-adopting running attempts)."""
        self.layout.ensure_pylib()
        for grave in self.layout.removed_dirs():  # removals cut short by a crash
            await retention.delete_tree(grave)
        self.cgroups = AttemptCgroups.find(self.base_env)
        for job in self.store.jobs():
            if not job.state.terminal:
                if devices.is_gpu(job.device) and job.state != S.QUEUED:
                    if job.spec.share_gpu:
                        self.pool.sharing.add(job.name)
                    self.pool.take(str(job.device), job.name)
                self._readopted(job)
                self._spawn(job.name)

    def _readopted(self, job: Job) -> None:
        """Say so when an attempt started by an earlier rsupd is taken up again."""
        last = self.store.attempt(job.name, job.attempts) if job.attempts else None
        if last is None or last.processed or last.shim_pid is None:
            return
        alive = launch.alive_as(last.shim_pid, last.shim_start_time)
        self.store.emit(job.name, last.n, "job_readopted", state=job.state.value,
                        shim_pid=last.shim_pid, shim_alive=alive)  # fmt: skip

    async def close(self) -> None:
        """Stop supervising (the jobs themselves keep running under their shims)."""
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        self.store.close()

    # requests ------------------------------------------------------------

    def submit(self, spec: JobSpec, owner_uid: int) -> Job:
        """Store a new job (or a finished one started again) and start supervising it."""
        name = spec.name
        job = self.store.get_job(name)
        if job is not None and not job.state.terminal:
            raise EngineError(f"job {name} is already {job.state.value}; stop it first")
        if job is None:
            now = time.time()
            job = Job(name, owner_uid, spec, S.QUEUED, "submitted", now, now)
            self.store.add_job(job)
            self.store.emit(name, None, "job_submitted", owner_uid=owner_uid)
        else:  # a new run: fresh counters; earlier attempts and events stay as history
            with self.store.tx():
                self.store.update_job(name, spec=spec, stalled=0, restarts=0, failures=0,
                                      same_fault=0, plan=Plan(), resume_to=None, device=None,
                                      drills=[], hang_timeout=None, last_fault=None,
                                      progress=None, next_start_at=None,
                                      run_from=job.attempts)  # fmt: skip
                self.store.move(name, S.QUEUED, f"started again (a new run after attempt "
                                f"{job.attempts}; earlier attempts stay as history)")  # fmt: skip
        self._spawn(name)
        return self.get(name)

    def get(self, name: str) -> Job:
        job = self.store.get_job(name)
        if job is None:
            raise EngineError(f"no job named {name}; `rsup status` lists the jobs")
        return job

    def stop(self, name: str, force: bool = False) -> Job:
        job = self.get(name)
        control = self.controls.get(name)
        if job.state.terminal or control is None:
            return job
        control.force = control.force or force
        control.stop.set()
        return job

    async def remove(self, name: str) -> None:
        """Forget a finished job: its rows and its folder (attempt logs and the last-good
        checkpoint copies, which a new job of the same name must never resume from)."""
        job = self.get(name)
        if not job.state.terminal:
            raise EngineError(f"job {name} is {job.state.value}; stop it before removing it")
        task = self.tasks.get(name)
        if task is not None and not task.done():
            raise EngineError(f"job {name} is {job.state.value} but its completion hooks are "
                              "still running; remove it once they are done (rsup events "
                              f"{name} shows hook_ran)")  # fmt: skip
        # The folder is set aside first: if that fails nothing is forgotten, and if rsupd
        # dies after it, recover() finishes the removal.
        folder, grave = self.layout.job_dir(name), self.layout.removed_dir(name)
        try:
            if folder.exists():
                folder.rename(grave)
        except OSError as exc:
            raise EngineError(f"cannot remove job {name}: {folder}: {exc.strerror}; "
                              "nothing was removed") from None  # fmt: skip
        self.store.delete_job(name)
        for table in (self.tasks, self.controls, self.attempts):
            table.pop(name, None)
        await retention.delete_tree(grave)

    def inject(self, name: str, kind: str, at_epoch: int | None) -> dict[str, Any]:
        """A fault drill: the real fault (SIGKILL, SIGSTOP, a real allocation failure)."""
        if kind not in DRILLS:
            raise DrillError(f"unknown drill {kind!r}; choose one of {', '.join(DRILLS)}")
        job = self.get(name)
        if job.state.terminal:
            raise EngineError(f"job {name} is {job.state.value}; start it before drilling it")
        drill = {"kind": kind, "at_epoch": at_epoch, "id": len(job.drills) + 1}
        self.store.update_job(name, drills=[*job.drills, drill])
        runner = self.attempts.get(name)
        if runner is not None and runner.monitor is not None:
            runner.monitor.add_drill(drill)
        self.store.emit(name, job.attempts or None, "drill_requested", **drill)
        return drill

    async def wait_terminal(self, name: str) -> Job:
        task = self.tasks.get(name)
        if task is not None:
            await asyncio.shield(task)
        return self.get(name)

    # the per-job task ----------------------------------------------------

    def _spawn(self, name: str) -> None:
        old = self.tasks.get(name)
        if old is not None and not old.done():
            return
        self.controls[name] = Control()
        task = asyncio.get_running_loop().create_task(self._supervise(name), name=f"job:{name}")
        self.tasks[name] = task

    async def _supervise(self, name: str) -> None:
        control = self.controls[name]
        steps: dict[JobState, Callable[[Job, Control], Awaitable[None]]] = {
            S.QUEUED: self._queued,
            S.PROBING: self._probing,
            S.BACKOFF: self._backoff,
            S.STARTING: self._starting,
            S.RUNNING: self._running,
            S.STOPPING: self._running,
        }
        try:
            while True:
                job = self.store.get_job(name)
                if job is None or job.state.terminal:
                    break
                try:
                    await steps[job.state](job, control)
                except sqlite3.OperationalError as exc:
                    # The step is taken again: an unprocessed attempt is processed once.
                    log.error("cannot write the state database; the job waits and tries again",
                              job=name, error=str(exc), db=str(self.layout.db),
                              retry_in=STORE_RETRY, fix="free space in the state dir")  # fmt: skip
                    await asyncio.sleep(STORE_RETRY)
                self._notify()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("job task crashed", job=name)
            self._fail_safe(name)
        await self.pool.release(name)
        self._notify()
        self.job_done.set()
        self.job_done = asyncio.Event()
        await self._after_end(name)

    async def _after_end(self, name: str) -> None:
        job = self.store.get_job(name)
        if job is not None and job.state.terminal:
            await hooks.run_hooks(self.store, job, job.state.value, self.base_env)

    def _fail_safe(self, name: str) -> None:
        """A bug in rsupd must not leave a job 'running' with nobody watching it: stop its
        attempt's whole tree (the shim does it) and fail the job, saying why."""
        job = self.store.get_job(name)
        if job is None or job.state.terminal:
            return
        last = self.store.last_attempt(name)
        if last is not None and not last.processed:
            signal_if_same(last.shim_pid, last.shim_start_time, signal.SIGUSR1)
            self.store.update_attempt(name, last.n, processed=1, outcome="abandoned")
        self.store.move(name, S.FAILED, "internal error in rsupd (see its log); attempt stopped")

    def _notify(self) -> None:
        self.changed.set()
        for listener in self.listeners:
            listener()

    async def _queued(self, job: Job, control: Control) -> None:
        if control.stop.is_set():
            self.store.move(job.name, S.STOPPED, "stopped before it started")
            return
        if not await self.admission.dependencies_ready(job, control.stop):
            return
        wanted = devices.resolve(job.spec.device, self.base_env)
        if wanted is None:
            known = ", ".join(devices.gpu_ids(self.base_env)) or "none readable"
            reason = f"no GPU here has the id {job.spec.device} (ids: {known})"
            self.store.move(job.name, S.FAILED, reason)
            return
        device = job.device or self.admission.pick_device(job, wanted)
        if device is None:
            await self.admission.wait_for_gpu(job, control.stop)
            return
        self.store.update_job(job.name, device=device)
        if job.name in self.pool.waiting:
            self.pool.waiting.remove(job.name)
        if probing.wants_probe(job, device):
            self.store.move(job.name, S.PROBING, f"probing {device} before trusting it")
        else:
            self.store.move(job.name, S.STARTING, f"starting on {device}")

    async def _probing(self, job: Job, control: Control) -> None:
        device = job.device or "cpu"
        result = await probing.probe_for(job, device, self.layout, self.base_env, self.probe_stages)
        plan = job.plan.with_env(result.env) if result.env else job.plan
        self.store.update_job(job.name, device=result.device or device, plan=plan)
        if result.device == "cpu":
            await self.pool.release(job.name)
        self.store.emit(
            job.name,
            job.attempts or None,
            "probe_verdict",
            verdict=result.report["verdict"],
            device=result.report["device"],
            env=result.env,
            reason=result.reason,
            stages=[
                {k: s[k] for k in ("name", "status", "seconds", "error")}
                for s in result.report["stages"]
            ],
        )
        if control.stop.is_set():
            self.store.move(job.name, S.STOPPED, "stopped while probing")
        elif result.device is None:
            self.store.move(job.name, S.FAILED, result.reason)
        else:
            self.store.move(job.name, S.STARTING, result.reason)

    async def _backoff(self, job: Job, control: Control) -> None:
        # a rented box bills through the backoff too: the budget holds here as well
        first = self.store.first_started(job.name, job.run_from)
        delay = max(0.0, (job.next_start_at or 0.0) - time.time())
        left = budget.seconds_left(job.spec, budget.spent(job.spec, first, time.time()))
        wait = delay if left is None else min(delay, left)
        if await wait_event(control.stop, wait):
            why = "stopped during backoff; the restart was cancelled"
            self.store.move(job.name, S.STOPPED, why)
            return
        used = budget.spent(job.spec, first, time.time())
        state, reason = core.backoff_over(job, used, limit_first=left is not None and left <= delay)
        self.store.move(job.name, state, reason, job.attempts or None)

    async def _starting(self, job: Job, control: Control) -> None:
        runner = self._runner(job)
        attempt = runner.adoptable()
        if attempt is None:
            if control.stop.is_set():
                self.store.move(job.name, S.STOPPED, "stopped before the attempt started")
                return
            if not await runner.prepare(job, self.base_env):
                return
            attempt = runner.launch(self.base_env)
        self.store.move(job.name, S.RUNNING, f"attempt {attempt.n} running", attempt.n)

    async def _running(self, job: Job, control: Control) -> None:
        runner = self._runner(job)
        result = await runner.supervise(control)
        n = job.attempts
        if isinstance(result, core.Step):
            self.commit_step(job.name, n, result)
            self.carry_out(job.name, result.effects)
        else:  # a decision an older rsupd stored without its move
            self.store.move(job.name, result[0], result[1], n)
        await retention.prune(self.store, self.layout, job.name, n, self.keep_attempts)

    def commit_step(self, name: str, n: int, step: core.Step) -> None:
        """The attempt's end in one transaction: attempt row, job row, events, state move."""
        with self.store.tx("attempt_end"):
            self.store.update_attempt(name, n, **step.attempt)
            self.store.update_job(name, **step.job)
            for event, fields in step.events:
                self.store.emit(name, n, event, **fields)
            self.store.move(name, step.state, step.reason, n)

    def carry_out(self, name: str, effects: tuple[core.Effect, ...]) -> None:
        for effect in effects:
            if effect.kind == core.INVALIDATE_PROBE:
                probing.invalidate(self.layout, effect.device)

    def _runner(self, job: Job) -> AttemptRunner:
        runner = self.attempts.get(job.name)
        if runner is None:
            runner = AttemptRunner(
                self.store, self.layout, job.name, self.output_listeners, self.cgroups
            )
            self.attempts[job.name] = runner
        return runner


__all__ = ["Engine", "EngineError", "launch"]
