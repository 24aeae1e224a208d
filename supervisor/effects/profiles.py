"""Env profiles: config/profiles/<name>.env, KEY=VALUE lines a job spec names with env_profile."""

from __future__ import annotations

from pathlib import Path

from rsup.supervisor.core.errors import UsageError
from rsup.supervisor.effects.configdir import config_dir


class ProfileError(UsageError, ValueError):
    """An env profile that does not exist or cannot be read; the message says which."""


def profile_path(name: str) -> Path:
    return config_dir() / "profiles" / f"{name}.env"


def available() -> list[str]:
    folder = config_dir() / "profiles"
    return sorted(p.stem for p in folder.glob("*.env")) if folder.is_dir() else []


def load_profile(name: str) -> dict[str, str]:
    """The profile's variables; comments (#) and blank lines are skipped."""
    path = profile_path(name)
    try:
        text = path.read_text()
    except OSError as exc:
        known = ", ".join(available()) or "none"
        raise ProfileError(
            f"env_profile {name!r}: cannot read {path} ({exc.strerror}); known profiles: {known}"
        ) from None
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ProfileError(f"{path}:{number}: expected KEY=VALUE, got {raw!r}")
        env[key.strip()] = value.strip()
    return env
