"""The plan in force: what the next attempt runs with, as decided so far.

The spec says what the user asked for; the plan says what rsup changed since (a halved
batch after an OOM, fewer DataLoader workers, the CPU after repeated GPU faults, the env
a probe remedy needs). It is stored with the job and replaced only by a committed step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Plan:
    batch: int | None = None  # None: the spec's own
    workers: int | None = None
    device: str | None = None  # set only to move off the device picked at queue time (cpu)
    env: dict[str, str] = field(default_factory=dict)  # probe remedies in force
    preflight_passed: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Plan:
        """Read a stored plan; keys this version does not know are ignored."""
        data = data or {}
        return cls(
            batch=_int(data.get("batch")),
            workers=_int(data.get("workers")),
            device=data.get("device") if isinstance(data.get("device"), str) else None,
            env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
            preflight_passed=bool(data.get("preflight_passed") or data.get("preflight_ok")),
        )

    def changed(self, **changes: Any) -> Plan:
        return replace(self, **changes)

    def with_env(self, env: dict[str, str]) -> Plan:
        return replace(self, env={**self.env, **env})

    def changes(self) -> dict[str, Any]:
        """What differs from the spec, for events and people."""
        out: dict[str, Any] = {}
        for key in ("batch", "workers", "device"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.env:
            out["env"] = dict(self.env)
        return out


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return None
