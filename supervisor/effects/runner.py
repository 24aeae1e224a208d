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
from rsup.supervisor.core import step as core
from rsup.supervisor.core.conclude import Evidence
from rsup.supervisor.core.escalation import ASK, KILL_TREE, Escalation
from rsup.supervisor.core.job import Attempt, Job
from rsup.supervisor.core.states import JobState
from rsup.supervisor.effects import checkpoints, devices, launch, preflight, yolojob
from rsup.supervisor.effects.cgroups import AttemptCgroups
from rsup.supervisor.effects.launch import RunAs
from rsup.supervisor.effects.monitor import AttemptMonitor
from rsup.supervisor.effects.paths import Layout
from rsup.supervisor.effects.procwait import kill_marked, kill_tree, signal_if_same, wait_exit
from rsup.supervisor.effects.stacks import capture as capture_stacks
from rsup.supervisor.effects.store import Store
from rsup.supervisor.effects.watcher import OutputListener
from rsup.supervisor.recognize import kernlog
from rsup.supervisor.recognize.remedies import miopen_cache_env
from rsup.workers import constants as C

if TYPE_CHECKING:
    from rsup.supervisor.effects.engine import Control

log = structlog.get_logger("rsupd")
S = JobState
VRAM_WAIT = 60.0  # seconds a relaunch waits for the last attempt's stuck processes


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
        self.stopped_for_cause = False  # rsupd stopped it for a hang or a wedged fault

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
        spec = job.spec
        argv = launch.job_argv(spec, adir, job.batch, job.workers)
        extra = {**self._attempt_env(n, adir, job), **job.plan.env}
        env = launch.job_env(base_env, spec, extra, who)
        self._prepare(adir, job, who)
        attempt = Attempt(self.job, n, str(adir), time.time())
        self.store.add_attempt(attempt)
        self.store.update_job(self.job, attempts=n)
        cgroup = self.cgroups.create(self.job, n, spec.limits.memory) if self.cgroups else None
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
            overrides=job.plan.changes(),  # what rsup changed from the spec: the plan
        )
        return attempt

    def _attempt_env(self, n: int, adir: Path, job: Job) -> dict[str, str]:
        device = job.device
        env = {
            C.ENV_JOB: self.job,
            C.ENV_ATTEMPT: str(n),
            C.ENV_ATTEMPT_DIR: str(adir),
            C.ENV_EVENTS_FILE: str(adir / C.EVENTS_JSONL),
            C.ENV_DEVICE: device or "cpu",
            "PYTHONPATH": str(self.layout.pylib),  # put in front of the job's own
        }
        if job.kind != "ultralytics":  # the resume point, and the knobs in force
            env[C.ENV_CHECKPOINT] = checkpoints.resume_point(job.spec.checkpoint) or ""
            if job.batch is not None:
                env[C.ENV_BATCH] = str(job.batch)
            if job.workers is not None:
                env[C.ENV_WORKERS] = str(job.workers)
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
        if job.kind == "ultralytics":
            last_good = self.layout.job_dir(self.job) / "last-good"
            last_good.mkdir(parents=True, exist_ok=True)
            yolojob.write_config(adir, job, last_good, job.device)
        if who is not None:
            for path in (adir, adir / C.EVENTS_JSONL):
                os.chown(path, who.uid, who.gid)

    async def prepare(self, job: Job, base_env: dict[str, str]) -> bool:
        """Before a launch: wait for the last attempt's VRAM, run the preflight if due.
        False when the job failed its preflight (and was moved to FAILED)."""
        await self._vram_released(job)
        return not preflight.wanted(job) or await self._preflight(job, base_env)

    async def _preflight(self, job: Job, base_env: dict[str, str]) -> bool:
        self.store.emit(job.name, None, "preflight_started", device=job.device)
        passed, reason = await preflight.run(job, self.layout, base_env)
        self.store.emit(job.name, None, "preflight_result", passed=passed, reason=reason)
        if not passed:
            self.store.move(job.name, S.FAILED, reason)
            return False
        job.plan = job.plan.changed(preflight_passed=True)
        self.store.update_job(job.name, plan=job.plan)
        return True

    async def _vram_released(self, job: Job) -> None:
        """Before a relaunch on the same GPU: processes of the last attempt that outlived
        SIGKILL (stuck in the driver) still hold VRAM; wait for them, bounded."""
        last = self.store.last_attempt(job.name)
        if not devices.is_gpu(job.device) or last is None:
            return
        survivors = list((last.exit or {}).get("survivors") or [])
        left = await devices.wait_gone(survivors, VRAM_WAIT)
        if left:
            self.store.emit(job.name, last.n, "vram_not_released", pids=left,
                            device=job.device)  # fmt: skip

    # running -------------------------------------------------------------

    async def supervise(self, control: Control) -> core.Step | tuple[JobState, str]:
        """Watch the attempt to its end; the step that ends it (not yet stored)."""
        attempt = self.store.last_attempt(self.job)
        assert attempt is not None  # RUNNING/STOPPING always has one
        if attempt.processed:
            return self.applied(attempt)
        self.stopped_for_cause = False
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
        wedged = asyncio.ensure_future(self.monitor.wedged.wait())
        stop = asyncio.ensure_future(control.stop.wait())
        limit = asyncio.ensure_future(self.monitor.limit_hit.wait())
        waits = {ended, stop, hang, wedged, limit}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if limit.done() and not stop.done():
                self.stop_reason = self.monitor.limit_reason
            if hang.done():
                await self._record_hang(attempt)
            self.stopped_for_cause = (hang.done() or wedged.done()) and not stop.done()
            if not ended.done():
                await self._stop_attempt(attempt, control, ended, self.stopped_for_cause)
        finally:
            for fut in waits:
                fut.cancel()

    async def _record_hang(self, attempt: Attempt) -> None:
        """hang_detected, with every Python thread's stack of the job, before the kill."""
        assert self.monitor is not None
        report = self.monitor.hang_report
        if report is None:
            return
        stacks = await capture_stacks(self.monitor.watcher.job_pid, Path(attempt.dir))
        fields = {k: v for k, v in report.fields.items() if k != "event"}
        self.store.emit(self.job, attempt.n, "hang_detected", **fields, **stacks.as_fields())

    async def _stop_attempt(
        self, attempt: Attempt, control: Control, ended: asyncio.Future[None], for_hang: bool
    ) -> None:
        """Carry out the stop escalation (core.escalation) until the attempt has ended."""
        job = self.store.get_job(self.job)
        assert job is not None
        if not for_hang and job.state == S.RUNNING:
            self.store.move(self.job, S.STOPPING, self.stop_reason or "stop requested", attempt.n)
        clock = asyncio.get_running_loop().time
        escalation = Escalation(job.spec.stop.grace, control.force or for_hang, created=clock())
        while not ended.done():
            # A signal that lands before the shim installed its handlers would kill the
            # shim alone and orphan the job: the escalation waits (bounded) for shim.json.
            ready = launch.shim_info(Path(attempt.dir)) is not None
            action = escalation.next(clock(), ready, ended.done())
            if action.kind == ASK and action.signal is not None:
                signal_if_same(attempt.shim_pid, attempt.shim_start_time, action.signal)
            elif action.kind == KILL_TREE:
                self._kill_orphaned(attempt, "the shim did not finish stopping the job")
                await ended
            else:
                await asyncio.wait({ended}, timeout=action.wait)

    def _cgroup(self, attempt: Attempt) -> Path | None:
        if self.cgroups is None:
            return None
        folder = self.cgroups.folder(self.job, attempt.n)
        return folder if folder.is_dir() else None

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

    def _finish(self, attempt: Attempt) -> core.Step:
        adir = Path(attempt.dir)
        exit_data = launch.exit_info(adir)
        if exit_data is None:
            self._kill_orphaned(attempt, "the shim died without writing exit.json")
        folder = self._cgroup(attempt)
        oom_kills = 0
        if folder is not None:
            oom_kills = AttemptCgroups.oom_kills(folder)
            exit_data = {**(exit_data or {}), "cgroup_oom_kills": oom_kills}
            AttemptCgroups.kill(folder)  # nothing of this attempt may outlive it
            AttemptCgroups.remove(folder)
        job = self.store.get_job(self.job)
        assert job is not None and self.monitor is not None
        ended = core.Ended(
            n=attempt.n,
            evidence=self._evidence(job, attempt, exit_data, oom_kills),
            exit=exit_data,
            reports_progress=self.monitor.progress_seen,
            stop_reason=self.stop_reason,
        )
        return core.attempt_ended(job, ended, time.time())

    def _evidence(
        self, job: Job, attempt: Attempt, exit_data: dict[str, Any] | None, oom_kills: int
    ) -> Evidence:
        """What the attempt left behind, for core.conclude to judge."""
        monitor = self.monitor
        assert monitor is not None
        data = exit_data or {}
        sig = data.get("signal")
        asked = bool(data.get("stop_requested")) and not self.stopped_for_cause
        stopped = asked or job.state == S.STOPPING
        oom_line = None
        if oom_kills:
            oom_line = f"memory.events: oom_kill {oom_kills} (the attempt's cgroup)"
        elif sig == signal.SIGKILL and not stopped:
            oom_line = kernlog.oom_kill(attempt.started, float(data.get("ended") or time.time()))
        ranks = monitor.ranks
        hang_rank = monitor.hang_rank.describe() if monitor.hang_rank else None
        return Evidence(
            diagnosis=monitor.diagnosis(),
            exit_code=data.get("exit_code"),
            signal=sig,
            recorded=bool(exit_data),
            ran_for=float(data.get("duration") or 0.0),
            stop_requested=stopped,
            oom_line=oom_line,
            hang=monitor.hang_verdict,
            hang_rank=hang_rank,
            rank_failure=ranks.first_failure() if ranks is not None else None,
            torchrun=ranks is not None,
            trust_exit_zero=job.kind == "ultralytics",
            output_lines=monitor.watcher.classifier.lines,
            drills_fired=tuple(monitor.drills_fired),
            advanced=monitor.advanced,
            completed=monitor.completed if job.kind == "ultralytics" else None,
        )

    def applied(self, attempt: Attempt) -> tuple[JobState, str]:
        """An attempt processed by an rsupd older than one-transaction ends (its decision
        stored, its state move not): finish the move the stored decision asked for."""
        try:
            stored = json.loads(attempt.outcome or "")
            action, reason = stored["action"], stored["reason"]
        except (ValueError, KeyError, TypeError):
            action, reason = policy.RESTART, "resuming after an rsupd restart"
        state = core.NEXT_STATE.get(action, S.BACKOFF)
        job = self.store.get_job(self.job)
        if job is not None and job.state == S.STOPPING and state not in (S.SUCCEEDED, S.FAILED):
            state = S.STOPPED
        return state, reason
