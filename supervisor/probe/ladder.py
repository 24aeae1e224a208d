"""The remedy ladder and the verdict cache: may this GPU be trusted, and with which settings.

Ladder: probe; while a stage fails, take the first matching remedy (remedies.yaml order)
not tried yet and run a fresh probe with it added to what was kept so far. A remedy is
kept when that probe gets further than before (its first failure comes later in the stage
order, or there is none) and dropped otherwise. Remedies add up because cards often need
two (an HSA override, then a convolution workaround); a remedy that would change a
variable a kept one already set is not tried. Verdict: ``gpu`` when the plain probe
passes, ``gpu_with_remedies`` when it passes with kept remedies, else ``cpu``; on the
``cpu`` device itself the verdict is always ``cpu`` (the stages still run, and remedies
are still recorded).

Cache: ``<state>/probe-cache.json``, one entry per key (device, interpreter, GPU identity,
driver/runtime/torch versions, GPU-related env, stage files, remedy catalogue), valid for
a TTL; :meth:`VerdictCache.invalidate` drops a device's entries after a GPU fault.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog
from rsup.supervisor.effects.paths import Layout
from rsup.supervisor.probe.config import ProbeTimeouts
from rsup.supervisor.probe.run import (
    CPU,
    GPU,
    GPU_WITH_REMEDIES,
    SKIPPED,
    ProbeReport,
    StageResult,
    run_probe,
)
from rsup.supervisor.recognize.remedies import Remedy, gpu_identity, load_remedies, miopen_cache_env
from rsup.workers.probe import normalize_device

log = structlog.get_logger("rsupd")

CACHE_FILE = "probe-cache.json"
CACHE_VERSION = 1
DEFAULT_TTL = 24 * 3600.0
MAX_RUNGS = 8
# Variables that change how the GPU stack behaves; the rest of the env does not key the cache.
GPU_ENV_PREFIXES = (
    "HSA_", "HIP_", "ROCR_", "ROCM_", "MIOPEN_", "ROCBLAS_", "AMD_", "GPU_", "HCC_",
    "CUDA_", "CUBLAS_", "CUDNN_", "NVIDIA_", "NCCL_", "PYTORCH_", "TORCH_", "RSUP_DATALOADER",
    "LD_LIBRARY_PATH", "LD_PRELOAD", "OMP_NUM_THREADS",
)  # fmt: skip
_IDENTITY_KEYS = ("vendor", "name", "arch", "uuid", "capability", "driver", "torch", "hip", "cuda")


@dataclass(frozen=True)
class ProbeSetup:
    """Everything a probe run needs except the remedy env and the stages to skip."""

    device: str = "cpu"
    python: str | None = None
    env: Mapping[str, str] | None = None  # the job's full environment (default: ours)
    stage_files: tuple[str, ...] = ()
    only: tuple[str, ...] = ()  # run just these stages (after import and detect)
    timeouts: ProbeTimeouts | None = None
    overrides: Mapping[str, float] = field(default_factory=dict)
    pylib: Path | None = None

    def base_env(self) -> dict[str, str]:
        return dict(os.environ if self.env is None else self.env)

    async def run(
        self, extra_env: Mapping[str, str] | None = None, skip: Sequence[str] = (),
        only: Sequence[str] = (),
    ) -> ProbeReport:  # fmt: skip
        return await run_probe(
            self.device, python=self.python, env={**self.base_env(), **(extra_env or {})},
            stage_files=self.stage_files, only=only or self.only, skip=skip, timeouts=self.timeouts,
            overrides=self.overrides, pylib=self.pylib,
        )  # fmt: skip


@dataclass(frozen=True)
class _Kept:
    """What the ladder has kept so far."""

    env: dict[str, str] = field(default_factory=dict)
    skip: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    flags: dict[str, bool] = field(default_factory=dict)

    def plus(self, remedy: Remedy) -> _Kept:
        return _Kept({**self.env, **remedy.env}, self.skip + remedy.skip_stages,
                     (*self.ids, remedy.id), {**self.flags, **remedy.flags})  # fmt: skip


def _reach(report: ProbeReport, order: Sequence[str]) -> int:
    """How far a probe got: the position of its first failure in `order` (len: none)."""
    failure = report.first_failure()
    if failure is None:
        return len(order)
    return order.index(failure.name) if failure.name in order else -1


def _next_remedy(
    remedies: Sequence[Remedy], failure: StageResult, identity: tuple[str, str],
    tried: set[str], kept: _Kept,
) -> Remedy | None:  # fmt: skip
    vendor, arch = identity
    for remedy in remedies:
        if remedy.id in tried or remedy.conflicts(kept.env):
            continue
        if remedy.for_stage(failure.name, failure.how, failure.error or "", vendor, arch):
            return remedy
    return None


def _rung(remedy: str | None, report: ProbeReport, kept: bool) -> dict[str, Any]:
    failure = report.first_failure()
    return {"remedy": remedy, "kept": kept, "seconds": report.seconds,
            "failed_stage": failure.name if failure else None,
            "how": failure.how if failure else None}  # fmt: skip


async def run_ladder(
    setup: ProbeSetup, remedies: Sequence[Remedy], max_rungs: int = MAX_RUNGS
) -> ProbeReport:
    """Probe, then try matching remedies one rung at a time; the report holds the verdict."""
    report = await setup.run()
    order = [s.name for s in report.stages]
    identity = gpu_identity(report.info, setup.device)
    kept, tried = _Kept(), set[str]()
    rungs = [_rung(None, report, True)]
    while len(rungs) <= max_rungs and (failure := report.first_failure()) is not None:
        remedy = _next_remedy(remedies, failure, identity, tried, kept)
        if remedy is None:
            break
        tried.add(remedy.id)
        candidate = kept.plus(remedy)
        trial = await setup.run(candidate.env, candidate.skip)
        better = _reach(trial, order) > _reach(report, order)
        rungs.append(_rung(remedy.id, trial, better))
        log.info("probe_remedy_tried", device=setup.device, remedy=remedy.id, kept=better,
                 failed_stage=failure.name, how=failure.how)  # fmt: skip
        if better:
            kept, report = candidate, trial
    return _conclude(setup.device, report, kept, rungs, order)


def _conclude(
    device: str, report: ProbeReport, kept: _Kept, rungs: list[dict[str, Any]],
    order: Sequence[str],
) -> ProbeReport:  # fmt: skip
    by_name = {s.name: s for s in report.stages}
    reason = "not run: left out by remedy " + ", ".join(kept.ids)
    stages = [by_name.get(n) or StageResult(n, SKIPPED, 0.0, reason) for n in order]
    stages += [s for s in report.stages if s.name not in order]
    if not report.ok:
        verdict, kept = CPU, _Kept()  # the job will not use this GPU: it needs no GPU env
    elif normalize_device(device) == "cpu":
        verdict = CPU
    else:
        verdict = GPU_WITH_REMEDIES if kept.ids else GPU
    return replace(report, stages=stages, verdict=verdict, env=kept.env,
                   remedies=list(kept.ids), flags=kept.flags, rungs=rungs)  # fmt: skip


# --- cache -------------------------------------------------------------------------


def env_fingerprint(env: Mapping[str, str]) -> str:
    """A hash of the GPU-related part of an environment (see GPU_ENV_PREFIXES)."""
    relevant = sorted((k, v) for k, v in env.items() if k.startswith(GPU_ENV_PREFIXES))
    return hashlib.sha256(json.dumps(relevant).encode()).hexdigest()[:16]


def _file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return "missing"


def cache_key(setup: ProbeSetup, info: Mapping[str, Any], remedies: Sequence[Remedy]) -> str:
    """The verdict cache key: device, interpreter, GPU identity and versions, env, stages."""
    payload = {
        "device": normalize_device(setup.device),
        "python": os.path.abspath(setup.python) if setup.python else "",
        "identity": {k: info.get(k) for k in _IDENTITY_KEYS},
        "env": env_fingerprint(setup.base_env()),
        "stages": [(os.path.abspath(f), _file_digest(f)) for f in setup.stage_files],
        "only": sorted(setup.only),
        "timeouts": sorted(setup.overrides.items()),
        "remedies": [(r.id, sorted(r.env.items()), r.skip_stages) for r in remedies],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


class VerdictCache:
    """Probe verdicts in ``<state>/probe-cache.json``, each valid for `ttl` seconds."""

    def __init__(self, state_dir: Path, ttl: float = DEFAULT_TTL) -> None:
        self.path = state_dir / CACHE_FILE
        self.ttl = ttl

    def get(self, key: str, now: float) -> ProbeReport | None:
        """The cached report for `key`, unless absent or older than the TTL."""
        entry = self._entries().get(key)
        if entry is None or not 0 <= now - float(entry["stored_at"]) <= self.ttl:
            return None
        try:
            return replace(ProbeReport.from_dict(entry["report"]), cached=True)
        except (KeyError, TypeError, ValueError):
            return None  # written by another version: probe again

    def put(self, key: str, report: ProbeReport, now: float) -> None:
        entries = {k: e for k, e in self._entries().items()
                   if 0 <= now - float(e.get("stored_at", 0)) <= self.ttl}  # fmt: skip
        entries[key] = {"device": report.device, "stored_at": now, "report": report.to_dict()}
        self._save(entries)

    def invalidate(self, device: str) -> int:
        """Forget every verdict for `device` (a job on it died of a GPU fault)."""
        device = normalize_device(device)
        entries = self._entries()
        kept = {k: e for k, e in entries.items() if e.get("device") != device}
        if len(kept) != len(entries):
            self._save(kept)
        return len(entries) - len(kept)

    def _entries(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # none yet, or unreadable: the cache only saves time
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            return {}
        entries = data.get("entries")
        if not isinstance(entries, dict):
            return {}
        return {k: e for k, e in entries.items() if isinstance(e, dict)}

    def _save(self, entries: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{CACHE_FILE}.{os.getpid()}")
        tmp.write_text(json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=1))
        os.replace(tmp, self.path)


async def probe_device(
    setup: ProbeSetup, state_dir: Path, *, remedies: Sequence[Remedy] | None = None,
    ttl: float = DEFAULT_TTL, refresh: bool = False, now: float,
) -> ProbeReport:  # fmt: skip
    """The verdict for a device: from the cache when fresh, else from the ladder (then cached).

    A quick import+detect probe identifies the GPU and versions for the cache key. The
    probe gets MIOpen caches under `state_dir` (unless the env sets them) and rsup.workers
    from ``Layout(state_dir).ensure_pylib()``. `now` is wall-clock time (``time.time()``).
    """
    remedies = load_remedies() if remedies is None else remedies
    setup = replace(setup, env={**miopen_cache_env(state_dir), **setup.base_env()},
                    pylib=setup.pylib or Layout(state_dir).ensure_pylib())  # fmt: skip
    ident = await setup.run(only=("detect",))
    if not ident.ok:  # unknown identity (maybe a remedy fixes detect): no caching
        return await run_ladder(setup, remedies)
    cache = VerdictCache(state_dir, ttl)
    key = cache_key(setup, ident.info, remedies)
    cached = None if refresh else cache.get(key, now)
    if cached is not None:
        return cached
    report = await run_ladder(setup, remedies)
    cache.put(key, report, now)
    return report
