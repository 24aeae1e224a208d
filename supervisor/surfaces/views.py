"""What the API shows of jobs: status rows and chunks of attempt logs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsup.supervisor.core import budget
from rsup.supervisor.core.job import Attempt, Job
from rsup.supervisor.effects import launch, retention
from rsup.supervisor.effects.cgroups import isolation_mode
from rsup.workers import constants as C

if TYPE_CHECKING:
    from rsup.supervisor.effects.engine import Engine

MAX_CHUNK = 1 << 20


def job_view(engine: Engine, job: Job) -> dict[str, Any]:
    """One row of `rsup status --json`."""
    last = engine.store.last_attempt(job.name)
    pid = None
    if last is not None and job.state.active and not last.processed:
        info = launch.shim_info(Path(last.dir)) or {}
        if launch.alive_as(info.get("job_pid"), info.get("job_start_time")):
            pid = info.get("job_pid")
    return {
        "name": job.name,
        "state": job.state.value,
        "reason": job.reason,
        "kind": job.kind,
        "attempts": job.run_attempts,  # of this run; earlier runs are history
        "attempts_total": job.attempts,
        "pid": pid,
        "device": job.device,
        "last_fault": job.last_fault,
        "progress": job.progress,
        "owner_uid": job.owner_uid,
        "created": job.created,
        "updated": job.updated,
        "next_start_at": job.next_start_at if job.state.value == "backoff" else None,
        "overrides": job.plan.changes(),  # what rsup changed from the spec (the plan)
        "isolation": isolation_mode(),
        **_spent(engine, job, last).as_dict(),
        "since": round(time.time() - job.updated, 1),
    }


def _spent(engine: Engine, job: Job, last: Attempt | None) -> budget.Spent:
    ended = last.ended if job.state.terminal and last is not None else None
    first = engine.store.first_started(job.name, job.run_from)
    return budget.spent(job.spec, first, time.time(), ended)


def log_chunk(engine: Engine, job: Job, request: dict[str, Any]) -> dict[str, Any]:
    """A piece of one attempt's output.log, from `offset` (or the last `lines` lines)."""
    latest = engine.store.last_attempt(job.name)
    if latest is None:
        return {"attempt": None, "data": "", "offset": 0, "ended": job.state.terminal}
    n = int(request.get("attempt") or latest.n)
    attempt = engine.store.attempt(job.name, n)
    if attempt is None:
        from rsup.supervisor.effects.engine import EngineError

        raise EngineError(f"job {job.name} has no attempt {n} (it has 1..{latest.n})")
    kept = retention.oldest_kept(latest.n, engine.keep_attempts)
    if attempt.processed and 1 < n < kept and not Path(attempt.dir).exists():
        from rsup.supervisor.effects.engine import EngineError

        raise EngineError(
            f"attempt {n} of job {job.name} is no longer kept: rsupd keeps the output of the "
            f"first attempt and of attempts {kept}..{latest.n} ([retention] attempts = "
            f"{engine.keep_attempts} in rsupd.toml)"
        )
    path = Path(attempt.dir) / C.OUTPUT_LOG
    offset = request.get("offset")
    size, data = 0, b""
    try:  # the folder may go (retention, remove) between any two of these steps
        size = path.stat().st_size
        if offset is None:
            offset = _tail_offset(path, size, request.get("lines"))
        offset = min(int(offset), size)
        if size > offset:
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read(min(size - offset, MAX_CHUNK))
    except FileNotFoundError:
        offset = min(int(offset or 0), size)
    ended = bool(attempt.processed) or launch.exit_info(Path(attempt.dir)) is not None
    return {
        "attempt": n,
        "path": str(path),
        "data": data.decode("utf-8", "replace"),
        "offset": offset + len(data),
        "ended": ended and offset + len(data) >= size,
        "last_attempt": latest.n,
        "job_state": job.state.value,
    }


def _tail_offset(path: Path, size: int, lines: Any) -> int:
    if lines is None or size == 0:
        return 0
    want = int(lines)
    with path.open("rb") as f:
        start = max(0, size - 64 * 1024 * max(1, want // 100 + 1))
        f.seek(start)
        tail = f.read()
    cut = len(tail)
    for _ in range(want + (1 if tail.endswith(b"\n") else 0)):
        cut = tail.rfind(b"\n", 0, cut)
        if cut < 0:
            return start
    return start + cut + 1
