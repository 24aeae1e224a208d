"""The resume point: the newest whole checkpoint; a cut-off newest one falls back."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from rsup.supervisor.effects.checkpoints import resume_point, whole


def saved(path: Path, when: float) -> Path:
    with zipfile.ZipFile(path, "w") as archive:  # what torch.save writes: a zip archive
        archive.writestr("archive/data.pkl", b"x" * 4096)
    os.utime(path, (when, when))
    return path


def test_a_zip_cut_short_by_a_kill_is_not_a_resume_point(tmp_path: Path) -> None:
    good = saved(tmp_path / "epoch1.pt", 1_000)
    cut = saved(tmp_path / "epoch2.pt", 2_000)
    cut.write_bytes(cut.read_bytes()[:-40])  # the end record never made it to disk
    os.utime(cut, (2_000, 2_000))
    assert whole(good) and not whole(cut)
    assert resume_point(str(tmp_path / "epoch*.pt")) == str(good)


def test_an_hf_folder_without_its_trainer_state_falls_back_to_the_one_before(
    tmp_path: Path,
) -> None:
    for n in (500, 1000):
        folder = tmp_path / f"checkpoint-{n}"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"w")
    (tmp_path / "checkpoint-500" / "trainer_state.json").write_text("{}")
    assert resume_point(str(tmp_path / "checkpoint-*")) == str(tmp_path / "checkpoint-500")
