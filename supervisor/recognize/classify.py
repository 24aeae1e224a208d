"""What killed the job: one classifier of its output, with a live door and an offline door.

Live: rsupd feeds `LiveClassifier.feed()` the bytes appended to output.log; each call
returns at once the fatal lines that chunk completed, and `verdict()` names the root
cause so far. Offline: `diagnose_file()` / `diagnose_text()` run the same classifier.

Lines: numbers count "\\n" only, as `nl` and editors do. A "\\r" (a progress bar redraw)
splits a line into segments matched one by one under the line's number; a segment is
complete at its "\\r" or "\\n". Of a segment over 8 KiB only the first and last 4 KiB are
kept. Bytes are decoded as UTF-8 with replacement, so binary garbage just matches nothing.

Root cause: a line is a failure when a `fatal: true` signature matches it and no
`fatal: false` one (a warning) does. The highest priority wins, the earliest a tie: a
cause outranks its consequences (a GPU fault outranks the abort it causes, any real cause
outranks the SIGTERM a scheduler sends after it, `killed`).

Tracebacks (see tracebacks.py for the layouts read: Python's, notebooks', Rich's):

- Indented frames are never matched by line signatures. The exception line of a
  traceback decides when a signature knows it (signatures of `scope: exception` are
  tried on exception lines only); the final exception line of a chain decides over the
  earlier ones of that chain.
- A traceback that ends the output is fatal: its exception line decides, and an exception
  no signature knows is `unknown` (an unknown final exception of a chain leaves the known
  one of the chain standing).
- A cut-off traceback (the excerpt starts inside its frames, or ends before its exception
  line) still counts: by its exception line when present; else by the exception class a
  notebook header named; else by the deepest frame a `scope: frame` signature knows
  (`rebuild_storage_fd` is a DataLoader worker's file-descriptor failure, a frame in the
  `yaml` package a YAML error); else it is `unknown`. The frames also speak when the
  exception line is unknown or an interrupt (`KeyboardInterrupt` while waiting on the
  DataLoader's queue is a hang).

Progress (advance.py reads the counters): a fatal line of a `survivable` signature (an OOM
AutoBatch caught, a logged ImportError) and an unknown exception are excused only by
progress that ADVANCES past what was seen before the failure: a later epoch, a larger
count on a row (a tqdm or Keras bar, `step N`, `[n/total]`) already seen, a checkpoint
saved, or the caller's `note_progress()` (a heartbeat). A redraw of the same row (the
same counter, a bar tqdm re-prints after the traceback, "\\r" redraws) is not progress, nor
is a bar glued onto the error line itself (it is read before the error, so it is part of
what was seen). "Seen before" is the last progress segment and the last epoch among the
WINDOW lines before the failure (before its traceback's first line, for an exception).
A row first seen after the failure is noted and must then advance. Other fatal lines are
never excused.

A hang is silence, not a line; one sign of it is read from the counters: a traceback (an
interrupt) or a kill right after a bar reporting over 1000 s per iteration is `hang`.

Config errors count as `config_error` only until the job has trained (a step counted in
an epoch or by a `step` word, an epoch past the first, a checkpoint, or the caller's
`progress_seen` / `note_progress()`); after that they are `unknown`. Loading bars alone
(checkpoint shards, tokenising) are not training.

Speed: outside a traceback, lines holding none of the trigger words cannot be fatal and
are skipped in bulk. While the job has not trained yet, or a survivable failure waits for
an advance, the skipped text is scanned for progress; otherwise only for the last
progress segment and the last epoch before the end of each piece (a backward search).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rsup.supervisor.recognize import advance
from rsup.supervisor.recognize.advance import Mark, Marks
from rsup.supervisor.recognize.diagnosis import Diagnosis as Diagnosis
from rsup.supervisor.recognize.diagnosis import Finding as Finding
from rsup.supervisor.recognize.exitcodes import classify_exit as classify_exit
from rsup.supervisor.recognize.signatures import (
    CATEGORY_PRIORITY,
    EXCEPTION_SCOPE,
    FRAME_SCOPE,
    LINE_SCOPE,
    Catalogue,
    Signature,
    default_catalogue,
    trigger_words,
)
from rsup.supervisor.recognize.tracebacks import (
    CHAIN_MARKERS,
    EXCEPTION,
    FRAME,
    FRAME_WORDS,
    IDLE,
    PLAIN,
    TB_HEADER,
    Tracebacks,
    is_failure_exception,
)
from rsup.workers import constants as C

HEAD = 4096
TAIL = 4096
CUT_MARK = b" [...] "
TEXT_MAX = 500  # characters of a line kept in a finding
EVIDENCE_MAX = 10
HITS_MAX = 1000
WINDOW = 200  # lines before a failure in which the progress it must advance past is looked for

_RANK_PREFIX = re.compile(rb"(?:\[(?:rank|default)\d+\]: ?)+")  # torchrun --tee, then torch's own
_UNKNOWN_MEANING = "The job raised a Python exception that no signature recognises."
_UNKNOWN_ACTION = "Restart with backoff until max_attempts."
# A hang seen in the counters, not in a line (advance.STALL_S).
_STALLED = Signature(
    id="stalled-progress",
    category=C.HANG,
    pattern=r"s/it",
    regex=re.compile(r"s/it"),
    meaning=(
        f"The progress bar before the job was stopped reported over {advance.STALL_S:.0f} "
        "seconds per iteration: the job had all but stopped."
    ),
    action="Restart from the last checkpoint.",
    fatal=True,
    priority=CATEGORY_PRIORITY[C.HANG],
    remedy="Look for a stuck DataLoader worker, a hung collective, or a full disk.",
    keywords=(),
    ignore_case=False,
    source="built in",
    survivable=True,
)
# Literals one of which every progress segment holds (advance.parse needs them), and
# one of which every segment showing an epoch holds.
_BACK_WORDS: tuple[bytes, ...] = (
    b"/",
    b"it [",
    b"poch",
    b"POCH",
    b"tep",
    b"TEP",
    b"iter",
    b"Iter",
    b"ITER",
)
_EPOCH_WORDS: tuple[bytes, ...] = (b"poch", b"POCH", b"/")


@dataclass
class _Hit:
    finding: Finding
    signature: Signature | None
    priority: int
    chain: int | None  # traceback chain of an exception line, else None
    survivable: bool  # survived when progress advances after it
    active: bool = True
    marks: Marks | None = None  # what progress must advance past to excuse it


@dataclass
class _Trace:
    """What one traceback has shown so far, to decide by when its exception line is missing."""

    chain: int
    line: int
    text: str
    marks: tuple[Mark | None, Mark | None]
    notebook_class: str | None
    last_frame: tuple[int, str] | None = None
    hint: tuple[Signature, int, str] | None = None  # the deepest frame a signature knows


class LiveClassifier:
    """Classifies a job's output fed in chunks of any size, as the file grows."""

    def __init__(self, catalogue: Catalogue | None = None, *, progress_seen: bool = False):
        cat = catalogue or default_catalogue()
        fatal = sorted((s for s in cat.signatures if s.fatal), key=lambda s: -s.priority)
        self._fatal = [s for s in fatal if s.scope == LINE_SCOPE]
        self._exception_sigs = [s for s in fatal if s.scope == EXCEPTION_SCOPE]
        self._frame_sigs = [s for s in fatal if s.scope == FRAME_SCOPE]
        self._benign = [s for s in cat.signatures if not s.fatal]
        self._words, self._words_ci, self._every_line = trigger_words(
            self._fatal, cat.anchors, (TB_HEADER, *CHAIN_MARKERS, *FRAME_WORDS)
        )
        self._groups = _groups(self._fatal, self._words, self._words_ci)
        self._keywordless = {i for i, s in enumerate(self._fatal) if not s.keywords}
        self._tb = Tracebacks()
        self._trace: _Trace | None = None
        self._hits: list[_Hit] = []
        self._open: list[_Hit] = []  # survivable hits waiting for an advance
        self._lines = 0  # "\n" seen so far
        self._pending = b""  # the unterminated segment, when short
        self._head: bytes | None = None  # the unterminated segment, when cut: head and tail
        self._tail = b""
        self._trained = progress_seen
        self._last: tuple[int, Mark, bytes] | None = None  # the last progress segment
        self._last_epoch: tuple[int, Mark, bytes] | None = None  # the last showing an epoch
        self._stall_told = 0  # line of the stalled bar last reported
        self._closed = False

    @property
    def lines(self) -> int:
        """Complete lines consumed so far."""
        return self._lines

    def feed(self, chunk: bytes) -> list[Finding]:
        """Consume the next bytes of the log; return the fatal lines they complete."""
        out: list[Finding] = []
        if self._closed or not chunk:
            return out
        if self._head is not None:
            chunk = self._continue_cut(chunk, out)
        data = self._pending + chunk if self._pending else chunk
        end = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if end:
            self._ingest(data[:end] if end < len(data) else data, out)
        self._hold(data[end:])
        return out

    def close(self) -> list[Finding]:
        """End of the log: classify a last line that has no newline, and a traceback left
        without its exception line."""
        out: list[Finding] = []
        if self._closed:
            return out
        last = self._head + CUT_MARK + self._tail if self._head is not None else self._pending
        if last:
            self._ingest(last + b"\n", out)
            self._lines -= 1  # the newline was ours, not the log's
        if self._tb.close():
            self._end_trace(out)
        self._pending, self._head, self._closed = b"", None, True
        return out

    def note_progress(self) -> None:
        """The job made progress (a heartbeat): survivable failures so far were lived through,
        and config errors fed later are not config errors."""
        self._trained = True
        for hit in self._open:
            hit.active = False
        self._open.clear()

    def verdict(self) -> Diagnosis:
        """The root cause among the failures seen so far; category "none" when there is none."""
        active = [h for h in self._hits if h.active]
        if not active:
            return Diagnosis(category=C.NONE)
        root = max(range(len(active)), key=lambda i: (active[i].priority, -i))
        return _diagnosis(active[root], self._evidence(active[root]))

    def _evidence(self, root: _Hit) -> list[tuple[int, str]]:
        hits = [
            h for h in self._hits if h.active or (h.chain is not None and h.chain == root.chain)
        ]
        if len(hits) > EVIDENCE_MAX:
            hits = sorted(hits, key=lambda h: h is not root)[:EVIDENCE_MAX]
        ordered = sorted(hits, key=lambda h: h.finding.line)
        return [(h.finding.line, h.finding.text) for h in ordered]

    def _continue_cut(self, chunk: bytes, out: list[Finding]) -> bytes:
        """Extend an overlong segment; once its terminator comes, classify it."""
        n, r = chunk.find(b"\n"), chunk.find(b"\r")
        end = min(i for i in (n, r, len(chunk)) if i >= 0)
        self._tail = (self._tail + chunk[:end])[-TAIL:]
        if end == len(chunk):
            return b""
        assert self._head is not None
        self._ingest(self._head + CUT_MARK + self._tail + chunk[end : end + 1], out)
        self._head, self._tail = None, b""
        return chunk[end + 1 :]

    def _hold(self, rest: bytes) -> None:
        if len(rest) > HEAD + TAIL:
            self._head, self._tail, self._pending = rest[:HEAD], rest[-TAIL:], b""
        else:
            self._pending = rest

    def _ingest(self, region: bytes, out: list[Finding]) -> None:
        """Classify complete segments; `region` ends with a terminator.

        Outside a traceback, lines holding none of the trigger words cannot be fatal, so
        they are skipped in bulk (only newlines and progress are counted there).
        """
        finder = _Finder(region, self._words, self._words_ci)
        pos, size = 0, len(region)
        while pos < size:
            if self._tb.state == IDLE and not self._every_line:
                hit = finder.next(pos)
                start = size if hit < 0 else max(pos, region.rfind(b"\n", pos, hit) + 1)
                self._skip(region, pos, start)
                pos = start
                if pos >= size:
                    return
            pos = self._line(region, pos, out)

    # --- progress ------------------------------------------------------------------------

    @property
    def _want_progress(self) -> bool:
        return not self._trained or bool(self._open)

    def _skip(self, region: bytes, start: int, end: int) -> None:
        if start < end:
            lines = region.count(b"\n", start, end)
            if self._want_progress:
                self._scan_forward(region, start, end)
            else:
                self._scan_back(region, start, end, self._lines, lines)
            self._lines += lines

    def _scan_forward(self, region: bytes, start: int, end: int) -> None:
        """Every progress segment and checkpoint line of skipped text, in order."""
        line, counted, pos = self._lines + 1, start, start
        for found in advance.CANDIDATE.finditer(region, start, end):
            at = found.start()
            if at < pos:
                continue
            seg_start, seg_end = _segment_bounds(region, start, end, at)
            line += region.count(b"\n", counted, seg_start)
            counted = seg_start
            self._progress(_cut(region[seg_start:seg_end]), line)
            pos = seg_end + 1
            if not self._want_progress:  # trained, nothing waits: the cheap way for the rest
                if pos < end:
                    base = self._lines + region.count(b"\n", start, pos)
                    self._scan_back(region, pos, end, base, region.count(b"\n", pos, end))
                return

    def _scan_back(self, region: bytes, start: int, end: int, base: int, total: int) -> None:
        """The last progress segment and the last epoch among the WINDOW lines before `end`
        (`base` lines come before `start`, `total` are in the piece)."""
        want_last, words = True, _BACK_WORDS
        hi = end
        while hi > start:
            at = _last_of(region, start, hi, end, words)
            if at < 0:
                return
            seg_start, seg_end = _segment_bounds(region, start, end, at)
            after = region.count(b"\n", seg_start, end)
            if after > WINDOW:
                return
            segment = _cut(region[seg_start:seg_end])
            mark = advance.parse(segment)
            if mark is not None:
                line = base + 1 + total - after
                if want_last:
                    self._last, want_last, words = (line, mark, segment), False, _EPOCH_WORDS
                if mark.epoch is not None:
                    self._last_epoch = (line, mark, segment)
                    return
            hi = seg_start

    def _progress(self, segment: bytes, line: int) -> None:
        """A segment outside tracebacks that may show progress (it holds a candidate)."""
        mark = advance.parse(segment)
        if mark is None:
            if self._want_progress and advance.CHECKPOINT.search(segment):
                self.note_progress()
            return
        if not self._trained:
            prior = self._last_epoch[1].epoch if self._last_epoch else None
            grew = prior is not None and mark.epoch is not None and mark.epoch > prior
            self._trained = mark.trains or grew
        if self._open:
            for hit in self._open:
                assert hit.marks is not None
                if hit.marks.advanced_by(mark):
                    hit.active = False
                else:
                    hit.marks.absorb(mark)
            self._open = [h for h in self._open if h.active]
        self._last = (line, mark, segment)
        if mark.epoch is not None:
            self._last_epoch = (line, mark, segment)

    def _stalled_before(self, line: int, out: list[Finding]) -> None:
        """A traceback or a kill right after a bar that had all but stopped: a hang."""
        last = self._last
        if last and last[1].stalled and line - last[0] <= WINDOW and last[0] != self._stall_told:
            self._stall_told = last[0]
            self._add(_STALLED, last[0], _text(last[2]), None, out)

    def _seen_before(self, line: int) -> tuple[Mark | None, Mark | None]:
        """The last progress segment and the last epoch within WINDOW lines before `line`."""
        last = self._last[1] if self._last and line - self._last[0] <= WINDOW else None
        epoch = (
            self._last_epoch[1]
            if self._last_epoch and line - self._last_epoch[0] <= WINDOW
            else None
        )
        return last, epoch

    # --- lines ---------------------------------------------------------------------------

    def _line(self, region: bytes, pos: int, out: list[Finding]) -> int:
        """Classify the segments of the line at `pos`; return where the next line starts."""
        end = region.find(b"\n", pos)
        piece = region[pos:end] if end >= 0 else region[pos:]
        for segment in piece.split(b"\r"):
            if segment:
                self._segment(segment, out)
        if end < 0:
            return len(region)
        self._lines += 1
        return end + 1

    def _segment(self, segment: bytes, out: list[Finding]) -> None:
        segment = _cut(segment)
        prefix = _RANK_PREFIX.match(segment) if segment[:1] == b"[" else None
        body = segment[prefix.end() :] if prefix else segment
        tb = self._tb
        role = tb.step(body)
        line = self._lines + 1
        if tb.cut:
            self._end_trace(out)
        if tb.started:
            self._trace = _Trace(
                tb.chain, line, _text(segment), self._seen_before(line), tb.notebook_class
            )
            self._stalled_before(line, out)
        if role == FRAME:
            if self._trace is not None and TB_HEADER not in body:
                self._frame(body, segment, line)
            return
        if role == PLAIN and advance.CANDIDATE.search(body):
            self._progress(body, line)
        signature = self._match(body)
        if role == EXCEPTION:
            self._exception(body, segment, signature, out)
        elif signature is not None:
            self._add(signature, line, _text(segment), None, out)

    def _frame(self, body: bytes, segment: bytes, line: int) -> None:
        assert self._trace is not None
        if not body.strip():
            return
        self._trace.last_frame = (line, _text(segment))
        text = body.decode("utf-8", "replace")
        for sig in self._frame_sigs:
            if any(k in body for k in sig.keywords) and sig.regex.search(text):
                self._trace.hint = (sig, line, _text(segment))  # deeper frames replace it
                return

    def _exception(
        self, body: bytes, segment: bytes, signature: Signature | None, out: list[Finding]
    ) -> None:
        """The exception line that ends a traceback."""
        trace, self._trace = self._trace, None
        chain = self._tb.chain
        marks = trace.marks if trace else None
        signature = signature or self._match_exception(body)
        line = self._lines + 1
        if signature is not None:
            self._add(signature, line, _text(segment), chain, out, marks)
            if signature.category == C.KILLED and trace is not None:
                self._add_hint(trace, out)  # where the interrupt found the job
        elif trace is not None and trace.hint is not None:
            self._add_hint(trace, out)
        else:
            text = body.decode("utf-8", "replace")
            if is_failure_exception(text):
                finding = Finding("", C.UNKNOWN, line, _text(segment))
                self._store(_Hit(finding, None, CATEGORY_PRIORITY[C.UNKNOWN], chain, True), marks)

    def _end_trace(self, out: list[Finding]) -> None:
        """A traceback ended without its exception line: decide by what it showed."""
        trace, self._trace = self._trace, None
        if trace is None:
            return
        named = trace.notebook_class
        signature = None
        if named:
            encoded = named.encode()
            signature = self._match(encoded) or self._match_exception(encoded)
        if signature is not None:
            self._add(signature, trace.line, trace.text, trace.chain, out, trace.marks)
            if signature.category == C.KILLED:
                self._add_hint(trace, out)
        elif trace.hint is not None:
            self._add_hint(trace, out)
        else:
            line, text = trace.last_frame or (trace.line, trace.text)
            finding = Finding("", C.UNKNOWN, line, text)
            hit = _Hit(finding, None, CATEGORY_PRIORITY[C.UNKNOWN], trace.chain, True)
            self._store(hit, trace.marks)

    def _add_hint(self, trace: _Trace, out: list[Finding]) -> None:
        if trace.hint is not None:
            sig, line, text = trace.hint
            self._add(sig, line, text, None, out, trace.marks)

    def _match(self, body: bytes) -> Signature | None:
        """The highest-priority fatal signature matching, unless a warning matches too."""
        lowered = body.lower() if self._words_ci else body
        picked = set(self._keywordless)
        for word, gate, folded, keywords in self._groups:
            haystack = lowered if folded else body
            if word in haystack and gate.search(haystack):
                for keyword, members in keywords:
                    if keyword in haystack:
                        picked.update(members)
        if not picked:
            return None
        text = body.decode("utf-8", "replace")
        fatal = (self._fatal[i] for i in sorted(picked))  # in priority order
        found = next((s for s in fatal if s.regex.search(text)), None)
        if found is None or any(_matches(s, body, lowered, text) for s in self._benign):
            return None
        return found

    def _match_exception(self, body: bytes) -> Signature | None:
        """The highest-priority `scope: exception` signature matching an exception line."""
        if not self._exception_sigs:
            return None
        text = body.decode("utf-8", "replace")
        return next((s for s in self._exception_sigs if s.regex.search(text)), None)

    def _add(
        self,
        sig: Signature,
        line: int,
        text: str,
        chain: int | None,
        out: list[Finding],
        marks: tuple[Mark | None, Mark | None] | None = None,
    ) -> None:
        category, priority = sig.category, sig.priority
        if category == C.CONFIG_ERROR and self._trained:
            category, priority = C.UNKNOWN, CATEGORY_PRIORITY[C.UNKNOWN]
        if category == C.KILLED:
            self._stalled_before(line, out)
        finding = Finding(sig.id, category, line, text)
        if chain is not None:
            self._supersede(chain)
        self._store(_Hit(finding, sig, priority, chain, sig.survivable), marks)
        out.append(finding)

    def _supersede(self, chain: int) -> None:
        for hit in self._hits:
            if hit.chain == chain:
                hit.active = False

    def _store(self, hit: _Hit, marks: tuple[Mark | None, Mark | None] | None = None) -> None:
        if len(self._hits) >= HITS_MAX:
            self._hits = [h for h in self._hits if h.active]
            self._open = [h for h in self._open if h.active]
            top = max((h.priority for h in self._hits), default=-1)
            if len(self._hits) >= HITS_MAX and hit.priority <= top:
                return  # an earlier failure at least as likely a cause is kept
        if hit.survivable:
            hit.marks = Marks(*(marks or self._seen_before(hit.finding.line)))
            self._open.append(hit)
        self._hits.append(hit)


def _last_of(region: bytes, start: int, hi: int, end: int, words: tuple[bytes, ...]) -> int:
    """The last offset in [start, hi) where one of `words` starts, or -1; looked for in
    growing pieces from `hi` back, and not past WINDOW lines before `end`."""
    size = 2048
    while True:
        lo = max(start, hi - size)
        at = max(region.rfind(w, lo, hi) for w in words)
        if at >= 0 or lo == start or region.count(b"\n", lo, end) > WINDOW:
            return at
        size *= 4


def _segment_bounds(region: bytes, start: int, end: int, at: int) -> tuple[int, int]:
    """The segment (between "\\n" / "\\r" terminators) of `region[start:end]` holding `at`."""
    seg_start = max(start, region.rfind(b"\n", start, at) + 1, region.rfind(b"\r", start, at) + 1)
    ends = [i for i in (region.find(b"\n", at, end), region.find(b"\r", at, end)) if i >= 0]
    return seg_start, min(ends) if ends else end


def _cut(segment: bytes) -> bytes:
    if len(segment) > HEAD + TAIL:
        return segment[:HEAD] + CUT_MARK + segment[-TAIL:]
    return segment


class _Finder:
    """Next offset of any trigger word in a region; each word is searched once per hit."""

    def __init__(self, region: bytes, words: tuple[bytes, ...], folded: tuple[bytes, ...]):
        self._region = region
        self._lowered = region.lower() if folded else region
        self._next = {(w, False): -1 for w in words} | {(w, True): -1 for w in folded}

    def next(self, pos: int) -> int:
        """The first offset >= pos where a trigger word starts, or -1."""
        best = -1
        for key, at in list(self._next.items()):
            if at < pos:
                at = (self._lowered if key[1] else self._region).find(key[0], pos)
                if at < 0:
                    del self._next[key]  # no more of this word in the region
                    continue
                self._next[key] = at
            best = at if best < 0 else min(best, at)
        return best


_Group = tuple[bytes, re.Pattern[bytes], bool, tuple[tuple[bytes, tuple[int, ...]], ...]]


def _groups(
    fatal: list[Signature], words: tuple[bytes, ...], folded: tuple[bytes, ...]
) -> list[_Group]:
    """For each trigger word: a gate matching any keyword of the signatures a trigger
    literal of which holds the word, and for each such keyword the fatal signatures (by
    index) it belongs to. Most lines that hold a trigger word open no gate, and cost one
    search instead of a test per signature."""
    groups: list[_Group] = []
    for pool, is_folded in ((words, False), (folded, True)):
        for word in pool:
            owners: dict[bytes, list[int]] = {}
            for i, sig in enumerate(fatal):
                if sig.ignore_case != is_folded:
                    continue
                if any(word in literal for literal in sig.triggers or sig.keywords):
                    for keyword in sig.keywords:
                        owners.setdefault(keyword, []).append(i)
            if owners:
                ordered = sorted(owners, key=len, reverse=True)
                keywords = tuple((k, tuple(owners[k])) for k in ordered)
                groups.append((word, _trie_regex(ordered), is_folded, keywords))
    return groups


def _trie_regex(words: Iterable[bytes]) -> re.Pattern[bytes]:
    """A regex matching any of `words`, branching on one byte at a time (a trie): at each
    offset only the words that begin with the byte there are tried."""
    trie: dict[int, Any] = {}
    for word in words:
        node = trie
        for byte in word:
            node = node.setdefault(byte, {})
        node[-1] = {}  # a word ends here

    def build(node: dict[int, Any]) -> bytes:
        branches = [re.escape(bytes([b])) + build(node[b]) for b in sorted(node) if b >= 0]
        if not branches:
            return b""
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        return b"(?:" + body + b")?" if -1 in node else body

    return re.compile(build(trie))


def _matches(sig: Signature, body: bytes, lowered: bytes, text: str) -> bool:
    if sig.keywords:
        haystack = lowered if sig.ignore_case else body
        if not any(word in haystack for word in sig.keywords):
            return False
    return sig.regex.search(text) is not None


def _text(segment: bytes) -> str:
    text = segment.decode("utf-8", "replace").rstrip()
    return text if len(text) <= TEXT_MAX else text[: TEXT_MAX - 1] + "…"


def _diagnosis(root: _Hit, evidence: list[tuple[int, str]]) -> Diagnosis:
    sig, found = root.signature, root.finding
    diagnosis = Diagnosis(found.category, None, evidence, found.line, None, _UNKNOWN_MEANING)
    if sig is None:
        return replace(diagnosis, action=_UNKNOWN_ACTION)
    if found.category != sig.category:  # a config error after progress
        meaning = f"{sig.meaning} It came after training had made progress."
        return replace(diagnosis, signature=sig.id, meaning=meaning, action=_UNKNOWN_ACTION)
    return replace(diagnosis, signature=sig.id, meaning=sig.meaning, action=sig.action,
                   remedy=sig.remedy)  # fmt: skip


def diagnose_file(
    path: str | Path, *, catalogue: Catalogue | None = None, progress_seen: bool = False
) -> Diagnosis:
    """Classify a whole log file (raises OSError when it cannot be read)."""
    with open(path, "rb") as log:
        return _diagnose(iter(lambda: log.read(1 << 20), b""), catalogue, progress_seen)


def diagnose_text(
    text: str, *, catalogue: Catalogue | None = None, progress_seen: bool = False
) -> Diagnosis:
    """Classify a whole log given as text."""
    return _diagnose([text.encode("utf-8", "replace")], catalogue, progress_seen)


def _diagnose(chunks: Iterable[bytes], catalogue: Catalogue | None, progress: bool) -> Diagnosis:
    classifier = LiveClassifier(catalogue, progress_seen=progress)
    for chunk in chunks:
        classifier.feed(chunk)
    classifier.close()
    return classifier.verdict()
