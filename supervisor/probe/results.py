"""What a probe found: each stage's result, and the report on one device."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

OK, FAILED, TIMEOUT, SKIPPED = "ok", "failed", "timeout", "skipped"
STATUSES = (OK, FAILED, TIMEOUT, SKIPPED)
GPU, GPU_WITH_REMEDIES, CPU = "gpu", "gpu_with_remedies", "cpu"


@dataclass(frozen=True)
class StageResult:
    """One stage: status ok|failed|timeout|skipped, seconds, error text and details."""

    name: str
    status: str
    seconds: float
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    crashed: bool = False  # the probe process died during this stage

    @property
    def failed(self) -> bool:
        return self.status in (FAILED, TIMEOUT)

    @property
    def how(self) -> str:
        """How it went wrong, in remedies.yaml's words: timeout, crash or failed."""
        return "crash" if self.status == FAILED and self.crashed else self.status


@dataclass
class ProbeReport:
    """What a probe (or a ladder of probes) found about one device."""

    device: str
    stages: list[StageResult]
    verdict: str  # gpu | gpu_with_remedies | cpu
    env: dict[str, str] = field(default_factory=dict)  # remedy env the verdict needs
    remedies: list[str] = field(default_factory=list)  # ids of the remedies applied
    flags: dict[str, bool] = field(default_factory=dict)  # e.g. grad_checkpoint_unsafe
    python: str = ""
    seconds: float = 0.0
    pid: int | None = None  # the last probe process (and process group)
    cached: bool = False
    rungs: list[dict[str, Any]] = field(default_factory=list)  # the ladder's trials

    @property
    def ok(self) -> bool:
        return not any(s.failed for s in self.stages)

    @property
    def usable(self) -> bool:
        return self.verdict in (GPU, GPU_WITH_REMEDIES)

    @property
    def info(self) -> dict[str, Any]:
        """The detect stage's details: vendor, name, arch, driver, torch/hip/cuda versions."""
        found = self.stage("detect")
        return dict(found.details) if found and found.status == OK else {}

    def stage(self, name: str) -> StageResult | None:
        return next((s for s in self.stages if s.name == name), None)

    def first_failure(self) -> StageResult | None:
        return next((s for s in self.stages if s.failed), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeReport:
        stages = [StageResult(**s) for s in data.get("stages", [])]
        return cls(**{**data, "stages": stages})


def single_verdict(device: str, ok: bool) -> str:
    """The verdict of one probe: gpu when every stage passed on a GPU; cpu otherwise."""
    return GPU if ok and device != "cpu" else CPU
