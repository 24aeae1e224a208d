"""Progress from what jobs already print: tqdm bars, Hugging Face Trainer log dicts,
Lightning's bar and metrics, `Epoch N/M` and `step N/M` lines, Ultralytics rows.

Only the latest state matters, so only the tail of each new piece of output is read
(a flood costs nothing). A report has some of: epoch, epochs, step, total, loss,
learning_rate, rate (it/s), elapsed_s, eta_s. `position` orders reports: a redraw of the
same counter is not an advance.
"""

from __future__ import annotations

import ast
import re
from typing import Any

TAIL = 16 * 1024  # bytes of each new piece of output read for progress
_CLOCK = r"(?:\d+:)?\d+:\d+"
_TQDM = re.compile(
    r"(?P<n>\d+)/(?P<total>\d+) ?\[(?P<elapsed>" + _CLOCK + r")<(?P<left>" + _CLOCK + r"|\?)"
    r"(?:, *(?P<rate>[\d.]+|\?) ?(?P<unit>s/it|it/s|[a-zA-Z]+/s))?(?P<post>[^\]]*)\]"
)
_EPOCH = re.compile(r"\b[Ee]poch[ :\[]*(?P<epoch>\d+)(?: ?/ ?(?P<epochs>\d+))?")
_STEP = re.compile(r"\b(?:[Ss]tep|[Ii]ter(?:ation)?)[ :\[]*(?P<step>\d+) ?/ ?(?P<total>\d+)")
# Ultralytics: "      3/100      2.61G      1.104 ..." (epoch/epochs, then GPU memory)
_ULTRALYTICS = re.compile(r"^ +(?P<epoch>\d+)/(?P<epochs>\d+) +[\d.]+G ")
_HF_DICT = re.compile(r"\{'(?:loss|train_loss|eval_loss)'[^{}]*'epoch'[^{}]*\}")
_LOSS = re.compile(r"\b(?:train_)?loss[=:] ?(?P<loss>[\d.]+(?:e[-+]?\d+)?)")


def _seconds(clock: str) -> float | None:
    if clock == "?":
        return None
    total = 0.0
    for part in clock.split(":"):
        total = total * 60 + float(part)
    return total


def parse_segment(text: str) -> dict[str, Any]:
    """What one line (or one redraw of a bar) says about progress; {} when nothing."""
    found: dict[str, Any] = {}
    bar = _TQDM.search(text)
    if bar:
        found.update(_from_bar(bar))
    row = _ULTRALYTICS.match(text)
    epoch = row or _EPOCH.search(text[: bar.start()] if bar else text)
    if epoch:
        found["epoch"] = int(epoch["epoch"])
        if epoch["epochs"]:
            found["epochs"] = int(epoch["epochs"])
    if not bar:
        step = _STEP.search(text)
        if step:
            found.update(step=int(step["step"]), total=int(step["total"]))
    hf = _HF_DICT.search(text)
    if hf:
        found.update(_from_dict(hf.group(0)))
    elif "loss" not in found:
        loss = _LOSS.search(text)
        if loss:
            found["loss"] = float(loss["loss"])
    return found


def _from_bar(bar: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"step": int(bar["n"]), "total": int(bar["total"])}
    elapsed, left = _seconds(bar["elapsed"]), _seconds(bar["left"])
    if elapsed is not None:
        out["elapsed_s"] = elapsed
    if left is not None:
        out["bar_left_s"] = left
    if bar["rate"] and bar["rate"] != "?":
        rate = float(bar["rate"])
        out["rate"] = 1.0 / rate if bar["unit"] == "s/it" and rate else rate
    loss = _LOSS.search(bar["post"] or "")
    if loss:
        out["loss"] = float(loss["loss"])
    return out


def _from_dict(text: str) -> dict[str, Any]:
    try:
        record = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {}
    out: dict[str, Any] = {}
    for key, name in (("loss", "loss"), ("train_loss", "loss"), ("learning_rate", "learning_rate"),
                      ("epoch", "epoch_float")):  # fmt: skip
        value = record.get(key)
        try:
            if value is not None:
                out[name] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def latest(data: bytes) -> dict[str, Any]:
    """The newest progress in a piece of output: the last bar or line that says any,
    merged with the loss and epoch of the lines just before it."""
    text = data[-TAIL:].decode("utf-8", "replace")
    found: dict[str, Any] = {}
    for segment in reversed(re.split(r"[\r\n]+", text)):
        if not segment.strip():
            continue
        said = parse_segment(segment)
        for key, value in said.items():
            found.setdefault(key, value)
        if "step" in found and ("loss" in found or len(found) > 6):
            break
    return with_eta(found)


def with_eta(found: dict[str, Any]) -> dict[str, Any]:
    """Seconds left for the whole run, where the counters allow it."""
    left = found.pop("bar_left_s", None)
    epoch, epochs = found.get("epoch"), found.get("epochs")
    if left is None:
        return found
    if isinstance(epoch, int) and isinstance(epochs, int) and epochs > 0:
        per_epoch = left + float(found.get("elapsed_s") or 0.0)
        # the bar is this epoch's (Ultralytics rows and `Epoch N/M` count from 1)
        found["eta_s"] = round(left + per_epoch * max(0, epochs - epoch), 1)
    else:
        found["eta_s"] = round(left, 1)  # the bar is the whole run (HF Trainer's is)
    return found


def fraction(found: dict[str, Any]) -> float | None:
    """How much of the whole run is done (0..1), where the counters say: epochs of epochs
    with the step within the epoch, or step of total."""
    epoch, epochs = found.get("epoch"), found.get("epochs")
    step, total = found.get("step"), found.get("total")
    within = step / total if isinstance(step, int) and isinstance(total, int) and total else None
    if isinstance(epoch, int) and isinstance(epochs, int) and epochs > 0:
        return min(1.0, (max(0, epoch - 1) + (within or 0.0)) / epochs)
    return within


def position(found: dict[str, Any]) -> tuple[float, ...]:
    """Ordering of progress reports: (epoch, step) as far as known."""
    epoch = found.get("epoch", found.get("epoch_float"))
    step = found.get("step")
    return tuple(float(v) for v in (epoch, step) if isinstance(v, (int, float)))


def only_progress(data: bytes) -> bool:
    """True when a (small) piece of output is nothing but progress-bar redraws: such
    output says the job is alive only if its counter moved."""
    if len(data) > TAIL:
        return False
    text = data.decode("utf-8", "replace")
    segments = [s for s in re.split(r"[\r\n]+", text) if s.strip()]
    return bool(segments) and all(_TQDM.search(s) for s in segments)
