"""A flood through the real shim: byte for byte under the bound, head + tail past it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rsup.workers.boundedlog import MAX_HEAD_BYTES
from rsup.workers.constants import EXIT_JSON, OUTPUT_LOG, ROTATION_JSON, SHIM_EXIT_OK

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PY = sys.executable
MARKER = re.compile(rb"\n\[rsup: dropped (\d+) bytes of output here\]\n")
LAST = re.compile(rb"flood: elapsed_s=[0-9.]+ lines=\d+ bytes=\d+\n\Z")

sys.path.insert(0, str(FIXTURES))
from flood import lines as flood_lines  # noqa: E402


def expected(n: int) -> bytes:
    return "".join(t + "\n" for t in flood_lines(n)).encode()


def run_shim(tmp_path: Path, n: int, mode: str, max_log: int) -> tuple[bytes, dict[str, Any]]:
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    cmd = [
        PY, "-m", "rsup.workers.shim", "--attempt-dir", str(attempt),
        "--max-log-bytes", str(max_log), "--cwd", str(tmp_path), "--",
        PY, str(FIXTURES / "flood.py"), str(n), "--mode", mode,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=120, start_new_session=True)  # fmt: skip
    assert proc.returncode == SHIM_EXIT_OK, proc.stderr.decode()
    record = json.loads((attempt / EXIT_JSON).read_text())
    assert record["exit_code"] == 0
    if (attempt / ROTATION_JSON).exists():
        record["rotation"] = json.loads((attempt / ROTATION_JSON).read_text())
        record["inode"] = os.stat(attempt / OUTPUT_LOG).st_ino
    return (attempt / OUTPUT_LOG).read_bytes(), record


@pytest.mark.parametrize("mode", ["print", "block"])
def test_flood_lands_byte_for_byte_under_the_bound(tmp_path: Path, mode: str) -> None:
    n = 300_000  # ~24 MB
    data, record = run_shim(tmp_path, n, mode, 1 << 30)
    want = expected(n)
    assert data[: len(want)] == want
    assert LAST.match(data[len(want) :]), data[len(want) :][:200]  # stderr, after stdout
    assert record["log_dropped_bytes"] == 0 and "rotation" not in record


def test_flood_past_the_bound_keeps_head_and_tail_and_counts_the_drop(tmp_path: Path) -> None:
    n, bound = 300_000, 1 << 20  # ~24 MB through 1 MiB: many rewrites
    data, record = run_shim(tmp_path, n, "print", bound)
    assert len(data) <= bound
    markers = list(MARKER.finditer(data))
    assert len(markers) == 1
    head, tail = data[: markers[0].start()], data[markers[0].end() :]
    dropped = int(markers[0].group(1))
    last = LAST.search(tail)
    assert last is not None
    stream = expected(n) + last.group(0)  # everything the job wrote, in order
    assert head == stream[: min(bound // 8, MAX_HEAD_BYTES)]
    assert stream.endswith(tail)
    assert stream[len(stream) - len(tail) - 1 : len(stream) - len(tail)] == b"\n"  # whole lines
    assert len(head) + dropped + len(tail) == len(stream)  # nothing lost but what is counted
    rotation = record["rotation"]
    assert rotation["generation"] >= 2
    assert rotation["dropped_bytes_total"] == dropped == record["log_dropped_bytes"]
    assert rotation["inode"] == record["inode"]
    assert markers[0].end() <= rotation["resume_offset"] <= len(data)
