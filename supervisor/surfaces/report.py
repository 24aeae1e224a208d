"""`rsup report`: one picture of a whole run, from the job's stored events.

`report_data` gathers the series and the marks (pure: store in, JSON-able dict out), so
rsupd can hand it over the socket without drawing anything. `draw_png` / `draw_html`
turn it into a picture; matplotlib is imported only then, with the Agg canvas.
"""

from __future__ import annotations

import base64
import io
import itertools
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rsup.supervisor.core.errors import RsupError
from rsup.supervisor.core.job import Attempt
from rsup.supervisor.effects.store import Store
from rsup.supervisor.surfaces.report_page import html_page, title

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from rsup.supervisor.core.spec import JobSpec

# Bands alternate between two shades of their device's colour: adjacent attempts always
# differ, and a move to another device (the CPU above all) changes the hue.
CPU_BANDS = ("#fde0c2", "#f6c28f")
GPU_BANDS = (("#dbe8f6", "#b3cdea"), ("#d8efd2", "#b0dca5"), ("#e6ddf1", "#cbbbe3"))
FAULT_COLOUR = "#e00000"
DECISION_COLOUR = "#1a7f37"
DRILL_COLOUR = "#8e44ad"
PROGRESS_COLOUR = "#1f2d3d"
LOSS_COLOUR = "#7a4fb3"
WIDTH_PX, HEIGHT_PX, DPI = 1400, 650, 100
LONG_RUN = 3 * 3600.0  # from here on the time axis is in hours
MEDIUM_RUN = 180.0  # from here on, in minutes


Rows = list[dict[str, Any]]


class ReportError(RsupError):
    """A report cannot be made; the message says what to do."""


# gathering --------------------------------------------------------------------


def report_data(store: Store, job: str, now: float | None = None) -> dict[str, Any]:
    """Series and marks of one job's whole history; times are seconds after `t0`."""
    record = store.get_job(job)
    if record is None:
        raise ReportError(f"no job named {job} in {store.path}; `rsup status` lists the jobs")
    events = store.events(job)
    attempts = store.attempts(job)
    starts = [e["ts"] for e in events[:1]] + [a.started for a in attempts[:1]]
    t0 = min([record.created, *starts])
    ends = [e["ts"] for e in events[-1:]] + [a.ended or a.started for a in attempts]
    last = max([t0, *ends])
    if not record.state.terminal:
        last = max(last, time.time() if now is None else now)
    unit = _unit(events)
    progress = _progress(events, unit, t0)
    rows = _attempts(attempts, events, t0, last)
    drills = _drills(events, t0)
    return {
        "job": job,
        "state": record.state.value,
        "reason": record.reason,
        "t0": t0,
        "span": last - t0,
        "unit": unit,
        "total": _total(events, record.spec),
        "last": progress[-1]["value"] if progress else None,
        "progress": progress,
        "attempts": rows,
        "faults": _blame_drills(_faults(events, attempts, t0), drills),
        "decisions": _decisions(events, t0),
        "drills": drills,
        "devices": _device_changes(rows),
    }


def state_dir_data(state_dir: Path, job: str) -> dict[str, Any]:
    """`report_data` read straight from a state dir (`rsup run --state-dir`, or rsupd's)."""
    db = state_dir / "state.db"
    if not db.is_file():
        raise ReportError(
            f"no state.db in {state_dir}: give the folder `rsup run --state-dir` used"
        )
    store = Store(db)
    try:
        return report_data(store, job)
    finally:
        store.close()


def _unit(events: Rows) -> str:
    marks = [e for e in events if e["event"] == "progress"]
    if marks and not any("epoch" in e for e in marks) and any("step" in e for e in marks):
        return "step"
    return "epoch"


def _progress(events: Rows, unit: str, t0: float) -> Rows:
    """Progress points; a resumed run adds its starting point, so lost work shows."""
    points = []
    for e in events:
        value = e.get(unit) if e["event"] == "progress" else None
        if e["event"] == "run_started" and unit == "epoch" and e.get("start_epoch") is not None:
            value = int(e["start_epoch"]) - 1
        if isinstance(value, int | float) and not isinstance(value, bool):
            point = {"t": e["ts"] - t0, "value": float(value), "attempt": e["attempt"]}
            if isinstance(e.get("loss"), int | float):
                point["loss"] = float(e["loss"])
            points.append(point)
    return points


def _total(events: Rows, spec: JobSpec) -> float | None:
    found = [e["epochs"] for e in events if isinstance(e.get("epochs"), int | float)]
    found += [e["steps"] for e in events if isinstance(e.get("steps"), int | float)]
    if found:
        return float(found[-1])
    epochs = (spec.train or {}).get("epochs")
    return float(epochs) if isinstance(epochs, int | float) else None


def _attempts(attempts: list[Attempt], events: Rows, t0: float, last: float) -> Rows:
    started = {e["attempt"]: e for e in events if e["event"] == "attempt_started"}
    decided = {e["attempt"]: e for e in events if e["event"] == "decision"}
    palette: dict[str, tuple[str, str]] = {}
    rows = []
    for a in attempts:
        device = str(started.get(a.n, {}).get("device") or "?")
        if device not in palette:
            gpus = sum(1 for d in palette if d != "cpu")
            palette[device] = CPU_BANDS if device == "cpu" else GPU_BANDS[gpus % len(GPU_BANDS)]
        exit_data = a.exit or {}
        rows.append({
            "n": a.n, "start": a.started - t0, "end": (a.ended or last) - t0,
            "device": device, "colour": palette[device][(a.n - 1) % 2],
            "exit_code": exit_data.get("exit_code"),
            "signal": exit_data.get("signal_name") or exit_data.get("signal"),
            "fault": a.fault, "decision": _label(decided[a.n]) if a.n in decided else None,
        })  # fmt: skip
    return rows


def _faults(events: Rows, attempts: list[Attempt], t0: float) -> Rows:
    """fault_detected and hang_detected (one per category per attempt), then the fault an
    attempt ended with when no event named it (a segfault seen only in the exit status)."""
    marks: Rows = []
    seen: set[tuple[Any, str]] = set()
    for e in events:
        if e["event"] not in ("fault_detected", "hang_detected"):
            continue
        hang = e["event"] == "hang_detected"
        category = "hang" if hang else str(e.get("category"))
        if (e["attempt"], category) in seen:
            continue
        seen.add((e["attempt"], category))
        detail = e.get("message") if hang else f"{e.get('signature')}: {e.get('text', '')}"
        marks.append({"t": e["ts"] - t0, "attempt": e["attempt"], "category": category,
                      "label": category, "kind": "hang" if hang else "fault",
                      "detail": str(detail)[:300]})  # fmt: skip
    for a in attempts:
        if a.fault and (a.n, a.fault) not in seen and a.ended is not None:
            marks.append({"t": a.ended - t0, "attempt": a.n, "category": a.fault,
                          "label": a.fault, "kind": "exit",
                          "detail": "from the exit status"})  # fmt: skip
    return sorted(marks, key=lambda m: float(m["t"]))


def _decisions(events: Rows, t0: float) -> Rows:
    return [
        {"t": e["ts"] - t0, "attempt": e["attempt"], "action": e.get("action"),
         "label": _label(e), "reason": str(e.get("reason", ""))}
        for e in events if e["event"] == "decision"
    ]  # fmt: skip


def _drills(events: Rows, t0: float) -> Rows:
    return [
        {"t": e["ts"] - t0, "attempt": e["attempt"], "label": f"drill {e.get('kind')}"}
        for e in events
        if e["event"] == "drill_fired"
    ]


def _blame_drills(faults: Rows, drills: Rows) -> Rows:
    """A fault that follows a drill in its attempt says so: it was a rehearsal."""
    for drill in drills:
        after = [f for f in faults if f["attempt"] == drill["attempt"] and f["t"] >= drill["t"]]
        if after:
            after[0]["label"] = f"{after[0]['label']} ({drill['label']})"
    return faults


def _label(decision: dict[str, Any]) -> str:
    """Short: 'restart batch=4', 'restart on cpu', 'reprobe', 'fail'."""
    parts = [str(decision.get("action"))]
    for key, value in sorted((decision.get("overrides") or {}).items()):
        if key == "device":
            parts.append(f"on {value}")
        elif key == "env":
            parts.append("+env")
        else:
            parts.append(f"{key}={value}")
    return " ".join(parts)


def _device_changes(attempts: Rows) -> Rows:
    changes = []
    for before, after in itertools.pairwise(attempts):
        if before["device"] != after["device"]:
            changes.append({"t": after["start"], "attempt": after["n"],
                            "from": before["device"], "to": after["device"]})  # fmt: skip
    return changes


# drawing ----------------------------------------------------------------------


def render_png(store: Store, job: str, path: Path) -> None:
    """Draw the report of `job` as a PNG at `path`."""
    draw_png(report_data(store, job), path)


def render_html(store: Store, job: str, path: Path) -> None:
    """The PNG, embedded, plus tables of the attempts, faults and decisions."""
    draw_html(report_data(store, job), path)


def draw_png(data: dict[str, Any], target: Path | IO[bytes]) -> None:
    """Draw a `report_data` dict as a PNG (a path or a binary stream)."""
    figure = _figure(data)
    figure.savefig(target, format="png", dpi=DPI)


def draw_html(data: dict[str, Any], path: Path) -> None:
    buffer = io.BytesIO()
    draw_png(data, buffer)
    png = base64.b64encode(buffer.getvalue()).decode("ascii")
    _write(path, html_page(data, png).encode("utf-8"))


def write_report(data: dict[str, Any], png: Path | None, page: Path | None) -> list[Path]:
    """What `rsup report` writes: the PNG and/or HTML asked for, else NAME-report.png."""
    if png is None and page is None:
        png = Path(f"{data['job']}-report.png")
    if png is not None:
        draw_png(data, png)
    if page is not None:
        draw_html(data, page)
    return [p for p in (png, page) if p is not None]


def _write(path: Path, blob: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(blob)
    tmp.replace(path)


def _matplotlib() -> tuple[type[Figure], Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ReportError(
            "a run report is drawn with matplotlib, which is not installed in rsup's "
            "environment: `pip install matplotlib` (or install rsup with the `train` extra)"
        ) from None
    return Figure, FigureCanvasAgg


def _scale(span: float) -> tuple[float, str]:
    if span >= LONG_RUN:
        return 3600.0, "hours"
    if span >= MEDIUM_RUN:
        return 60.0, "minutes"
    return 1.0, "seconds"


def _figure(data: dict[str, Any]) -> Figure:
    figure_cls, canvas_cls = _matplotlib()
    from matplotlib.ticker import MaxNLocator

    fig = figure_cls(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, facecolor="white")
    canvas_cls(fig)  # the Agg canvas: no GUI, no global pyplot state
    ax = fig.add_axes((0.05, 0.2, 0.93, 0.71))
    div, unit = _scale(float(data["span"]) or 1.0)
    ax.set_xlim(0, max(float(data["span"]), 1e-9) / div)
    top = max([float(data["total"] or 0)] + [p["value"] for p in data["progress"]] + [1.0])
    ax.set_ylim(0, top * 1.08)
    ax.set_xlabel(f"wall time since submission ({unit})")
    ax.set_ylabel(data["unit"])
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title(data), loc="left", fontsize=11)
    _bands(ax, data, div)
    _series(ax, data, div)
    _marks(ax, data, div)
    _legend(fig, data)
    return fig


def _bands(ax: Axes, data: dict[str, Any], div: float) -> None:
    span = float(data["span"]) or 1.0
    for a in data["attempts"]:
        ax.axvspan(a["start"] / div, a["end"] / div, facecolor=a["colour"],
                   edgecolor="none", zorder=0)  # fmt: skip
        width = (a["end"] - a["start"]) / span
        label = f"#{a['n']}\n{_device_name(a['device'])}" if width > 0.03 else f"#{a['n']}"
        if width > 0.008:
            ax.text((a["start"] + a["end"]) / 2 / div, 0.02, label, ha="center", va="bottom",
                    fontsize=8, transform=ax.get_xaxis_transform(), zorder=3)  # fmt: skip


def _series(ax: Axes, data: dict[str, Any], div: float) -> None:
    by_attempt: dict[Any, Rows] = {}
    for point in data["progress"]:
        by_attempt.setdefault(point["attempt"], []).append(point)
    small = len(data["progress"]) <= 300
    for points in by_attempt.values():
        ax.plot([p["t"] / div for p in points], [p["value"] for p in points],
                color=PROGRESS_COLOUR, linewidth=1.4, marker="o" if small else None,
                markersize=3, zorder=4)  # fmt: skip
    _loss(ax, by_attempt, div)


def _loss(ax: Axes, by_attempt: dict[Any, Rows], div: float) -> None:
    """The loss across attempts, on its own axis at the right, where the job printed one."""
    lossy = {n: [p for p in pts if "loss" in p] for n, pts in by_attempt.items()}
    if not any(lossy.values()):
        return
    twin = ax.twinx()
    twin.set_ylabel("loss", color=LOSS_COLOUR)
    for points in lossy.values():
        twin.plot([p["t"] / div for p in points], [p["loss"] for p in points],
                  color=LOSS_COLOUR, linewidth=1.0, linestyle=":", zorder=3)  # fmt: skip


def _marks(ax: Axes, data: dict[str, Any], div: float) -> None:
    axis = ax.get_xaxis_transform()  # x in data, y in axes fraction
    for f in data["faults"]:
        x = f["t"] / div
        ax.axvline(x, color=FAULT_COLOUR, linewidth=1.0, linestyle=(0, (4, 3)), zorder=2)
        ax.plot([x], [0.975], marker="v", markersize=9, color=FAULT_COLOUR,
                transform=axis, clip_on=False, zorder=5)  # fmt: skip
        ax.text(x, 0.94, f" {f['label']}", rotation=90, ha="right", va="top", fontsize=8,
                color=FAULT_COLOUR, transform=axis, zorder=5)  # fmt: skip
    for d in data["decisions"]:
        x = d["t"] / div
        ax.plot([x], [0.12], marker="^", markersize=8, color=DECISION_COLOUR,
                transform=axis, zorder=5)  # fmt: skip
        ax.text(x, 0.16, f" {d['label']}", rotation=90, ha="left", va="bottom", fontsize=8,
                color=DECISION_COLOUR, transform=axis, zorder=5)  # fmt: skip
    for d in data["drills"]:
        ax.plot([d["t"] / div], [0.07], marker="x", markersize=8, color=DRILL_COLOUR,
                transform=axis, zorder=5)  # fmt: skip


def _device_name(device: str) -> str:
    return f"gpu {device}" if device.isdigit() else device


def _legend(fig: Figure, data: dict[str, Any]) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [
        Line2D([], [], color=PROGRESS_COLOUR, marker="o", markersize=3, label=data["unit"]),
        Line2D([], [], color=FAULT_COLOUR, marker="v", linestyle="", label="fault"),
        Line2D([], [], color=DECISION_COLOUR, marker="^", linestyle="", label="decision"),
    ]
    if data["drills"]:
        handles.append(Line2D([], [], color=DRILL_COLOUR, marker="x", linestyle="",
                              label="drill"))  # fmt: skip
    devices: dict[str, str] = {}
    for a in data["attempts"]:
        devices.setdefault(a["device"], a["colour"])
    handles += [Patch(facecolor=c, label=f"on {_device_name(d)}") for d, c in devices.items()]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 7), fontsize=9,
               frameon=False)  # fmt: skip
