"""Checkpoint checks, last-good rotation, results.csv trimming, drills and yolo.json parsing.

No torch here: checkpoints are stand-in zip archives, which is all the zip check sees.
"""

from __future__ import annotations

import json
import threading
import zipfile
from pathlib import Path

import pytest
from rsup.workers import yolo, yolockpt
from rsup.workers.yolocallbacks import Drill, DrillBook, parse_drills


def make_zip(path: Path, payload: bytes = b"x" * 4096) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", payload)
    return path


def test_zip_check_rejects_truncated_and_flipped(tmp_path: Path) -> None:
    good = make_zip(tmp_path / "good.pt")
    assert yolockpt.zip_ok(str(good))
    data = good.read_bytes()
    (tmp_path / "half.pt").write_bytes(data[: len(data) // 2])
    assert not yolockpt.zip_ok(str(tmp_path / "half.pt"))
    flipped = bytearray(data)
    flipped[data.index(b"xxxx")] ^= 0xFF
    (tmp_path / "flip.pt").write_bytes(bytes(flipped))
    assert not yolockpt.zip_ok(str(tmp_path / "flip.pt"))
    assert not yolockpt.zip_ok(str(tmp_path / "missing.pt"))


def test_last_good_keeps_two_and_refuses_damage(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    first = make_zip(tmp_path / "a.pt", b"first" * 100)
    second = make_zip(tmp_path / "b.pt", b"second" * 100)
    assert yolockpt.keep_last_good(str(first), str(keep)) == str(keep / "last-good.pt")
    assert yolockpt.keep_last_good(str(second), str(keep)) == str(keep / "last-good.pt")
    assert (keep / "last-good.pt").read_bytes() == second.read_bytes()
    assert (keep / "last-good.prev.pt").read_bytes() == first.read_bytes()
    damaged = tmp_path / "c.pt"
    damaged.write_bytes(second.read_bytes()[:100])
    assert yolockpt.keep_last_good(str(damaged), str(keep)) is None
    assert (keep / "last-good.pt").read_bytes() == second.read_bytes()
    assert sorted(p.name for p in keep.iterdir()) == ["last-good.prev.pt", "last-good.pt"]


def test_keeper_copies_in_background_and_reports(tmp_path: Path) -> None:
    reports: list[tuple[str, int, str | None, str | None]] = []
    done = threading.Event()

    def on_kept(path: str, epoch: int, copy: str | None, error: str | None) -> None:
        reports.append((path, epoch, copy, error))
        done.set()

    keeper = yolockpt.LastGoodKeeper(str(tmp_path / "keep"), on_kept)
    ckpt = make_zip(tmp_path / "last.pt")
    keeper.submit(str(ckpt), 3)
    assert keeper.flush(timeout=10)
    assert done.is_set()
    ckpt.write_bytes(b"not a zip")
    keeper.submit(str(ckpt), 4)
    assert keeper.close(timeout=10)
    assert reports[0] == (str(ckpt), 3, str(tmp_path / "keep" / "last-good.pt"), None)
    assert reports[1] == (str(ckpt), 4, None, "zip check failed")


def test_trim_results_keeps_each_epoch_once(tmp_path: Path) -> None:
    csv = tmp_path / "results.csv"
    csv.write_text("epoch,time,loss\n1,1.0,0.9\n2,2.0,0.8\n3,3.0,0.7\n2,1.5,0.75\n")
    assert yolockpt.trim_results(str(csv), 2) == 2
    assert csv.read_text() == "epoch,time,loss\n1,1.0,0.9\n2,1.5,0.75\n"
    assert yolockpt.trim_results(str(csv), 2) == 0
    assert yolockpt.trim_results(str(tmp_path / "absent.csv"), 2) == 0


def test_trim_results_reads_padded_headers(tmp_path: Path) -> None:
    csv = tmp_path / "results.csv"
    csv.write_text("        epoch,  loss\n          1,  0.9\n          2,  0.8\n")
    assert yolockpt.trim_results(str(csv), 1) == 1
    assert csv.read_text().splitlines() == ["        epoch,  loss", "          1,  0.9"]


def test_stale_temporaries_are_removed(tmp_path: Path) -> None:
    (tmp_path / ".last-good.pt.123.tmp").write_bytes(b"partial")
    (tmp_path / "last-good.pt").write_bytes(b"kept")
    yolockpt.remove_stale_temps(str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["last-good.pt"]


def test_checkpoint_info_finished() -> None:
    info = yolockpt.CheckpointInfo("p", epoch=4, epochs=10, has_optimizer=True, save_dir=None)
    assert not info.finished and info.epochs_done == 5
    assert yolockpt.CheckpointInfo("p", 9, 10, True, None).finished  # final epoch saved
    assert yolockpt.CheckpointInfo("p", -1, 10, False, None).finished  # optimizer stripped


def test_parse_drills() -> None:
    assert parse_drills([{"kind": "kill", "at_epoch": 2}, {"kind": "oom"}]) == [
        Drill("kill", 2),
        Drill("oom", None),
    ]
    assert parse_drills({"drills": [{"kind": "hang", "at_epoch": None}]}) == [Drill("hang")]
    for bad in (
        [{"kind": "boom"}],
        [{"kind": "kill", "at_epoch": 0}],
        "kill",
        [{"kind": "kill", "at_epoch": True}],
    ):
        with pytest.raises(ValueError):
            parse_drills(bad)


def test_drill_due_in_the_middle_of_its_epoch(tmp_path: Path) -> None:
    book = DrillBook([Drill("kill", 3)], None, str(tmp_path))
    assert book.due(epoch=2, batch=5, middle=3) is None
    assert book.due(epoch=3, batch=2, middle=3) is None
    assert book.due(epoch=3, batch=3, middle=3) == Drill("kill", 3)


def test_a_fired_drill_never_fires_again(tmp_path: Path) -> None:
    book = DrillBook([Drill("kill", 2), Drill("kill", 2)], None, str(tmp_path))
    assert book.pending == [Drill("kill", 2)]
    book.mark_fired(Drill("kill", 2))
    assert json.loads((tmp_path / "drills-fired.json").read_text()) == ["kill@2"]
    again = DrillBook([Drill("kill", 2), Drill("hang", 2)], None, str(tmp_path))
    assert again.pending == [Drill("hang", 2)]


def test_drills_file_is_polled_at_most_once_a_second(tmp_path: Path) -> None:
    live = tmp_path / "drills.json"
    book = DrillBook([], str(live), str(tmp_path))
    book.poll(now=100.0)  # no file yet
    live.write_text(json.dumps([{"kind": "oom", "at_epoch": None}]))
    book.poll(now=100.5)
    assert book.pending == []
    book.poll(now=101.0)
    assert book.pending == [Drill("oom")]
    assert book.due(epoch=1, batch=1, middle=1) == Drill("oom")


def config(**fields: object) -> dict[str, object]:
    return {"train": {"model": "yolov8n.yaml", "epochs": 3}, "project": "/abs/runs", **fields}


def test_parse_config_defaults_and_reserved_keys() -> None:
    raw = config(train={"epochs": 3, "project": "x", "resume": True, "batch": 16})
    cfg = yolo.parse_config(raw)
    assert cfg.train == {"epochs": 3, "batch": 16}
    assert cfg.run_dir == "/abs/runs/train"
    assert cfg.last_good_dir == "/abs/runs/train/last-good"
    assert cfg.drills == [] and cfg.drills_file is None and cfg.overrides == {}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"overrides": {"lr0": 0.1}}, "overrides may only set"),
        ({"project": ""}, "'project'"),
        ({"name": "a/b"}, "'name'"),
        ({"drills": [{"kind": "nope"}]}, "drill kind"),
        ({"train": []}, "'train'"),
    ],
)
def test_parse_config_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(yolo.ConfigError, match=message):
        yolo.parse_config(config(**fields))


def test_train_kwargs_fresh_and_resume() -> None:
    cfg = yolo.parse_config(config(overrides={"batch": 4}))
    fresh = yolo._train_kwargs(cfg, yolockpt.StartPlan(yolockpt.FRESH, "new"))
    assert fresh == {
        "epochs": 3,
        "project": "/abs/runs",
        "name": "train",
        "exist_ok": True,
        "batch": 4,
    }
    resume = yolo._train_kwargs(cfg, yolockpt.StartPlan(yolockpt.RESUME, "again", "/x/last.pt"))
    assert resume == {"resume": True, "batch": 4}
