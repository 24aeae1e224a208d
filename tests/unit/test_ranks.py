"""Per-rank bookkeeping of torchrun jobs: who failed first and why, who hangs."""

from __future__ import annotations

import json
from pathlib import Path

from rsup.supervisor.core.hang import HangConfig
from rsup.supervisor.recognize import ranks

BOOT = b"[rank0]:rank 0 starting\n[rank1]:rank 1 starting\n"
TRACEBACK = (
    b"[rank1]:[rank1]: Traceback (most recent call last):\n"
    b'[rank1]:[rank1]:   File "train.py", line 72, in main\n'
    b"[rank0]:[rank0]: Traceback (most recent call last):\n"
    b"[rank1]:[rank1]:     raise RuntimeError('boom')\n"
    b'[rank0]:[rank0]:   File "train.py", line 76, in main\n'
    b"[rank1]:[rank1]: RuntimeError: rank 1 failed on purpose\n"
    b"[rank0]:[rank0]: RuntimeError: [/x/gloo/transport/tcp/pair.cc:561] Connection closed "
    b"by peer [127.0.0.1]:47252.\n"
)
REPORT = b"""E1121 api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 2841) of binary: python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-21_08:08:25
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 2840)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 2840
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_08:08:25
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 2841)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 2841
============================================================
"""


def test_interleaved_tracebacks_name_the_rank_whose_error_is_not_a_peers() -> None:
    tracker = ranks.RankTracker()
    data = BOOT + TRACEBACK
    for i in range(0, len(data), 7):  # any chunking
        tracker.feed_output(data[i : i + 7])
    failure = tracker.first_failure()
    assert failure is not None and failure.rank == 1 and failure.source == "output"
    assert failure.text == "RuntimeError: rank 1 failed on purpose" and failure.line == 8
    assert not failure.victim


def test_torchrun_root_cause_wins_and_maps_local_to_global_rank() -> None:
    tracker = ranks.RankTracker(single_node=False)
    tracker.feed_output(BOOT + TRACEBACK + REPORT)
    failure = tracker.first_failure()
    assert failure is not None and (failure.rank, failure.local_rank) == (3, 1)
    assert failure.source == "torchrun" and failure.pid == 2841
    assert failure.describe() == "rank 3 failed first: killed by SIGKILL, pid 2841"


def test_error_files_of_the_last_round(tmp_path: Path) -> None:
    rounds = ((0, 0, 5, "old"), (1, 0, 20, "RuntimeError: late"), (1, 1, 10, "RuntimeError: first"))
    for round_, local, ts, msg in rounds:
        folder = tmp_path / "run_x" / f"attempt_{round_}" / str(local)
        folder.mkdir(parents=True)
        info = {"py_callstack": f"Traceback (most recent call last):\n{msg}\n", "timestamp": ts}
        record = {"message": {"message": msg, "extraInfo": info}}
        (folder / "error.json").write_text(json.dumps(record))
    tracker = ranks.RankTracker()
    assert [e.local_rank for e in tracker.read_error_files(tmp_path)] == [0, 1]
    failure = tracker.first_failure()
    assert failure is not None and failure.rank == 1 and failure.source == "error_file"
    assert failure.text == "RuntimeError: first"


def test_only_a_peers_complaint_is_reported_as_such() -> None:
    tracker = ranks.RankTracker()
    peer_lost = [line + b"\n" for line in TRACEBACK.splitlines() if line.startswith(b"[rank0]")]
    tracker.feed_output(b"".join(peer_lost))
    failure = tracker.first_failure()
    assert failure is not None and failure.victim and failure.category == "nccl_distributed"
    assert failure.describe().startswith("rank 0 reported the first failure, a peer's: ")


def test_a_stopped_rank_is_the_culprit_though_its_peer_is_silent_too() -> None:
    tracker = ranks.RankTracker(HangConfig(timeout=5))
    for rank, pid in ((0, 100), (1, 101)):
        tracker.feed_event({"event": "heartbeat", "rank": rank, "pid": pid}, now=0.0)
    tracker.feed_event({"event": "heartbeat", "rank": 0, "pid": 100}, now=1.0)
    states = {100: "S", 101: "T"}

    def sample(pid: int) -> ranks.ProcSample:
        return ranks.ProcSample(cpu=1.0, state=states[pid], start_time=7)

    assert tracker.check_hang(4.0, sample) is None
    hung = tracker.check_hang(6.5, sample)
    assert hung is not None and hung.rank == 1 and hung.pid == 101 and hung.silent == (1, 0)
    assert not hung.verdict.busy and "stopped" in hung.describe()


def test_a_busy_rank_waits_for_the_hard_limit_and_a_gone_one_is_skipped() -> None:
    tracker = ranks.RankTracker(HangConfig(timeout=5, hard_factor=3))
    tracker.feed_event({"event": "heartbeat", "rank": 0, "pid": 100}, now=0.0)
    cpu = iter(range(0, 1000))

    def busy(pid: int) -> ranks.ProcSample:
        return ranks.ProcSample(cpu=float(next(cpu)), state="R", start_time=7)

    def gone(pid: int) -> ranks.ProcSample:
        return ranks.ProcSample(cpu=None)

    assert all(tracker.check_hang(t, busy) is None for t in (1.0, 6.0, 10.0, 14.0))
    hung = tracker.check_hang(15.5, busy)
    assert hung is not None and hung.verdict.busy
    assert tracker.check_hang(100.0, gone) is None
