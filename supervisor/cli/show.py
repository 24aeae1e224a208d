"""How the CLI shows things to people (tables, events, progress)."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.text import Text

STATE_STYLE = {
    "running": "green",
    "succeeded": "bold green",
    "failed": "bold red",
    "backoff": "yellow",
    "stopping": "yellow",
    "stopped": "dim",
    "queued": "cyan",
    "probing": "cyan",
    "starting": "cyan",
}


def console() -> Console:
    return Console(highlight=False, soft_wrap=False)


def progress_text(progress: dict[str, Any] | None) -> str:
    if not progress:
        return "-"
    parts = []
    if progress.get("epoch") is not None:
        parts.append(f"epoch {progress['epoch']}/{progress.get('epochs', '?')}")
    if progress.get("batch") is not None:
        parts.append(f"batch {progress['batch']}/{progress.get('batches', '?')}")
    if progress.get("step") is not None:
        total = f"/{progress['total']}" if progress.get("total") is not None else ""
        parts.append(f"step {progress['step']}{total}")
    for key in ("mAP50-95", "mAP50"):
        if progress.get(key) is not None:
            parts.append(f"{key} {float(progress[key]):.3f}")
            break
    losses = progress.get("losses")
    if isinstance(losses, dict) and losses:
        parts.append("loss " + "/".join(f"{float(v):.2f}" for v in losses.values()))
    elif isinstance(progress.get("loss"), (int, float)):
        parts.append(f"loss {float(progress['loss']):.4g}")
    if progress.get("slow"):
        parts.append("SLOW")
    if progress.get("eta_s") is not None:
        parts.append(f"ETA {_duration(float(progress['eta_s']))}")
    quiet = progress.get("quiet")
    if isinstance(quiet, dict) and quiet.get("since"):
        silent = _duration(max(0.0, time.time() - float(quiet["since"])))
        parts.insert(0, f"silent {silent}, hang limit {_duration(float(quiet['limit_s']))} "
                     f"(busy {_duration(float(quiet['busy_limit_s']))}),")  # fmt: skip
    return " ".join(parts) or "-"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


WIDE = 120  # below this many columns the table drops PID and SPENT
GAP = 2


def status_table(jobs: list[dict[str, Any]], width: int = WIDE) -> Text:
    """One line per job. Name, state and attempts are never cut; when the line is too
    long, progress is shortened first, then the reason (with an ellipsis), never wrapped."""
    wide = width >= WIDE
    heads = ["NAME", "STATE", "ATTEMPTS" if wide else "ATT"] + (["PID"] if wide else [])
    heads += ["DEVICE", "LAST FAULT"] + (["SPENT"] if wide else [])
    rows = []
    for job in jobs:
        fixed = [job["name"], job["state"], str(job["attempts"])]
        fixed += [str(job["pid"] or "-")] if wide else []
        fixed += [str(job["device"] or "-"), job["last_fault"] or "-"]
        fixed += [spent_text(job)] if wide else []
        rows.append((fixed, progress_text(job.get("progress")), job.get("reason") or ""))
    widths = [max([len(h)] + [len(r[0][i]) for r in rows]) for i, h in enumerate(heads)]
    room = width - sum(widths) - GAP * (len(heads) + 1)
    want_progress = max([len("PROGRESS")] + [len(r[1]) for r in rows])
    want_why = max([len("WHY")] + [len(r[2]) for r in rows])
    # the reason keeps up to 24 columns before progress gives any up; then both shrink
    progress_w = max(5, min(want_progress, room - min(want_why, 24)))
    why_w = max(3, min(want_why, room - progress_w))
    out = Text()
    _line(out, heads, widths, "PROGRESS", progress_w, "WHY", why_w, "bold")
    for fixed, progress, why in rows:
        _line(out, fixed, widths, progress, progress_w, why, why_w, None)
    return out


def _line(out: Text, fixed: list[str], widths: list[int], progress: str, progress_w: int,
          why: str, why_w: int, style: str | None) -> None:  # fmt: skip
    cells = [c.ljust(w) for c, w in zip(fixed, widths, strict=True)]
    cells.insert(len(cells) - (2 if len(cells) > 6 else 1), _cut(progress, progress_w))
    gap = " " * GAP
    state = fixed[1]
    for i, cell in enumerate(cells):
        cell_style = style or (STATE_STYLE.get(state, "") if i == 1 else None)
        out.append(cell, style=cell_style)
        out.append(gap)
    out.append(_cut(why, why_w), style=style)
    out.append("\n")


def _cut(text: str, width: int) -> str:
    """One line of at most `width` characters; an ellipsis says something was cut."""
    text = " ".join(text.split())
    return (text if len(text) <= width else text[: max(0, width - 1)] + "…").ljust(width)


def spent_text(job: dict[str, Any]) -> str:
    seconds = float(job.get("elapsed_s") or 0)
    text = _duration(seconds) if seconds else "-"
    if job.get("cost"):
        text += f" {float(job['cost']):.2f} {job.get('currency', '')}".rstrip()
    return text


HIDDEN = {"id", "ts", "job", "attempt", "event"}


def event_line(event: dict[str, Any]) -> str:
    when = dt.datetime.fromtimestamp(event["ts"]).strftime("%Y-%m-%d %H:%M:%S")
    attempt = f"#{event['attempt']}" if event.get("attempt") is not None else "  "
    fields = {k: v for k, v in event.items() if k not in HIDDEN and v not in (None, {}, [])}
    detail = " ".join(f"{k}={_short(v)}" for k, v in fields.items())
    return f"{when} {event['job']} {attempt} {event['event']} {detail}".rstrip()


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 160 else text[:157] + "..."


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
