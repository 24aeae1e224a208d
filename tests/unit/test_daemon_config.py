"""rsupd.toml: the [probe] section names stage files every GPU probe runs."""

from pathlib import Path

import pytest
from rsup.supervisor.daemon import ConfigError, load_config


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
