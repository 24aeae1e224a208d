"""rsupd.toml: the [probe] section names stage files every GPU probe runs."""

from pathlib import Path

import pytest
from rsup.supervisor.daemon import Config, ConfigError, load_config


def test_probe_stage_files_are_read_and_resolved(tmp_path: Path) -> None:
    stage = tmp_path / "kernels.py"
    stage.write_text("def stage_mine(ctx):\n    return {}\n")
    config = tmp_path / "rsupd.toml"
    config.write_text(f'[probe]\nextra_stages = ["{stage}"]\n')
    assert load_config(config).probe_extra_stages == (str(stage.resolve()),)


def test_missing_stage_file_is_a_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "rsupd.toml"
    config.write_text('[probe]\nextra_stages = ["/nowhere/stage.py"]\n')
    with pytest.raises(ConfigError, match=r"no such stage file: /nowhere/stage\.py"):
        load_config(config)


def test_retention_is_a_count_and_defaults_to_a_hundred(tmp_path: Path) -> None:
    config = tmp_path / "rsupd.toml"
    shipped = Path(__file__).resolve().parents[2] / "config" / "rsupd.toml"
    assert load_config(shipped).keep_attempts == Config().keep_attempts == 100
    config.write_text("[retention]\nattempts = 0\n")
    assert load_config(config).keep_attempts == 0
    config.write_text("[retention]\nattempts = -1\n")
    with pytest.raises(ConfigError, match=r"\[retention\] attempts must be a whole number"):
        load_config(config)
