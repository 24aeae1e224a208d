"""The remedy catalogue (config/remedies.yaml): known settings that make a shaky GPU usable.

An entry says when it applies (the failed probe stage or the job's failure category, how
it failed, an error regex, vendor and arch patterns) and what to try: environment for the
job and the probe, flags for the job (``grad_checkpoint_unsafe``) and stages the probe no
longer needs to pass. The ladder (probeladder.py) tries them; this module only matches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rsup.supervisor.core.errors import UsageError
from rsup.supervisor.effects.configdir import config_file
from rsup.workers import constants as C
from rsup.workers.probe import normalize_device
from rsup.workers.probestages import kfd_gfx_archs

HOWS = ("failed", "timeout", "crash")
ANY_STAGE = "*"
_ID_RE = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KEYS = {"id", "description", "match", "env", "flags", "skip_stages"}
_MATCH_KEYS = {"stage", "category", "how", "error", "vendor", "arch"}


class RemedyError(UsageError, ValueError):
    """remedies.yaml cannot be read or one of its entries is invalid."""


@dataclass(frozen=True)
class Remedy:
    """One catalogue entry, compiled. Empty match fields match anything."""

    id: str
    description: str
    stages: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    how: tuple[str, ...] = ()
    error: re.Pattern[str] | None = None
    vendor: re.Pattern[str] | None = None
    arch: re.Pattern[str] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    flags: Mapping[str, bool] = field(default_factory=dict)
    skip_stages: tuple[str, ...] = ()

    def for_stage(self, stage: str, how: str, text: str, vendor: str, arch: str) -> bool:
        """Does this remedy apply to a probe stage that failed `how` (failed|timeout|crash)?"""
        if not self.stages or not (ANY_STAGE in self.stages or stage in self.stages):
            return False
        return (not self.how or how in self.how) and self._common(text, vendor, arch)

    def for_fault(self, category: str, text: str, vendor: str, arch: str) -> bool:
        """Does this remedy apply to a job that died of `category` (output `text`)?"""
        return category in self.categories and self._common(text, vendor, arch)

    def conflicts(self, env: Mapping[str, str]) -> bool:
        """True when this remedy would change a variable `env` already sets differently."""
        return any(k in env and env[k] != v for k, v in self.env.items())

    def _common(self, text: str, vendor: str, arch: str) -> bool:
        return (
            (self.error is None or self.error.search(text) is not None)
            and (self.vendor is None or self.vendor.fullmatch(vendor) is not None)
            and (self.arch is None or self.arch.fullmatch(arch) is not None)
        )


def load_remedies(path: Path | None = None) -> list[Remedy]:
    """Read and check the catalogue (default: config/remedies.yaml); order is priority."""
    path = path or config_file("remedies.yaml")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise RemedyError(f"{path}: cannot read remedies: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("remedies"), list):
        raise RemedyError(f"{path}: expected a mapping with a 'remedies' list")
    remedies: list[Remedy] = []
    for i, raw in enumerate(data["remedies"]):
        where = f"{path}: remedies[{i}]"
        try:
            remedies.append(_compile(raw))
        except (TypeError, ValueError, re.error) as exc:
            raise RemedyError(f"{where}: {exc}") from exc
    ids = [r.id for r in remedies]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise RemedyError(f"{path}: duplicate ids {duplicates}")
    return remedies


def _compile(raw: object) -> Remedy:
    if not isinstance(raw, dict):
        raise TypeError("an entry must be a mapping")
    unknown = set(raw) - _KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} (allowed: {sorted(_KEYS)})")
    rid = raw.get("id")
    if not isinstance(rid, str) or not _ID_RE.match(rid):
        raise ValueError(f"'id' must match [a-z0-9][a-z0-9._-]*, got {rid!r}")
    match = raw.get("match")
    if not isinstance(match, dict) or set(match) - _MATCH_KEYS:
        raise ValueError(f"{rid}: 'match' must be a mapping of {sorted(_MATCH_KEYS)}")
    stages, categories, how = (_names(match.get(k), k) for k in ("stage", "category", "how"))
    if not stages and not categories:
        raise ValueError(f"{rid}: 'match' needs a stage (or '*') or a category")
    _check_values(rid, categories, C.CATEGORIES, "category")
    _check_values(rid, how, HOWS, "how")
    return Remedy(
        id=rid,
        description=str(raw.get("description") or "").strip(),
        stages=stages, categories=categories, how=how,
        error=_regex(match.get("error"), re.IGNORECASE),
        vendor=_regex(match.get("vendor"), re.IGNORECASE),
        arch=_regex(match.get("arch"), 0),
        env=_env(raw.get("env")), flags=_flags(raw.get("flags")),
        skip_stages=_names(raw.get("skip_stages"), "skip_stages"),
    )  # fmt: skip


def _names(value: object, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) and v for v in items):
        raise TypeError(f"'{what}' must be a name or a list of names")
    return tuple(items)


def _check_values(rid: str, values: Sequence[str], allowed: Sequence[str], what: str) -> None:
    bad = [v for v in values if v not in allowed]
    if bad:
        raise ValueError(f"{rid}: unknown {what} {bad} (allowed: {', '.join(allowed)})")


def _regex(value: object, flags: int) -> re.Pattern[str] | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"a pattern must be a string, got {value!r}")
    return re.compile(value, flags)


def _env(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError("'env' must be a mapping of NAME: value")
    env: dict[str, str] = {}
    for name, raw in value.items():
        if not isinstance(name, str) or not _ENV_NAME_RE.match(name):
            raise ValueError(f"invalid environment variable name {name!r}")
        if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
            raise TypeError(f'env {name}: quote the value, e.g. "1" (got {raw!r})')
        env[name] = str(raw)
    return env


def _flags(value: object) -> dict[str, bool]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, bool) for v in value.values()):
        raise TypeError("'flags' must be a mapping of name: true|false")
    return {str(k): bool(v) for k, v in value.items()}


def remedies_for_stage(
    remedies: Sequence[Remedy], stage: str, how: str, text: str, vendor: str, arch: str
) -> list[Remedy]:
    """The remedies for a failed probe stage, in catalogue order."""
    return [r for r in remedies if r.for_stage(stage, how, text, vendor, arch)]


def remedies_for_fault(
    remedies: Sequence[Remedy], category: str, text: str, vendor: str, arch: str
) -> list[Remedy]:
    """The remedies for a job that died of `category`, in catalogue order."""
    return [r for r in remedies if r.for_fault(category, text, vendor, arch)]


def gpu_identity(info: Mapping[str, Any], device: str) -> tuple[str, str]:
    """(vendor, arch) from the probe's detect details; the kernel's list when detect died.

    hipErrorNoBinaryForGpu aborts inside ``torch.cuda.is_available()``, so the arch that
    picks the HSA_OVERRIDE_GFX_VERSION remedy must then come from sysfs (best effort:
    the N-th AMD GPU node for cuda:N, ignoring *_VISIBLE_DEVICES).
    """
    vendor, arch = str(info.get("vendor") or ""), str(info.get("arch") or "")
    if vendor and arch:
        return vendor, arch
    device = normalize_device(device)
    if device == "cpu":
        return "cpu", arch
    archs = kfd_gfx_archs()
    index = int(device.partition(":")[2] or 0)
    if index < len(archs):
        return vendor or "amd", arch or archs[index]
    return vendor, arch


def miopen_cache_env(state_dir: Path) -> dict[str, str]:
    """MIOpen's user db and kernel cache under rsup's state dir (created), so kernels
    compiled by one attempt or probe are reused by the next instead of rebuilt."""
    root = state_dir / "miopen"
    paths = {"MIOPEN_USER_DB_PATH": root / "userdb", "MIOPEN_CUSTOM_CACHE_DIR": root / "cache"}
    for folder in paths.values():
        folder.mkdir(parents=True, exist_ok=True)
    return {name: str(folder) for name, folder in paths.items()}
