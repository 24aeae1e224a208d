"""One job's attempts: launch through the shim, re-adopt, stop, and process each end once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from rsup.supervisor.core import policy
from rsup.supervisor.core.states import JobState
from rsup.supervisor.effects import devices, launch, yolojob
from rsup.supervisor.effects.cgroups import AttemptCgroups
from rsup.supervisor.effects.launch import RunAs
from rsup.supervisor.effects.outcome import build_outcome, describe, history_for, limits_for
from rsup.supervisor.effects.paths import Layout
from rsup.supervisor.effects.procwait import kill_marked, kill_tree, signal_if_same, wait_exit
from rsup.supervisor.effects.store import Attempt, Job, Store
from rsup.supervisor.effects.watcher import AttemptMonitor, OutputListener
from rsup.supervisor.probe import probing
from rsup.supervisor.recognize.remedies import miopen_cache_env
from rsup.workers import constants as C

if TYPE_CHECKING:
    from rsup.supervisor.effects.engine import Control

log = structlog.get_logger("rsupd")
S = JobState
SHIM_READY_WAIT = 10.0  # seconds a just-launched shim gets to take charge of its job
SHIM_SLACK = 30.0  # beyond the stop grace, before rsupd kills a stuck shim's job itself
NEXT_STATE = {
    policy.SUCCEED: S.SUCCEEDED,
    policy.FAIL: S.FAILED,
    policy.STOP: S.STOPPED,
    policy.RESTART: S.BACKOFF,
    policy.REPROBE: S.BACKOFF,
}


class AttemptRunner:
    def __init__(
        self,
        store: Store,
        layout: Layout,
        job: str,
        output_listeners: list[OutputListener],
        cgroups: AttemptCgroups | None = None,
    ) -> None:
        self.store, self.layout, self.job = store, layout, job
        self.output_listeners = output_listeners
        self.cgroups = cgroups
        self.monitor: AttemptMonitor | None = None
        self.stop_reason: str | None = None  # why rsupd itself stopped the job (budget)

    # starting ------------------------------------------------------------

    def adoptable(self) -> Attempt | None:
        """The last attempt if it is still alive or ended unprocessed (after a restart)."""
        last = self.store.last_attempt(self.job)
        if last is None or last.processed:
            return None
        if last.shim_pid is None and launch.exit_info(Path(last.dir)) is None:
            self.store.update_attempt(self.job, last.n, processed=1, outcome="never started")
            return None
        return last

    def launch(self, base_env: dict[str, str]) -> Attempt:
        job = self.store.get_job(self.job)
        assert job is not None
        n = job.attempts + 1
        adir = self.layout.attempt_dir(self.job, n)
        adir.mkdir(parents=True, exist_ok=True)
        who = launch.run_as(job.owner_uid)
        spec = _with_overrides(job.spec, job.overrides)
        argv = launch.job_argv(spec, adir)
        extra = {**self._attempt_env(n, adir, job.device), **job.overrides.get("env", {})}
        env = launch.job_env(base_env, spec, extra, who)
        self._prepare(adir, job, who)
        attempt = Attempt(self.job, n, str(adir), time.time())
        self.store.add_attempt(attempt)
        self.store.update_job(self.job, attempts=n)
        memory = (spec.get("limits") or {}).get("memory")
        cgroup = self.cgroups.create(self.job, n, memory) if self.cgroups else None
        pid = launch.start_shim(launch.shim_argv(spec, adir, argv, who, cgroup), env)
        attempt.shim_pid, attempt.shim_start_time = pid, launch.start_time(pid)
        self.store.update_attempt(
            self.job, n, shim_pid=pid, shim_start_time=attempt.shim_start_time
        )
        self.store.emit(
            self.job,
            n,
            "attempt_started",
            argv=argv,
            device=job.device,
            shim_pid=pid,
            overrides=job.overrides,
        )
        return attempt

    def _attempt_env(self, n: int, adir: Path, device: str | None) -> dict[str, str]:
        env = {
            C.ENV_JOB: self.job,
            C.ENV_ATTEMPT: str(n),
            C.ENV_ATTEMPT_DIR: str(adir),
            C.ENV_EVENTS_FILE: str(adir / C.EVENTS_JSONL),
            C.ENV_DEVICE: device or "cpu",
            "PYTHONPATH": str(self.layout.pylib),  # put in front of the job's own
        }
        if device != "cpu":  # kernels compiled once are reused by every later attempt
            env.update(miopen_cache_env(self.layout.root))
        if device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = env["HIP_VISIBLE_DEVICES"] = ""
        elif device and devices.is_gpu(device):
            visible = ",".join(devices.indexes(device))  # one GPU, or one per torchrun rank
            env["CUDA_VISIBLE_DEVICES"] = env["HIP_VISIBLE_DEVICES"] = visible
        return env

    def _prepare(self, adir: Path, job: Job, who: RunAs | None) -> None:
        (adir / C.EVENTS_JSONL).touch()
        if job.spec.get("kind") == "ultralytics":
            last_good = self.layout.job_dir(self.job) / "last-good"
            last_good.mkdir(parents=True, exist_ok=True)
            yolojob.write_config(adir, job, last_good, job.device)
        if who is not None:
            for path in (adir, adir / C.EVENTS_JSONL):
                os.chown(path, who.uid, who.gid)

    # running -------------------------------------------------------------

    async def supervise(self, control: Control) -> tuple[JobState, str, int]:
        attempt = self.store.last_attempt(self.job)
        assert attempt is not None  # RUNNING/STOPPING always has one
        if attempt.processed:  # rsupd died after deciding but before moving on
            return self._apply_stored(attempt)
        self.monitor = AttemptMonitor(self.store, self.job, attempt, self.output_listeners)
        watch = asyncio.get_running_loop().create_task(self.monitor.run())
        try:
            await self._wait_end(attempt, control)
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
        self.monitor.drain()
        return self._finish(attempt)

    async def _wait_end(self, attempt: Attempt, control: Control) -> None:
        ended = asyncio.ensure_future(wait_exit(attempt.shim_pid or -1, attempt.shim_start_time))
        job = self.store.get_job(self.job)
        if job is not None and job.state == S.STOPPING:
            control.stop.set()  # a stop was under way when rsupd restarted: ask again
        assert self.monitor is not None
        hang = asyncio.ensure_future(self.monitor.hung.wait())
        stop = asyncio.ensure_future(control.stop.wait())
        limit = asyncio.ensure_future(self.monitor.limit_hit.wait())
        try:
            await asyncio.wait({ended, stop, hang, limit}, return_when=asyncio.FIRST_COMPLETED)
            if limit.done() and not stop.done():
                self.stop_reason = self.monitor.limit_reason
            if not ended.done():
                await self._stop_attempt(attempt, control, ended, hang.done() and not stop.done())
        finally:
            for fut in (ended, stop, hang, limit):
                fut.cancel()

    async def _stop_attempt(
        self, attempt: Attempt, control: Control, ended: asyncio.Future[None], for_hang: bool
    ) -> None:
        job = self.store.get_job(self.job)
        assert job is not None
        if not for_hang and job.state == S.RUNNING:
            self.store.move(self.job, S.STOPPING, self.stop_reason or "stop requested", attempt.n)
        sig = signal.SIGUSR1 if control.force or for_hang else signal.SIGTERM
        await self._shim_ready(attempt, ended)
        signal_if_same(attempt.shim_pid, attempt.shim_start_time, sig)
        grace = float((job.spec.get("stop") or {}).get("grace", 30))
        await asyncio.wait({ended}, timeout=grace + SHIM_SLACK)
        if not ended.done():
            self._kill_orphaned(attempt, "the shim did not finish stopping the job")
            await ended

    def _cgroup(self, attempt: Attempt) -> Path | None:
        if self.cgroups is None:
            return None
        folder = self.cgroups.folder(self.job, attempt.n)
        return folder if folder.is_dir() else None

    async def _shim_ready(self, attempt: Attempt, ended: asyncio.Future[None]) -> None:
        """A signal that lands before the shim installed its handlers would kill the shim
        alone and orphan the job: wait (bounded) until shim.json says it is in charge."""
        deadline = time.monotonic() + SHIM_READY_WAIT
        while launch.shim_info(Path(attempt.dir)) is None and not ended.done():
            if time.monotonic() > deadline:
                return
            await asyncio.wait({ended}, timeout=0.02)

    def _kill_orphaned(self, attempt: Attempt, why: str) -> None:
        info = launch.shim_info(Path(attempt.dir)) or {}
        signal_if_same(attempt.shim_pid, attempt.shim_start_time, signal.SIGKILL)
        killed = kill_tree(info.get("job_pid"), info.get("job_start_time"))
        folder = self._cgroup(attempt)
        if folder is not None and AttemptCgroups.kill(folder):
            killed += 1  # and everything else in the attempt's cgroup
        killed += kill_marked(C.ENV_ATTEMPT_DIR, str(attempt.dir))
        self.store.emit(self.job, attempt.n, "tree_killed", reason=why, processes=killed)

    # ending --------------------------------------------------------------

    def _finish(self, attempt: Attempt) -> tuple[JobState, str, int]:
        adir = Path(attempt.dir)
        exit_data = launch.exit_info(adir)
        if exit_data is None:
            self._kill_orphaned(attempt, "the shim died without writing exit.json")
        folder = self._cgroup(attempt)
        if folder is not None:
            exit_data = {**(exit_data or {}), "cgroup_oom_kills": AttemptCgroups.oom_kills(folder)}
            AttemptCgroups.kill(folder)  # nothing of this attempt may outlive it
            AttemptCgroups.remove(folder)
        job = self.store.get_job(self.job)
        assert job is not None and self.monitor is not None
        outcome = build_outcome(job, attempt, exit_data, self.monitor)
        history = history_for(job, outcome, self.monitor)
        decision = policy.decide(outcome, history, limits_for(job.spec))
        self._record(job.name, attempt, exit_data, outcome, history, decision)
        return self._apply(decision, attempt.n)

    def _record(
        self,
        name: str,
        attempt: Attempt,
        exit_data: dict[str, Any] | None,
        outcome: policy.Outcome,
        history: policy.History,
        decision: policy.Decision,
    ) -> None:
        job = self.store.get_job(name)
        assert job is not None
        fault = None if outcome.category == C.NONE else outcome.category
        overrides = {**job.overrides, **decision.overrides}
        if decision.action == policy.REPROBE:
            overrides["reprobe"] = True
        if fault in policy.GPU_CATEGORIES:
            probing.invalidate(self.layout, job.device)
        self.store.update_attempt(
            name,
            attempt.n,
            ended=time.time(),
            exit=exit_data,
            fault=fault,
            outcome=json.dumps(decision.as_event()),
            processed=1,
        )
        self.store.update_job(
            name,
            restarts=decision.restarts,
            stalled=history.stalled,
            overrides=overrides,
            failures=history.failures,
            same_fault=history.same_category,
            last_fault=fault or job.last_fault,
            next_start_at=time.time() + decision.delay,
            device=overrides.get("device", job.device),
        )
        self.store.emit(name, attempt.n, "attempt_ended", exit=exit_data, category=outcome.category)
        self.store.emit(name, attempt.n, "decision", **decision.as_event())

    def _apply_stored(self, attempt: Attempt) -> tuple[JobState, str, int]:
        try:
            stored = json.loads(attempt.outcome or "")
            decision = policy.Decision(stored["action"], stored["reason"], stored["delay"])
        except (ValueError, KeyError, TypeError):
            decision = policy.Decision(policy.RESTART, "resuming after an rsupd restart")
        return self._apply(decision, attempt.n)

    def _apply(self, decision: policy.Decision, n: int) -> tuple[JobState, str, int]:
        job = self.store.get_job(self.job)
        assert job is not None
        state = NEXT_STATE[decision.action]
        reason = decision.reason
        if job.state == S.STOPPING and state not in (S.SUCCEEDED, S.FAILED):
            state = S.STOPPED
            reason = self.stop_reason or reason
        if state in (S.BACKOFF, S.FAILED) and decision.evidence:
            reason = describe(n, decision.evidence, decision, job.progress)
        return state, reason, n


def _with_overrides(spec: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    if not overrides:
        return spec
    spec = dict(spec)
    train = dict(spec.get("train") or {})
    for key in ("batch", "workers"):
        if key in overrides:
            train[key] = overrides[key]
    if train:
        spec["train"] = train
    return spec
