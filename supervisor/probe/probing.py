"""The PROBING step: may the job's GPU be trusted, with which env, or must it run on cpu."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rsup.supervisor.core.job import Job
from rsup.supervisor.core.states import JobState
from rsup.supervisor.effects import launch
from rsup.supervisor.effects.paths import Layout
from rsup.supervisor.probe.config import load_timeouts
from rsup.supervisor.probe.ladder import ProbeSetup, VerdictCache, probe_device


@dataclass(frozen=True)
class ProbeOutcome:
    device: str | None  # None: give up (the GPU is unusable and cpu fallback is off)
    env: dict[str, str]
    reason: str
    report: dict[str, Any]


def wants_probe(job: Job, device: str) -> bool:
    """Probe before a GPU run; on cpu only when the spec adds its own stages to check."""
    probe = job.spec.probe
    if not probe.enabled:
        return False
    return device != "cpu" or bool(probe.extra_stages)


async def probe_for(
    job: Job,
    device: str,
    layout: Layout,
    base_env: dict[str, str],
    daemon_stages: tuple[str, ...] = (),
) -> ProbeOutcome:
    probe = job.spec.probe
    setup = ProbeSetup(
        device=_torch_device(device),
        python=launch.interpreter(job.spec),
        env={**base_env, **job.spec.env},
        stage_files=(*daemon_stages, *probe.extra_stages),
        timeouts=load_timeouts(),
        overrides=dict(probe.timeouts),
        pylib=layout.ensure_pylib(),
    )
    refresh = job.resume_to == JobState.PROBING  # a re-probe after a GPU fault: no cache
    report = await probe_device(setup, layout.root, refresh=refresh, now=time.time())
    return _conclude(job, device, report.to_dict(), report.usable, report.env)


def _conclude(
    job: Job, device: str, report: dict[str, Any], usable: bool, env: dict[str, str]
) -> ProbeOutcome:
    failed = next((s for s in report["stages"] if s["status"] in ("failed", "timeout")), None)
    where = f"{failed['name']} {failed['status']}" if failed else "all stages ok"
    if usable or (device == "cpu" and failed is None):
        extra = f" with {', '.join(f'{k}={v}' for k, v in env.items())}" if env else ""
        return ProbeOutcome(device, dict(env), f"probe: {report['verdict']}{extra}", report)
    if job.spec.fallback.cpu and device != "cpu":
        return ProbeOutcome(
            "cpu", {}, f"probe: the GPU cannot be trusted ({where}); using the cpu", report
        )
    return ProbeOutcome(None, {}, f"probe failed ({where}) and cpu fallback is off", report)


def invalidate(layout: Layout, device: str | None) -> int:
    """A GPU-category fault: the device's cached verdict no longer holds."""
    if not device or device == "cpu":
        return 0
    return VerdictCache(layout.root).invalidate(_torch_device(device))


def _torch_device(device: str) -> str:
    """The probe's device: a GPU index becomes cuda:N; a torchrun job's "0,1" probes its
    first GPU (the others are the same model in the machines this is for)."""
    first = device.split(",")[0].strip()
    return f"cuda:{first}" if first.isdigit() else first
