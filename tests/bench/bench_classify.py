"""Ingest rate of the live classifier on ordinary training output.

Feeds 1,000,000 typical lines (Ultralytics epoch and validation lines with progress-bar
redraws, logging lines, warnings that mention memory) in 64 KiB chunks, as rsupd reads
a growing output.log, and prints one JSON document: {"lines_per_s": ..., ...}. Also
reports `wordy_lines_per_s`, healthy lines that all hold a prefilter word ("val_error"),
the slowest ordinary case.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.corpus

from rsup.supervisor.recognize.classify import LiveClassifier
from rsup.supervisor.recognize.signatures import load_catalogue

LINES = 1_000_000
CHUNK = 64 * 1024
GOAL = 200_000
CORPUS_GOAL = 0.95


def _epoch_line(rng: random.Random, epoch: int, step: int) -> str:
    losses = "      ".join(f"{rng.uniform(0.5, 3):.4g}" for _ in range(3))
    bar = "█" * (step % 10) + " " * (10 - step % 10)
    return (
        f"     {epoch}/300      2.61G      {losses}         {rng.randint(10, 90)}        640:"
        f"  {step * 10 % 100:2d}%|{bar}| {step}/250 [00:{step % 60:02d}<00:40,  6.1it/s]"
    )


def _other_line(rng: random.Random, n: int) -> str:
    choices = (
        f"                   all        128        929      0.{rng.randint(100, 999)}"
        f"      0.{rng.randint(100, 999)}      0.613      0.452",
        f"2024-05-01 12:00:{n % 60:02d},123 INFO step {n} lr=0.00{rng.randint(1, 9)} "
        f"loss={rng.random():.4f} grad_norm={rng.random() * 4:.3f}",
        "      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size",
        "                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95)",
        f"train: Scanning /data/labels/train.cache... {n % 5000} images, 0 backgrounds, 0 corrupt",
        "/venv/lib/python3.10/site-packages/torch/nn/modules/conv.py:456: UserWarning: "
        "Plan failed with a cudnnException, falling back to less memory-hungry algorithm",
        "MIOpen(HIP): Warning [SQLiteBase] Missing system database file: gfx1030_36.kdb "
        "Performance may degrade.",
        f"node0:{n}:{n} [0] NCCL INFO Channel 00/02 :    0   1",
    )
    return rng.choice(choices)


def make_log(lines: int = LINES, seed: int = 7) -> bytes:
    """`lines` lines of ordinary training output; one in four redraws a progress bar."""
    rng = random.Random(seed)
    out: list[str] = []
    for n in range(lines):
        if n % 4 == 0:
            redraws = [_epoch_line(rng, n // 1000 + 1, n % 250 + k) for k in range(3)]
            out.append("\r".join(redraws))
        elif n % 2:
            out.append(_epoch_line(rng, n // 1000 + 1, n % 250))
        else:
            out.append(_other_line(rng, n))
    return ("\n".join(out) + "\n").encode("utf-8")


def make_wordy_log(lines: int, seed: int = 11) -> bytes:
    """Lines that all hold a trigger word ("error", "Error") yet are healthy: the slow path."""
    rng = random.Random(seed)
    out = [
        f"step {n} loss {rng.random():.4f} val_error {rng.random():.3f} "
        f"MeanSquaredError {rng.random():.4f} lr 1e-4"
        for n in range(lines)
    ]
    return ("\n".join(out) + "\n").encode("utf-8")


def run(data: bytes) -> dict[str, float | int]:
    """Time feeding `data` to a fresh classifier in CHUNK-sized pieces."""
    classifier = LiveClassifier(load_catalogue())
    view = memoryview(data)
    start = time.perf_counter()
    findings = 0
    for offset in range(0, len(data), CHUNK):
        findings += len(classifier.feed(bytes(view[offset : offset + CHUNK])))
    classifier.close()
    seconds = time.perf_counter() - start
    return {
        "lines": classifier.lines,
        "seconds": round(seconds, 3),
        "lines_per_s": round(classifier.lines / seconds),
        "mb_per_s": round(len(data) / seconds / 1e6, 1),
        "chunk_bytes": CHUNK,
        "findings": findings,
        "verdict": classifier.verdict().category,
    }


def long_lines() -> dict[str, object]:
    """The slowest overlong line (8 KiB, what a segment is cut to) among lines made of one
    trigger word repeated, and of words that once made a pattern backtrack: a pattern that
    is not linear shows here as seconds, not milliseconds."""
    from rsup.supervisor.recognize.matcher import Matcher

    catalogue = load_catalogue()
    words = Matcher(catalogue).words
    pieces = [w + b" " for w in words] + [
        b"NCCL INFO returned refused ",  # with ", retrying" at the start
        b"error ncclA(",
        b"RuntimeError: CUDA error ",
        b"Error out of memory OOM ",
    ]
    worst, slowest = 0.0, b""
    for piece in pieces:
        line = (b", retrying " if b"NCCL" in piece else b"") + piece * (8192 // len(piece))
        classifier = LiveClassifier(catalogue)
        start = time.perf_counter()
        classifier.feed(line + b"\n")
        classifier.close()
        seconds = time.perf_counter() - start
        if seconds > worst:
            worst, slowest = seconds, piece
    return {"worst_s": round(worst, 4), "line_of": slowest.decode("utf-8", "replace")}


def corpus() -> dict[str, object]:
    """Accuracy on the real-log corpus (tests/corpus/INDEX.tsv): the dev split the
    signatures were tuned on, and the test split, never tuned on."""
    from tests.corpus.evaluate import score

    out: dict[str, object] = {}
    for split in ("dev", "test"):
        result = score(split)
        result.pop("wrong")
        out[split] = result
    # The test split with the logs the blind audit left out scored too (evaluate.py).
    every = score("test", audited_out=False)
    out["test_with_audited_out"] = {k: every[k] for k in ("logs", "accuracy")}
    out["goal_test_accuracy"] = CORPUS_GOAL
    return out


def main() -> int:
    result: dict[str, object] = dict(run(make_log()))
    result["goal_lines_per_s"] = GOAL
    # Not the goal, a floor to watch: output where every line holds a trigger word.
    result["wordy_lines_per_s"] = run(make_wordy_log(LINES // 5))["lines_per_s"]
    result["slowest_long_line"] = long_lines()
    result["corpus"] = corpus()
    print(json.dumps(result))
    return 0 if int(result["lines_per_s"]) >= GOAL else 1  # type: ignore[call-overload]


if __name__ == "__main__":
    sys.exit(main())
