"""The run report: the marks gathered from stored events, and the picture drawn from them."""

from __future__ import annotations

import base64
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from rsup.supervisor.core.job import Attempt, Job
from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.core.states import JobState
from rsup.supervisor.effects.store import Store
from rsup.supervisor.surfaces import report

np = pytest.importorskip("numpy")
pytest.importorskip("matplotlib")

T0 = 1_700_000_000.0
H = 3600.0
# (n, device, started, ended) in hours after submission; backoff gaps between them.
ATTEMPTS = [
    (1, "0", 0.2, 4.6, "gpu_memory_fault"),
    (2, "0", 4.7, 7.6, "hang"),
    (3, "cpu", 7.7, 10.0, None),
]


def put(store: Store, hours: float, job: str, attempt: int | None, event: str, **f: Any) -> None:
    """An event at a chosen time (Store.emit stamps the present)."""
    store.db.execute(
        "INSERT INTO events (ts, job, attempt, event, fields) VALUES (?,?,?,?,?)",
        (T0 + hours * H, job, attempt, event, json.dumps(f)),
    )


def three_attempts(tmp_path: Path) -> Store:
    """Epochs 1-4 on GPU 0, a memory fault; resumed at 5, 5-6, a hang; 7-8 on the CPU."""
    store = Store(tmp_path / "state.db")
    train = {"model": "yolov8n.yaml", "data": "data.yaml", "epochs": 8}
    spec = JobSpec(name="thermal", kind="ultralytics", train=train)
    store.add_job(Job("thermal", 1000, spec, JobState.SUCCEEDED, "done", T0, T0 + 10 * H))
    put(store, 0.0, "thermal", None, "job_submitted", owner_uid=1000)
    for n, device, start, end, fault in ATTEMPTS:
        exit_data = {"exit_code": 0 if fault is None else -9, "signal": None, "signal_name": None}
        store.add_attempt(
            Attempt(
                "thermal",
                n,
                f"/a/{n}",
                T0 + start * H,
                T0 + end * H,
                exit=exit_data,
                fault=fault,
                processed=1,
            )
        )
        put(
            store,
            start,
            "thermal",
            n,
            "attempt_started",
            argv=["x"],
            device=device,
            shim_pid=10 + n,
            overrides={},
        )
    for epoch, hours in enumerate([1.2, 2.2, 3.2, 4.2], start=1):
        put(store, hours, "thermal", 1, "progress", epoch=epoch, epochs=8, mAP50=0.1 * epoch)
    put(
        store,
        4.5,
        "thermal",
        1,
        "fault_detected",
        category="gpu_memory_fault",
        signature="hsa_aperture",
        line=4812,
        text="HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION",
    )
    put(
        store,
        4.5,
        "thermal",
        1,
        "fault_detected",
        category="gpu_memory_fault",
        signature="hsa_abort",
        line=4813,
        text="Aborted <core dumped>",
    )
    put(store, 4.6, "thermal", 1, "attempt_ended", exit={}, category="gpu_memory_fault")
    put(
        store,
        4.6,
        "thermal",
        1,
        "decision",
        action="restart",
        reason="restarting",
        delay=20,
        overrides={},
        evidence={},
    )
    put(store, 4.8, "thermal", 2, "run_started", resumed=True, start_epoch=5, epochs=8)
    put(store, 5.8, "thermal", 2, "progress", epoch=5, epochs=8)
    put(store, 6.8, "thermal", 2, "progress", epoch=6, epochs=8)
    put(
        store,
        7.5,
        "thermal",
        2,
        "hang_detected",
        silent_for=1800.0,
        limit=1800,
        cpu_cores=0.0,
        busy=False,
        message="silent for 1800 s",
    )
    put(
        store,
        7.6,
        "thermal",
        2,
        "decision",
        action="restart",
        reason="hang 3 times: cpu",
        delay=20,
        overrides={"device": "cpu"},
        evidence={},
    )
    put(store, 7.8, "thermal", 3, "run_started", resumed=True, start_epoch=7, epochs=8)
    put(store, 8.9, "thermal", 3, "progress", epoch=7, epochs=8)
    put(store, 9.9, "thermal", 3, "progress", epoch=8, epochs=8)
    put(
        store,
        10.0,
        "thermal",
        3,
        "decision",
        action="succeed",
        reason="exit 0",
        delay=0,
        overrides={},
        evidence={},
    )
    return store


def hours(value: float) -> float:
    return round(value / H, 6)


# the data --------------------------------------------------------------------


def test_report_data_marks(tmp_path: Path) -> None:
    data = report.report_data(three_attempts(tmp_path), "thermal")
    assert (data["t0"], hours(data["span"]), data["unit"], data["total"]) == (T0, 10.0, "epoch", 8)
    assert data["state"] == "succeeded" and data["last"] == 8.0
    bands = [
        (a["n"], a["device"], hours(a["start"]), hours(a["end"]), a["fault"], a["colour"])
        for a in data["attempts"]
    ]
    assert bands == [
        (1, "0", 0.2, 4.6, "gpu_memory_fault", report.GPU_BANDS[0][0]),
        (2, "0", 4.7, 7.6, "hang", report.GPU_BANDS[0][1]),
        (3, "cpu", 7.7, 10.0, None, report.CPU_BANDS[0]),
    ]
    # two signatures of one memory fault make one mark; the hang is its own kind
    faults = [(hours(f["t"]), f["attempt"], f["label"], f["kind"]) for f in data["faults"]]
    assert faults == [(4.5, 1, "gpu_memory_fault", "fault"), (7.5, 2, "hang", "hang")]
    assert "APERTURE_VIOLATION" in data["faults"][0]["detail"]
    decisions = [(hours(d["t"]), d["attempt"], d["label"]) for d in data["decisions"]]
    assert decisions == [(4.6, 1, "restart"), (7.6, 2, "restart on cpu"), (10.0, 3, "succeed")]
    assert [a["decision"] for a in data["attempts"]] == ["restart", "restart on cpu", "succeed"]
    changes = [(hours(c["t"]), c["attempt"], c["from"], c["to"]) for c in data["devices"]]
    assert changes == [(7.7, 3, "0", "cpu")]
    # each resumed run starts its line where it resumed (epoch 4, then 6): lost work shows
    points = [(hours(p["t"]), p["attempt"], p["value"]) for p in data["progress"]]
    assert points == [
        (1.2, 1, 1.0),
        (2.2, 1, 2.0),
        (3.2, 1, 3.0),
        (4.2, 1, 4.0),
        (4.8, 2, 4.0),
        (5.8, 2, 5.0),
        (6.8, 2, 6.0),
        (7.8, 3, 6.0),
        (8.9, 3, 7.0),
        (9.9, 3, 8.0),
    ]
    json.dumps(data)  # rsupd hands it over the socket as is


def test_fault_seen_only_in_the_exit_status_is_marked_at_the_attempt_end(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.add_job(
        Job("cmd", 0, JobSpec(name="cmd", command=["x"]), JobState.FAILED, "gave up", T0, T0)
    )
    store.add_attempt(
        Attempt(
            "cmd",
            1,
            "/a/1",
            T0 + 10,
            T0 + 70,
            fault="segfault_abort",
            exit={"exit_code": None, "signal": 11, "signal_name": "SIGSEGV"},
        )
    )
    put(store, 30 / H, "cmd", 1, "progress", step=100)
    put(store, 60 / H, "cmd", 1, "progress", step=250, steps=1000)
    data = report.report_data(store, "cmd")
    assert data["unit"] == "step" and data["total"] == 1000.0
    assert [(p["t"], p["value"]) for p in data["progress"]] == [(30.0, 100.0), (60.0, 250.0)]
    assert [(f["t"], f["label"], f["kind"]) for f in data["faults"]] == [
        (70.0, "segfault_abort", "exit")
    ]
    assert data["attempts"][0]["signal"] == "SIGSEGV"


def test_a_running_job_reaches_now(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.add_job(
        Job("live", 0, JobSpec(name="live", command=["x"]), JobState.RUNNING, "running", T0, T0)
    )
    store.add_attempt(Attempt("live", 1, "/a/1", T0 + 5))
    data = report.report_data(store, "live", now=T0 + 100)
    assert data["span"] == 100.0 and data["attempts"][0]["end"] == 100.0
    assert data["progress"] == [] and data["last"] is None


def test_a_fault_after_a_drill_says_it_was_a_rehearsal(tmp_path: Path) -> None:
    store = three_attempts(tmp_path)
    put(store, 7.4, "thermal", 2, "drill_fired", kind="hang", epoch=6)
    data = report.report_data(store, "thermal")
    assert [f["label"] for f in data["faults"]] == ["gpu_memory_fault", "hang (drill hang)"]
    assert [(hours(d["t"]), d["attempt"], d["label"]) for d in data["drills"]] == [
        (7.4, 2, "drill hang")
    ]


def test_unknown_job(tmp_path: Path) -> None:
    with pytest.raises(report.ReportError, match="no job named ghost"):
        report.report_data(Store(tmp_path / "state.db"), "ghost")


def test_state_dir_data(tmp_path: Path) -> None:
    three_attempts(tmp_path).close()
    data = report.state_dir_data(tmp_path, "thermal")
    assert json.loads(json.dumps(data)) == data  # what rsupd sends is what gets drawn
    with pytest.raises(report.ReportError, match=r"no state\.db in"):
        report.state_dir_data(tmp_path / "elsewhere", "thermal")
    assert not (tmp_path / "elsewhere").exists()  # nothing created by looking


def test_missing_matplotlib_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = three_attempts(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(report.ReportError, match=r"pip install matplotlib.*`train` extra"):
        report.render_png(store, "thermal", tmp_path / "r.png")


# the picture -----------------------------------------------------------------


def rgb(colour: str) -> Any:
    return np.array([int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])


def near(image: Any, colour: str, tolerance: float) -> Any:
    """Mask of the pixels within `tolerance` (per channel, 0..1) of `colour`."""
    return np.all(np.abs(image[..., :3] - rgb(colour)) <= tolerance, axis=-1)


def test_png_shows_bands_faults_and_decisions(tmp_path: Path) -> None:
    from matplotlib.image import imread

    path = tmp_path / "report.png"
    report.render_png(three_attempts(tmp_path), "thermal", path)
    image = imread(str(path))
    assert image.shape[:2] == (report.HEIGHT_PX, report.WIDTH_PX)
    assert image[..., :3].std() > 0.05  # not blank

    colours = [report.GPU_BANDS[0][0], report.GPU_BANDS[0][1], report.CPU_BANDS[0]]
    masks = [near(image, c, 2 / 255) for c in colours]
    row = int(np.argmax(sum(m.sum(axis=1) for m in masks)))  # the row most covered by bands
    spans = []
    for mask in masks:
        xs = np.flatnonzero(mask[row])
        assert xs.size > 100
        spans.append((int(xs.min()), int(xs.max())))
    # the bands lie in attempt order, at x proportional to time, with white gaps between
    left, right = spans[0][0], spans[2][1]
    per_hour = (right - left) / (10.0 - 0.2)
    for (_n, _dev, start, end, _f), (x0, x1) in zip(ATTEMPTS, spans, strict=True):
        assert abs(x0 - (left + (start - 0.2) * per_hour)) <= 3
        assert abs(x1 - (left + (end - 0.2) * per_hour)) <= 3
    assert spans[0][1] < spans[1][0] < spans[1][1] < spans[2][0]
    assert tuple(image[row, (spans[0][1] + spans[1][0]) // 2, :3]) == (1.0, 1.0, 1.0)

    def x_of(hour: float) -> int:
        return round(left + (hour - 0.2) * per_hour)

    rows = np.flatnonzero(masks[0][:, left + 5])  # the plot area, top to bottom
    plot = slice(int(rows.min()), int(rows.max()) + 1)
    red = near(image, report.FAULT_COLOUR, 0.12)[plot]
    green = near(image, report.DECISION_COLOUR, 0.12)[plot]
    for hour in (4.5, 7.5):  # a red line and marker at each fault, nowhere else
        assert red[:, x_of(hour) - 2 : x_of(hour) + 3].sum() > 100
    assert red[:, : x_of(4.3)].sum() == 0 and red[:, x_of(7.7) :].sum() == 0
    for hour in (4.6, 7.6, 10.0):
        assert green[:, x_of(hour) - 4 : x_of(hour) + 5].sum() > 20


def test_long_run_axis_is_in_hours(tmp_path: Path) -> None:
    data = report.report_data(three_attempts(tmp_path), "thermal")
    figure = report._figure(data)
    axes = figure.axes[0]
    assert "hours" in axes.get_xlabel()
    assert axes.get_xlim() == pytest.approx((0.0, 10.0))


def test_html_embeds_the_png_and_tables(tmp_path: Path) -> None:
    store = three_attempts(tmp_path)
    put(
        store,
        9.0,
        "thermal",
        3,
        "fault_detected",
        category="unknown",
        signature="s",
        line=1,
        text="<script>alert(1)</script>",
    )
    path = tmp_path / "report.html"
    report.render_html(store, "thermal", path)
    page = path.read_text()
    encoded = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert encoded is not None
    assert base64.b64decode(encoded.group(1)).startswith(b"\x89PNG\r\n\x1a\n")
    for text in ("<h2>Attempts</h2>", "gpu_memory_fault", "restart on cpu", "#3", "4:24:00"):
        assert text in page
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_write_report_defaults_to_a_png_named_after_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = report.report_data(three_attempts(tmp_path), "thermal")
    monkeypatch.chdir(tmp_path)
    assert report.write_report(data, None, None) == [Path("thermal-report.png")]
    assert (tmp_path / "thermal-report.png").read_bytes().startswith(b"\x89PNG")


def test_a_command_jobs_printed_progress_and_loss_are_drawn(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    spec = JobSpec(name="hf", command=["x"])
    store.add_job(Job("hf", 0, spec, JobState.SUCCEEDED, "done", T0, T0))
    store.add_attempt(Attempt("hf", 1, "/a/1", T0 + 1, ended=T0 + 50))
    for i, step in enumerate((4, 8, 12), 1):
        put(store, i / 100, "hf", 1, "progress", step=step, steps=32, loss=5.0 - i,
            source="output")  # fmt: skip
    data = report.report_data(store, "hf", now=T0 + 100)
    assert data["unit"] == "step" and data["total"] == 32.0
    assert [p["loss"] for p in data["progress"]] == [4.0, 3.0, 2.0]
    png = tmp_path / "hf.png"
    report.write_report(data, png, None)
    assert png.stat().st_size > 10_000
