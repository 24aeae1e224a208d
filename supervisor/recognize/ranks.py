"""Every rank of a torchrun job: whose output is whose, who failed first and why, who hangs.

rsup starts torchrun with `--tee 3`, `--log-line-prefix-template "[rank${rank}]:"` and a
`--log-dir` inside the attempt folder (launch.torchrun_args), so:

- every line a rank prints reaches output.log as `[rankN]:line`, N the global rank (torch
  adds its own `[rankN]: ` to an uncaught traceback, so that one reads `[rankN]:[rankN]: `);
  lines without the prefix are the agent's;
- torchrun points each rank's TORCHELASTIC_ERROR_FILE at
  `<log dir>/<run id>_*/attempt_<round>/<local rank>/error.json`, written when the script's
  entry point carries torch's `@record`;
- when workers fail the agent logs `failed (exitcode: X) local_rank: N (pid: P)`, and when
  it gives up, a ChildFailedError report whose "Root Cause" names the global rank.

Who failed first, best evidence first: torchrun's root cause, the agent's `failed` line,
the error files (earliest timestamp), the ranks' own output (earliest fatal line). A rank
that only says a peer went away (nccl_distributed) or that the agent stopped it (SIGTERM)
is a victim, and yields to any other failed rank.

Hangs: a rank that sends events (workers/heartbeat.py adds its rank and pid) gets its own
HangDetector, fed by its events and output lines and judged on its own process's CPU
time, so a stopped or stuck rank is found even while its peers spin in a collective.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from rsup.supervisor.core.hang import HangConfig, HangDetector, HangVerdict
from rsup.supervisor.recognize.agentreport import AgentReport, WorkerExit
from rsup.supervisor.recognize.classify import LiveClassifier
from rsup.supervisor.recognize.diagnosis import Diagnosis
from rsup.supervisor.recognize.errorfiles import ErrorFile, read_error_files
from rsup.supervisor.recognize.exitcodes import classify_exit
from rsup.supervisor.recognize.linemap import LineMap
from rsup.supervisor.recognize.offline import diagnose_text
from rsup.workers import constants as C
from rsup.workers.proctree import stat_fields

if TYPE_CHECKING:
    from rsup.supervisor.core.spec import JobSpec

LOG_DIR = "torchrun"  # torchrun's --log-dir, under the attempt folder
PREFIX_TEMPLATE = "[rank${rank}]:"
_LINE_PREFIX = re.compile(rb"\[rank(\d+)\]:")
_MORE_PREFIXES = re.compile(rb"(?:\[(?:rank|default)\d+\]: ?)+")
GONE_STATES = frozenset("ZXx")
SOURCES = ("torchrun", "agent", "error_file", "output")  # by the order of first_failure
CLOCK_TICKS = float(os.sysconf("SC_CLK_TCK"))


@dataclass(frozen=True)
class RankFailure:
    """The rank that failed first, and why."""

    rank: int | None  # global rank; None when only the local rank is known
    local_rank: int | None
    category: str
    text: str
    source: str  # torchrun | agent | error_file | output
    line: int | None = None  # of output.log
    exitcode: int | None = None
    pid: int | None = None
    victim: bool = False  # it only says a peer failed: the culprit left no trace here

    @property
    def who(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"local rank {self.local_rank}"

    def describe(self) -> str:
        if self.victim:
            return f"{self.who} reported the first failure, a peer's: {self.text}"
        return f"{self.who} failed first: {self.text}"


@dataclass(frozen=True)
class ProcSample:
    """One look at a rank's process: CPU seconds so far, /proc state letter, start time."""

    cpu: float | None
    state: str = ""
    start_time: int | None = None


@dataclass(frozen=True)
class RankHang:
    rank: int
    pid: int
    verdict: HangVerdict
    state: str
    silent: tuple[int, ...]  # every rank past its limit, the culprit first

    def describe(self) -> str:
        stopped = " (its process is stopped)" if self.state == "T" else ""
        others = [r for r in self.silent if r != self.rank]
        also = f"; also silent: ranks {', '.join(map(str, others))}" if others else ""
        return f"rank {self.rank} (pid {self.pid}){stopped}: {self.verdict.describe()}{also}"


class _Who(NamedTuple):
    rank: int | None  # global
    local_rank: int | None


class _Look(NamedTuple):
    rank: int
    pid: int
    state: str
    last_seen: float
    verdict: HangVerdict | None


@dataclass
class _Rank:
    classifier: LiveClassifier
    lines: LineMap = field(default_factory=LineMap)
    pid: int | None = None
    start_time: int | None = None
    detector: HangDetector | None = None
    last_seen: float = 0.0


class RankTracker:
    """Feed it output.log bytes and events.jsonl records as they come; ask it who failed."""

    def __init__(self, hang: HangConfig | None = None, single_node: bool = True) -> None:
        self.hang, self.single_node = hang, single_node
        self.ranks: dict[int, _Rank] = {}
        self.agent = AgentReport()
        self.errors: list[ErrorFile] = []
        self.local_to_global: dict[int, int] = {}
        self._pending = b""
        self._line = 0  # complete lines of output.log seen

    # output ---------------------------------------------------------------------

    def feed_output(self, data: bytes, now: float = 0.0) -> None:
        """The next bytes of output.log."""
        *complete, self._pending = (self._pending + data).split(b"\n")
        for raw in complete:
            self._line += 1
            prefix = _LINE_PREFIX.match(raw)
            if prefix is None:
                self._agent_line(raw.decode("utf-8", "replace"))
            else:
                self._rank_line(int(prefix.group(1)), _strip_prefixes(raw[prefix.end() :]), now)

    def _rank_line(self, rank: int, line: bytes, now: float) -> None:
        state = self._rank(rank)
        state.lines.add(self._line)
        state.classifier.feed(line + b"\n")
        if state.detector is not None:
            state.detector.progress(now)
            state.last_seen = now

    def _rank(self, rank: int) -> _Rank:
        if rank not in self.ranks:
            self.ranks[rank] = _Rank(LiveClassifier())
        return self.ranks[rank]

    def _agent_line(self, text: str) -> None:
        opened = self.agent.feed(text)
        if opened is not None and opened.rank is not None:
            self.local_to_global[opened.local_rank] = opened.rank

    # events and files -----------------------------------------------------------------

    def feed_event(self, record: dict[str, Any], now: float) -> None:
        """One events.jsonl record; those with a rank and a pid keep that rank's clock."""
        rank, pid = record.get("rank"), record.get("pid")
        if not isinstance(rank, int) or not isinstance(pid, int):
            return
        state = self._rank(rank)
        if state.pid != pid:  # a new process for this rank (torchrun restarted it)
            state.pid, state.start_time = pid, None
            state.detector = HangDetector(self.hang, now) if self.hang is not None else None
        if state.detector is not None:
            state.detector.progress(now)
        state.last_seen = now
        local = record.get("local_rank")
        if isinstance(local, int):
            self.local_to_global[local] = rank

    def read_error_files(self, log_dir: Path) -> list[ErrorFile]:
        """Read the error files of torchrun's last round under `log_dir` (after the attempt)."""
        self.errors = read_error_files(log_dir)
        return self.errors

    def pids(self) -> dict[int, int]:
        """rank -> pid of every rank that reported one."""
        return {r: s.pid for r, s in self.ranks.items() if s.pid is not None}

    # verdicts -------------------------------------------------------------------------

    def first_failure(self) -> RankFailure | None:
        """The rank that failed first and why, from the best evidence at hand; None if none."""
        offers: dict[Any, tuple[_Who, tuple[Any, ...]]] = {}
        for who, order in self._offers():
            key = who.rank if who.rank is not None else ("local", who.local_rank)
            if key not in offers or order < offers[key][1]:
                offers[key] = (who, order)
        if not offers:
            return None
        who, order = min(offers.values(), key=lambda o: (self._victim(o[0]), o[1]))
        return self._failure(who, SOURCES[order[0]], self._victim(who))

    def _offers(self) -> list[tuple[_Who, tuple[Any, ...]]]:
        """(who, order) for every piece of evidence of a failed rank; lower order is better."""
        # torchrun's "Root Cause" first, then the other ranks its report lists: when the
        # SIGKILLed rank and its peer's complaint land in one monitor interval, torchrun may
        # call the peer the root cause; the victim rule below then prefers the killed one.
        offers: list[tuple[_Who, tuple[Any, ...]]] = [
            (_Who(ex.rank, ex.local_rank), (0, 0 if ex.root else 1))
            for ex in self.agent.exits
            if ex.root or ex.exitcode not in (None, 0)
        ]
        if self.agent.failed is not None:
            offers.append((self._who_local(self.agent.failed.local_rank), (1,)))
        for err in self.errors:
            who = self._who_local(err.local_rank)
            offers.append((who, (2, err.timestamp or 0, self._root_line(who.rank) or 1 << 62)))
        for rank in self.ranks:
            line = self._root_line(rank)
            if line is not None:
                offers.append((self._who_global(rank), (3, line)))
        return offers

    def _failure(self, who: _Who, source: str, victim: bool) -> RankFailure:
        ex = self.agent.exit_of(who.rank, who.local_rank)
        diagnosis = self._diagnosis(who, ex)
        state = self.ranks.get(who.rank) if who.rank is not None else None
        return RankFailure(
            rank=who.rank,
            local_rank=who.local_rank,
            category=diagnosis.category if diagnosis.category != C.NONE else C.UNKNOWN,
            text=_why(diagnosis, ex),
            source=source,
            line=state.lines.lookup(diagnosis.line) if state else None,
            exitcode=ex.exitcode if ex else None,
            pid=ex.pid if ex else None,
            victim=victim,
        )

    def _diagnosis(self, who: _Who, ex: WorkerExit | None) -> Diagnosis:
        """The rank's own output, else its error file, completed by how its process ended."""
        diagnosis = Diagnosis(C.NONE)
        if who.rank in self.ranks:
            diagnosis = self.ranks[who.rank].classifier.verdict()
        err = next((e for e in self.errors if e.local_rank == who.local_rank), None)
        if diagnosis.category == C.NONE and err is not None:
            diagnosis = diagnose_text(err.callstack or err.message)
        if ex is None or ex.exitcode is None:
            return diagnosis
        return classify_exit(diagnosis, ex.exitcode, None)

    def _victim(self, who: _Who) -> bool:
        """A rank that failed only because a peer did, or because the agent stopped it."""
        ex = self.agent.exit_of(who.rank, who.local_rank)
        if ex is not None and ex.exitcode == -signal.SIGTERM:
            return True
        return self._diagnosis(who, ex).category == C.NCCL_DISTRIBUTED

    def _who_local(self, local_rank: int) -> _Who:
        rank = self.local_to_global.get(local_rank)
        if rank is None and self.single_node:
            rank = local_rank
        return _Who(rank, local_rank)

    def _who_global(self, rank: int) -> _Who:
        local = [loc for loc, glob in self.local_to_global.items() if glob == rank]
        return _Who(rank, local[0] if local else (rank if self.single_node else None))

    def _root_line(self, rank: int | None) -> int | None:
        """output.log's line of the failure in this rank's own output, if any."""
        state = self.ranks.get(rank) if rank is not None else None
        if state is None:
            return None
        verdict = state.classifier.verdict()
        if verdict.category == C.NONE:
            return None
        return state.lines.lookup(verdict.line) or 1 << 62

    def check_hang(self, now: float, sample: Callable[[int], ProcSample]) -> RankHang | None:
        """A hung rank: one silent past its limit while its own process is idle (or past the
        hard limit while busy). The culprit named is a stopped rank when there is one (its
        peers only wait for it), else the one silent longest. A rank whose process is gone
        is torchrun's business (it notices within its monitor interval), not this check's."""
        looks = [look for rank in self.ranks if (look := self._look(rank, now, sample))]
        hung = [look for look in looks if look.verdict is not None]
        if not hung:
            return None
        stopped = [look for look in looks if look.state == "T"]
        culprit = min(stopped or hung, key=lambda look: (look.last_seen, look.rank))
        verdict = culprit.verdict or HangVerdict(
            now - culprit.last_seen, min(h.verdict.limit for h in hung if h.verdict), 0.0, False
        )
        silent = sorted({look.rank for look in (*hung, *stopped)} - {culprit.rank})
        return RankHang(culprit.rank, culprit.pid, verdict, culprit.state,
                        (culprit.rank, *silent))  # fmt: skip

    def _look(self, rank: int, now: float, sample: Callable[[int], ProcSample]) -> _Look | None:
        state = self.ranks[rank]
        if state.detector is None or state.pid is None:
            return None
        seen = sample(state.pid)
        if state.start_time is None:
            state.start_time = seen.start_time
        if seen.cpu is None or seen.state in GONE_STATES or seen.start_time != state.start_time:
            return None
        verdict = state.detector.check(now, seen.cpu)
        return _Look(rank, state.pid, seen.state, state.last_seen, verdict)


def _strip_prefixes(raw: bytes) -> bytes:
    """Drop torch's own `[rankN]: ` (one space: a frame keeps its indentation)."""
    more = _MORE_PREFIXES.match(raw)
    return raw[more.end() :] if more else raw


def _why(diagnosis: Diagnosis, ex: WorkerExit | None) -> str:
    """The failing line (the rank's own, else torchrun's report) and how the process ended."""
    texts = dict(diagnosis.evidence)
    text = texts.get(diagnosis.line, "").strip() if diagnosis.line else ""
    if not text and ex is not None and not ex.text.startswith("Signal "):
        text = ex.text  # torchrun's "Signal 9 (SIGKILL) received by PID n" says no more
    if not text and diagnosis.evidence and diagnosis.category != C.UNKNOWN:
        text = diagnosis.evidence[-1][1]
    how = ex.how_it_ended() if ex is not None else ""
    if text and how:
        return f"{text} ({how})"
    return text or how or "no error message"


def sample_process(pid: int) -> ProcSample:
    """CPU seconds, state and start time of `pid` from /proc; cpu None when it is gone."""
    fields = stat_fields(pid)
    if fields is None:
        return ProcSample(None)
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime
    return ProcSample(cpu, fields[0].decode("ascii", "replace"), int(fields[19]))


def tracker_for(spec: JobSpec, hang: HangConfig) -> RankTracker | None:
    """A tracker for a torchrun job (one node's ranks); None for other kinds."""
    if spec.kind != "torchrun":
        return None
    return RankTracker(hang, single_node=spec.torchrun.nnodes in ("1", "1:1"))


def with_rank(
    failure: RankFailure | None, category: str, lines: tuple[str, ...], line: int | None
) -> tuple[str, tuple[str, ...], int | None]:
    """An attempt's (category, evidence, line) with the rank that failed first in front.

    Its own category wins when it names one; else the log's stays (often a peer's
    complaint, nccl_distributed: the whole group restarts, as it should)."""
    if failure is None:
        return category, lines, line
    if failure.category not in (C.UNKNOWN, C.NONE) and not failure.victim:
        category = failure.category
    return category, (failure.describe(), *lines), failure.line or line
