"""What can never run is refused at submit (exit 2, naming the field), not retried."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rsup.supervisor.core.spec import SpecError, load_spec


def refusal(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_spec(path, runnable=True)
    assert caught.value.exit_code == 2
    return str(caught.value)


def test_a_missing_cwd_is_refused(tmp_path: Path) -> None:
    said = refusal(tmp_path, "name: j\ncommand: [python, train.py]\ncwd: nowhere\n")
    assert "cwd: no such folder" in said and ":3:" in said


def test_a_missing_script_is_refused_relative_to_cwd(tmp_path: Path) -> None:
    said = refusal(tmp_path, "name: j\ncommand: [python, trian.py]\n")
    assert "command[1]: no such script" in said and "trian.py" in said


def test_a_missing_interpreter_or_program_is_refused(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    said = refusal(tmp_path, "name: j\npython: venv/bin/python\ncommand: [python, train.py]\n")
    assert "python: " in said and "does not exist" in said
    said = refusal(tmp_path, "name: j\ncommand: [no-such-program-here, x]\n")
    assert "command[0]: 'no-such-program-here' is not on PATH" in said


def test_a_checkpoint_inside_a_shell_string_is_refused(tmp_path: Path) -> None:
    said = refusal(tmp_path, 'name: j\ncommand: [bash, -c, "python t.py --resume {checkpoint}"]\n')
    assert "command[2]:" in said and "$RSUP_CHECKPOINT" in said


def test_a_knob_placeholder_needs_its_key(tmp_path: Path) -> None:
    said = refusal(tmp_path, "name: j\ncommand: [bash, -c, 'python t.py --bs {batch}']\n")
    assert "uses {batch} but the spec sets no batch:" in said


def test_what_can_run_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    path = tmp_path / "job.yaml"
    path.write_text(
        f"name: j\npython: {sys.executable}\nbatch: 8\n"
        "command: [python, train.py, --bs, '{batch}', '--resume={checkpoint}']\n"
    )
    spec = load_spec(path, runnable=True)
    assert spec.batch == 8
