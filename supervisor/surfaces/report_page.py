"""The text of a run report: its title line, and the HTML page around the picture."""

from __future__ import annotations

import datetime as dt
import html
from typing import Any


def title(data: dict[str, Any]) -> str:
    """The heading of the picture and the page: job, state, counts, progress, wall time."""
    parts = [_count(len(data["attempts"]), "attempt"), _count(len(data["faults"]), "fault")]
    if data["last"] is not None:
        total = f"/{data['total']:g}" if data["total"] else ""
        parts.append(f"{data['unit']} {data['last']:g}{total}")
    parts.append(f"{clock(data['span'])} wall")
    return f"job {data['job']}: {data['state']}, " + ", ".join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def html_page(data: dict[str, Any], png: str) -> str:
    """The whole page: the picture (a base64 PNG) over tables of attempts, faults, decisions."""
    name = html.escape(data["job"])
    t0 = float(data["t0"])
    attempts = [[f"#{a['n']}", a["device"], _when(t0 + a["start"]), _when(t0 + a["end"]),
                 clock(a["end"] - a["start"]), _exit(a), a["fault"] or "", a["decision"] or ""]
                for a in data["attempts"]]  # fmt: skip
    faults = [[clock(f["t"]), f"#{f['attempt']}", f["category"], f["detail"]]
              for f in data["faults"]]  # fmt: skip
    decisions = [[clock(d["t"]), f"#{d['attempt']}", d["label"], d["reason"]]
                 for d in data["decisions"]]  # fmt: skip
    return "\n".join([
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>rsup report: {name}</title>",
        "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;"
        "margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;"
        "vertical-align:top}img{max-width:100%}</style></head><body>",
        f"<h1>{html.escape(title(data))}</h1>",
        f"<p>{html.escape(data['reason'])}; submitted {_when(t0)}</p>",
        f'<img alt="run of {name}" src="data:image/png;base64,{png}">',
        "<h2>Attempts</h2>",
        _table(["attempt", "device", "started", "ended", "ran", "exit", "fault", "decision"],
               attempts),
        "<h2>Faults</h2>", _table(["at", "attempt", "category", "evidence"], faults),
        "<h2>Decisions</h2>", _table(["at", "attempt", "action", "reason"], decisions),
        "</body></html>", "",
    ])  # fmt: skip


def _table(head: list[str], rows: list[list[Any]]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{cells}</tr>{body or '<tr><td>none</td></tr>'}</table>"


def _exit(attempt: dict[str, Any]) -> str:
    if attempt["signal"]:
        return f"signal {attempt['signal']}"
    return "" if attempt["exit_code"] is None else f"code {attempt['exit_code']}"


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def clock(seconds: float) -> str:
    """+H:MM:SS (hours past 24 kept: a 72-hour run reads 72:00:00)."""
    whole = round(max(seconds, 0.0))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"
