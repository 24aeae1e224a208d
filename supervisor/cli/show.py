"""How the CLI shows things to people (tables, events, progress)."""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

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
        parts.append(f"step {progress['step']}")
    for key in ("mAP50-95", "mAP50"):
        if progress.get(key) is not None:
            parts.append(f"{key} {float(progress[key]):.3f}")
            break
    losses = progress.get("losses")
    if isinstance(losses, dict) and losses:
        parts.append("loss " + "/".join(f"{float(v):.2f}" for v in losses.values()))
    if progress.get("slow"):
        parts.append("SLOW")
    if progress.get("eta_s") is not None:
        parts.append(f"ETA {_duration(float(progress['eta_s']))}")
    return " ".join(parts) or "-"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def status_table(jobs: list[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("NAME", "STATE", "ATTEMPTS", "PID", "DEVICE", "PROGRESS", "LAST FAULT", "SPENT"):
        table.add_column(column)
    table.add_column("WHY", overflow="fold")
    for job in jobs:
        style = STATE_STYLE.get(job["state"], "")
        table.add_row(
            job["name"],
            f"[{style}]{job['state']}[/]" if style else job["state"],
            str(job["attempts"]),
            str(job["pid"] or "-"),
            str(job["device"] or "-"),
            progress_text(job.get("progress")),
            job["last_fault"] or "-",
            spent_text(job),
            job.get("reason") or "",
        )
    return table


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
