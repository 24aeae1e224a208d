"""The bulk pre-scan: trigger words and progress looked for in whole regions, not line by line.

Outside a traceback, lines holding none of the trigger words cannot be fatal and are
skipped in bulk. While the job has not trained yet, or a survivable failure waits for an
advance, the skipped text is scanned for progress; otherwise only for the last progress
segment and the last epoch before the end of each piece (a backward search).
"""

from __future__ import annotations

import functools
import re

from rsup.supervisor.recognize import advance
from rsup.supervisor.recognize.ledger import WINDOW, FailureLedger
from rsup.supervisor.recognize.segments import cut

# Literals one of which every progress segment holds (advance.parse needs them), and
# one of which every segment showing an epoch holds.
BACK_WORDS: tuple[bytes, ...] = (
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
EPOCH_WORDS: tuple[bytes, ...] = (b"poch", b"POCH", b"/")


def last_of(region: bytes, start: int, hi: int, end: int, words: tuple[bytes, ...]) -> int:
    """The last offset in [start, hi) where one of `words` starts, or -1; looked for in
    growing pieces from `hi` back, and not past WINDOW lines before `end`."""
    size = 2048
    while True:
        lo = max(start, hi - size)
        at = max(region.rfind(w, lo, hi) for w in words)
        if at >= 0 or lo == start or region.count(b"\n", lo, end) > WINDOW:
            return at
        size *= 4


def segment_bounds(region: bytes, start: int, end: int, at: int) -> tuple[int, int]:
    """The segment (between "\\n" / "\\r" terminators) of `region[start:end]` holding `at`."""
    seg_start = max(start, region.rfind(b"\n", start, at) + 1, region.rfind(b"\r", start, at) + 1)
    ends = [i for i in (region.find(b"\n", at, end), region.find(b"\r", at, end)) if i >= 0]
    return seg_start, min(ends) if ends else end


# Printable bytes from rare to common, as counted in the real logs of tests/corpus/: a
# word whose rarest byte is not in a region cannot be there, and one memchr pass (`in`)
# costs a fraction of a find of the word. Other bytes (space, control) count as common;
# non-ASCII ones as about as common as "P".
_RARE_FIRST = (
    b"Q&Z$!J~?Y};{X@K`%#qV+Hj|WB<zM>*GUD^\\'OSPRLAITENF[x]wC\")(vk=987654ybf3,g-h2_mu1:.pd/0"
    b"clsrnoiate"
)
_RARITY = {byte: rank for rank, byte in enumerate(_RARE_FIRST)}
_NON_ASCII = _RARITY[ord("P")]


@functools.cache  # the trigger words are few and fixed: ranked once, not per chunk
def rarest_byte(word: bytes) -> bytes:
    """The byte of `word` least likely to be in a region of training output."""
    return bytes([min(word, key=_rank)])


def _rank(byte: int) -> int:
    return _RARITY.get(byte, _NON_ASCII if byte >= 0x80 else len(_RARE_FIRST))


# A short word (common bytes, little to skip by) is found faster by a pattern that starts
# at its rarest byte and looks back for the bytes before it: the regex engine runs to each
# occurrence of that one byte, where bytes.find stops at every byte the word holds. A long
# word is faster with bytes.find, which skips ahead by its length; so is any word in a small
# region (the pattern's set-up outweighs the scan), or in one where its rarest byte is
# common after all (more than one byte in DENSE at the region's start: each occurrence costs
# the pattern a try).
SHORT_WORD = 12
SMALL_REGION = 4096
DENSE = 64


def _after_rarest(word: bytes) -> tuple[int, bytes]:
    """(k, regex source) for `word` read from its rarest byte, at offset k: a look back for
    the bytes before it, then the bytes after it (the byte itself is left to the caller)."""
    k = word.index(rarest_byte(word))
    behind = b"(?<=" + re.escape(word[: k + 1]) + b")" if k else b""
    return k, behind + re.escape(word[k + 1 :])


@functools.cache
def rare_first(word: bytes) -> tuple[int, re.Pattern[bytes]] | None:
    """For a short word, (k, pattern): the pattern matches at offset k of each occurrence
    of the word (its rarest byte); None for a long word."""
    if len(word) >= SHORT_WORD:
        return None
    k, rest = _after_rarest(word)
    return k, re.compile(re.escape(rarest_byte(word)) + rest)


@functools.cache
def shared_rare(words: tuple[bytes, ...]) -> re.Pattern[bytes]:
    """One pattern for short words that share their rarest byte: it matches (at that byte)
    wherever any of them occurs, so one pass tells whether any is in a region."""
    branches = b"|".join(_after_rarest(word)[1] for word in words)
    return re.compile(re.escape(rarest_byte(words[0])) + b"(?:" + branches + b")")


def find_word(region: bytes, word: bytes, pos: int, plain: bool = False) -> int:
    """region.find(word, pos) (pos >= 0), by rare_first's pattern where the word is short,
    unless `plain`."""
    fast = None if plain else rare_first(word)
    if fast is None:
        return region.find(word, pos)
    k, pattern = fast
    found = pattern.search(region, pos + k)
    return found.start() - k if found else -1


@functools.cache
def _plan(
    words: tuple[bytes, ...], folded: tuple[bytes, ...]
) -> tuple[tuple[bytes, bool, tuple[bytes, ...], tuple[bytes, ...], re.Pattern[bytes] | None], ...]:
    """The trigger words by rarest byte (and case folding), worked out once: each group's
    short words, its long ones, and the one pattern for its short words when there are two
    or more (shared_rare)."""
    groups: dict[tuple[bytes, bool], list[bytes]] = {}
    for word, is_folded in [(w, False) for w in words] + [(w, True) for w in folded]:
        groups.setdefault((rarest_byte(word), is_folded), []).append(word)
    plan = []
    for (byte, is_folded), group in groups.items():
        short = tuple(w for w in group if rare_first(w) is not None)
        long = tuple(w for w in group if w not in short)
        plan.append((byte, is_folded, short, long, shared_rare(short) if len(short) > 1 else None))
    return tuple(plan)


class Finder:
    """Next offset of any trigger word in a region; each word is searched once per hit,
    and not at all when its rarest byte is missing from the region, nor when it is a short
    word that shares its rarest byte with others and one pass for all of them found none.
    Short words are searched by rare_first's pattern, except in a small region or where
    their rarest byte is dense (see SHORT_WORD)."""

    def __init__(self, region: bytes, words: tuple[bytes, ...], folded: tuple[bytes, ...]):
        self._region = region
        self._lowered = region.lower() if folded else region
        self._next: dict[tuple[bytes, bool], int] = {}
        self._plain: set[tuple[bytes, bool]] = set()  # short words searched with bytes.find
        small = len(region) < SMALL_REGION
        for byte, is_folded, short, long, shared in _plan(words, folded):
            haystack = self._lowered if is_folded else region
            if byte not in haystack:
                continue
            for word in long:
                self._next[(word, is_folded)] = -1
            if not short:
                continue
            if small or haystack.count(byte, 0, SMALL_REGION) * DENSE > SMALL_REGION:
                self._plain.update((w, is_folded) for w in short)
            elif shared is not None and shared.search(haystack) is None:
                continue  # none of the short words is in the region
            for word in short:
                self._next[(word, is_folded)] = -1

    def next(self, pos: int) -> int:
        """The first offset >= pos where a trigger word starts, or -1."""
        best = -1
        for key, at in list(self._next.items()):
            if at < pos:
                haystack = self._lowered if key[1] else self._region
                at = find_word(haystack, key[0], pos, key in self._plain)
                if at < 0:
                    del self._next[key]  # no more of this word in the region
                    continue
                self._next[key] = at
            best = at if best < 0 else min(best, at)
        return best


class SkippedText(FailureLedger):
    """The progress in text skipped in bulk: every segment while something waits for it,
    else only the last progress segment and the last epoch (a backward search)."""

    def __init__(self, *, progress_seen: bool = False):
        super().__init__(progress_seen=progress_seen)
        self._lines = 0  # "\n" seen so far

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
            seg_start, seg_end = segment_bounds(region, start, end, at)
            line += region.count(b"\n", counted, seg_start)
            counted = seg_start
            self._progress(cut(region[seg_start:seg_end]), line)
            pos = seg_end + 1
            if not self._want_progress:  # trained, nothing waits: the cheap way for the rest
                if pos < end:
                    base = self._lines + region.count(b"\n", start, pos)
                    self._scan_back(region, pos, end, base, region.count(b"\n", pos, end))
                return

    def _scan_back(self, region: bytes, start: int, end: int, base: int, total: int) -> None:
        """The last progress segment and the last epoch among the WINDOW lines before `end`
        (`base` lines come before `start`, `total` are in the piece)."""
        want_last, words = True, BACK_WORDS
        hi = end
        while hi > start:
            at = last_of(region, start, hi, end, words)
            if at < 0:
                return
            seg_start, seg_end = segment_bounds(region, start, end, at)
            after = region.count(b"\n", seg_start, end)
            if after > WINDOW:
                return
            segment = cut(region[seg_start:seg_end])
            mark = advance.parse(segment)
            if mark is not None:
                line = base + 1 + total - after
                if want_last:
                    self._last, want_last, words = (line, mark, segment), False, EPOCH_WORDS
                if mark.epoch is not None:
                    self._last_epoch = (line, mark, segment)
                    return
            hi = seg_start
