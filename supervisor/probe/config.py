"""The probe's per-stage timeouts: config/probe.yaml, and overrides per job or call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from rsup.supervisor.core.errors import UsageError
from rsup.supervisor.core.specload import parse_duration
from rsup.supervisor.effects.configdir import config_file


class ProbeConfigError(UsageError, ValueError):
    """probe.yaml cannot be read or holds a bad value."""


@dataclass(frozen=True)
class ProbeTimeouts:
    """Seconds per stage; ``custom`` for stage-file stages, ``startup`` before a stage starts."""

    stages: Mapping[str, float]
    custom: float = 300.0
    startup: float = 60.0

    def for_stage(self, name: str) -> float:
        return float(self.stages.get(name, self.custom))

    def with_overrides(self, overrides: Mapping[str, float]) -> ProbeTimeouts:
        """Per-call values by stage name (``startup`` and ``custom`` work too)."""
        stages = {k: v for k, v in overrides.items() if k not in ("startup", "custom")}
        return replace(
            self,
            stages={**self.stages, **stages},
            custom=overrides.get("custom", self.custom),
            startup=overrides.get("startup", self.startup),
        )


def load_timeouts(path: Path | None = None) -> ProbeTimeouts:
    """Read config/probe.yaml (or `path`); durations are seconds or strings like ``15m``."""
    path = path or config_file("probe.yaml")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ProbeConfigError(f"{path}: cannot read probe timeouts: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("stages", {}), dict):
        raise ProbeConfigError(f"{path}: expected a mapping with a 'stages' mapping")
    unknown = set(data) - {"version", "startup", "custom", "stages"}
    if unknown:
        raise ProbeConfigError(f"{path}: unknown keys {sorted(unknown)}")
    try:
        stages = {str(k): _positive(v) for k, v in data.get("stages", {}).items()}
        return ProbeTimeouts(stages, _positive(data.get("custom", 300)),
                             _positive(data.get("startup", 60)))  # fmt: skip
    except ValueError as exc:
        raise ProbeConfigError(f"{path}: {exc}") from exc


def _positive(value: object) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"a timeout must be more than zero, got {value!r}")
    return seconds


def parse_timeout_overrides(items: Sequence[str]) -> dict[str, float]:
    """``["conv2d=600", "backward=15m"]`` (the CLI's ``--timeout STAGE=SECONDS``) as a dict."""
    overrides: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"expected STAGE=SECONDS, got {item!r}")
        overrides[name.strip()] = _positive(value.strip())
    return overrides
