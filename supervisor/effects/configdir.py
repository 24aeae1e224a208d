"""Where rsup's default configuration files (signatures, remedies, profiles) live."""

from __future__ import annotations

import os
from pathlib import Path

ENV_CONFIG_DIR = "RSUP_CONFIG_DIR"


def config_dir() -> Path:
    """The folder of default config files: $RSUP_CONFIG_DIR, else the repository's config/."""
    override = os.environ.get(ENV_CONFIG_DIR)
    if override:
        return Path(override).expanduser()
    # supervisor/ and config/ sit side by side at the top of the source tree.
    return Path(__file__).resolve().parents[2] / "config"


def config_file(name: str) -> Path:
    """Path of one default config file, such as ``signatures.yaml`` or ``profiles/x.env``."""
    return config_dir() / name
