"""What killed the job: one classifier of its output, with a live door and an offline door.

Live: rsupd feeds `LiveClassifier.feed()` the bytes appended to output.log; each call
returns at once the fatal lines that chunk completed, and `verdict()` names the root
cause so far. Offline: `diagnose_file()` / `diagnose_text()` run the same classifier.

Lines: numbers count "\\n" only, as `nl` and editors do. A "\\r" (a progress bar redraw)
splits a line into segments matched one by one under the line's number; a segment is
complete at its "\\r" or "\\n". Of a segment over 8 KiB only the first and last 4 KiB are
kept. Bytes are decoded as UTF-8 with replacement, so binary garbage just matches nothing.

Root cause: a line is a failure when a `fatal: true` signature matches it and no
`fatal: false` one (a warning) does. Indented traceback frames are never matched; the
final exception line of a traceback chain decides when a signature knows it (earlier
exception lines of the chain are dropped), and one no signature knows is `unknown`.
The highest priority wins, the earliest a tie: a cause outranks its consequences.

Progress: a config error counts as `config_error` only before the first progress (an
Ultralytics epoch line, "Epoch N/M", or the caller's `progress_seen` / `note_progress()`),
after it as `unknown`. A `survivable` signature's line (an OOM caught by AutoBatch, a
logged ImportError) or an unknown exception that progress follows was lived through, and
is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from rsup.supervisor.recognize.diagnosis import Diagnosis as Diagnosis
from rsup.supervisor.recognize.diagnosis import Finding as Finding
from rsup.supervisor.recognize.exitcodes import classify_exit as classify_exit
from rsup.supervisor.recognize.signatures import (
    CATEGORY_PRIORITY,
    Catalogue,
    Signature,
    default_catalogue,
    trigger_words,
)
from rsup.supervisor.recognize.tracebacks import (
    CHAIN_MARKERS,
    EXCEPTION,
    FRAME,
    IDLE,
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

# Ultralytics epoch lines ("  3/100  2.61G  1.234 ...") and plain "Epoch 3/100" lines.
_PROGRESS = rb" {0,40}(?:\d+/\d+ +\d+(?:\.\d+)?G +\d|[Ee]poch[ :]+\[?\d+ ?/ ?\d+)"
_PROGRESS_SEGMENT = re.compile(_PROGRESS)
_PROGRESS_REGION = re.compile(rb"(?:^|(?<=\r))" + _PROGRESS, re.M)

_RANK_PREFIX = re.compile(rb"(?:\[(?:rank|default)\d+\]: ?)+")  # torchrun --tee, then torch's own
_UNKNOWN_MEANING = "The job raised a Python exception that no signature recognises."
_UNKNOWN_ACTION = "Restart with backoff until max_attempts."


@dataclass
class _Hit:
    finding: Finding
    signature: Signature | None
    priority: int
    chain: int | None  # traceback chain of an exception line, else None
    survivable: bool  # survived when progress follows
    active: bool = True


class LiveClassifier:
    """Classifies a job's output fed in chunks of any size, as the file grows."""

    def __init__(self, catalogue: Catalogue | None = None, *, progress_seen: bool = False):
        cat = catalogue or default_catalogue()
        self._fatal = sorted((s for s in cat.signatures if s.fatal), key=lambda s: -s.priority)
        self._benign = [s for s in cat.signatures if not s.fatal]
        self._words, self._words_ci, self._every_line = trigger_words(
            self._fatal, cat.anchors, (TB_HEADER, *CHAIN_MARKERS)
        )
        self._groups = _groups(self._fatal, self._words, self._words_ci)
        self._keywordless = {i for i, s in enumerate(self._fatal) if not s.keywords}
        self._tb = Tracebacks()
        self._hits: list[_Hit] = []
        self._lines = 0  # "\n" seen so far
        self._pending = b""  # the unterminated segment, when short
        self._head: bytes | None = None  # the unterminated segment, when cut: head and tail
        self._tail = b""
        self._progress_seen = progress_seen
        self._survivable_open = False
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
        """End of the log: classify a last line that has no newline."""
        out: list[Finding] = []
        last = self._head + CUT_MARK + self._tail if self._head is not None else self._pending
        if last and not self._closed:
            self._ingest(last + b"\n", out)
            self._lines -= 1  # the newline was ours, not the log's
        self._pending, self._head, self._closed = b"", None, True
        return out

    def note_progress(self) -> None:
        """The job made progress (a heartbeat): survivable failures so far were lived through,
        and config errors fed later are not config errors."""
        self._progress_seen = True
        if self._survivable_open:
            for hit in self._hits:
                if hit.survivable:
                    hit.active = False
            self._survivable_open = False

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

    def _skip(self, region: bytes, start: int, end: int) -> None:
        if start < end:
            if self._want_progress and _PROGRESS_REGION.search(region, start, end):
                self.note_progress()
            self._lines += region.count(b"\n", start, end)

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

    @property
    def _want_progress(self) -> bool:
        return not self._progress_seen or self._survivable_open

    def _segment(self, segment: bytes, out: list[Finding]) -> None:
        if len(segment) > HEAD + TAIL:
            segment = segment[:HEAD] + CUT_MARK + segment[-TAIL:]
        prefix = _RANK_PREFIX.match(segment) if segment[:1] == b"[" else None
        body = segment[prefix.end() :] if prefix else segment
        role = self._tb.step(body)
        if self._want_progress and _PROGRESS_SEGMENT.match(body):
            self.note_progress()
        if role == FRAME:
            return
        signature = self._match(body)
        chain = self._tb.chain if role == EXCEPTION else None
        if signature is not None:
            self._add(signature, segment, chain, out)
        elif chain is not None:
            self._add_unknown_exception(body, segment, chain)

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

    def _add(self, sig: Signature, segment: bytes, chain: int | None, out: list[Finding]) -> None:
        category, priority = sig.category, sig.priority
        if category == C.CONFIG_ERROR and self._progress_seen:
            category, priority = C.UNKNOWN, CATEGORY_PRIORITY[C.UNKNOWN]
        finding = Finding(sig.id, category, self._lines + 1, _text(segment))
        if chain is not None:
            self._supersede(chain)
        self._store(_Hit(finding, sig, priority, chain, sig.survivable))
        out.append(finding)

    def _add_unknown_exception(self, body: bytes, segment: bytes, chain: int) -> None:
        text = body.decode("utf-8", "replace")
        if not is_failure_exception(text):
            return
        finding = Finding("", C.UNKNOWN, self._lines + 1, _text(segment))
        self._store(_Hit(finding, None, CATEGORY_PRIORITY[C.UNKNOWN], chain, survivable=True))

    def _supersede(self, chain: int) -> None:
        for hit in self._hits:
            if hit.chain == chain:
                hit.active = False

    def _store(self, hit: _Hit) -> None:
        if len(self._hits) >= HITS_MAX:
            self._hits = [h for h in self._hits if h.active]
            top = max((h.priority for h in self._hits), default=-1)
            if len(self._hits) >= HITS_MAX and hit.priority <= top:
                return  # an earlier failure at least as likely a cause is kept
        self._survivable_open = self._survivable_open or hit.survivable
        self._hits.append(hit)


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
    """For each trigger word: a gate matching any keyword that holds the word, and for each
    such keyword the fatal signatures (by index) it belongs to. Most lines that hold a
    trigger word open no gate, and cost one search instead of a test per signature."""
    groups: list[_Group] = []
    for pool, is_folded in ((words, False), (folded, True)):
        for word in pool:
            owners: dict[bytes, list[int]] = {}
            for i, sig in enumerate(fatal):
                for keyword in sig.keywords if sig.ignore_case == is_folded else ():
                    if word in keyword:
                        owners.setdefault(keyword, []).append(i)
            if owners:
                ordered = sorted(owners, key=len, reverse=True)
                gate = re.compile(b"|".join(re.escape(k) for k in ordered))
                keywords = tuple((k, tuple(owners[k])) for k in ordered)
                groups.append((word, gate, is_folded, keywords))
    return groups


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
