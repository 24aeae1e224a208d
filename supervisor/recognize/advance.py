"""How far a job has got, from the counters it prints; what the classifier calls progress.

A progress segment is one line, or one "\\r" redraw of a bar, that shows a counter: an
epoch (`Epoch 3/10`, `epoch: 5`, `[Epoch 10/250]`, an Ultralytics row `  3/100  2.61G ...`)
and/or a step counter (tqdm and Keras bars `34/54 [`, `17671it [`, `[ 120/1251]`, Keras 3's
`46/47 ━━━` and rich's `━━━ 25/32`, `step 100/600`, `Iter 2040/2068`, `Step #4000`, a Hugging
Face Trainer row's `'epoch': 0.53`); every one holds a "/", "it [",
"poch", "POCH", "tep", "TEP", "iter", "Iter" or "ITER". A step counter is told apart from the
counters of other rows by its key: the total it counts to, or its word (`step`, `it`).

`Marks` holds what was seen before a failure. A later segment *advances* past them when it
shows a later epoch, or a larger count on a row already seen; the first sighting of a row
is only noted (a bar re-printed after a traceback is a redraw, not a step). A checkpoint
saved (`saving checkpoint`, `saving model to ...`) is progress without a counter.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from rsup.supervisor.recognize.segments import after_rank_prefix

# Cheap test: every progress segment and checkpoint line holds a match.
CANDIDATE = re.compile(
    rb"\d/[\d?]|\dit \[|[Ee]poch|EPOCH|[Ss]tep|STEP|[Ii]ter|ITER"
    rb"|[Ss]av(?:ing|ed)|SAV(?:ING|ED)|[Ww]rote|[Ww]riting|[Cc]heckpoint saved"
)
_ROW = re.compile(rb"\s*(\d+)/(\d+)\s+\d+(?:\.\d+)?G\s")  # Ultralytics: epoch/epochs, GPU memory
_EPOCH = re.compile(rb"(?:[Ee]poch|EPOCH)\b[\s:#=\[]*(\d+)(?:\s*/\s*(\d+))?")  # Epoch 3/10
_BAR = re.compile(rb"(\d+)/(\d+|\?) ?\Z")  # tqdm, Keras: "34/54 [", read back from the "["
_RATE = re.compile(rb"(\d+(?:\.\d+)?)s/it\b")  # tqdm's seconds per iteration
STALL_S = 1000.0  # seconds per iteration from which a bar shows a job that has all but stopped
_ITS = re.compile(rb"(\d+)it \Z")  # tqdm without a total: "17671it ["
# Bars drawn with box lines, not "[". Keras 3 writes its count first, between colour codes
# ("\x1b[1m46/47\x1b[0m \x1b[32m━━━━\x1b[0m 0s 98ms/step"); rich (Lightning's RichProgressBar)
# writes it after the bar ("Epoch 0/9  ━━━━━━ 25/32 0:00:05"), the epoch before it.
_ANSI = rb"(?:\x1b\[[\d;]*m)*"
_COUNT_AFTER = re.compile(rb"\xe2\x94\x81" + _ANSI + rb" +" + _ANSI + rb"(\d+)/(\d+)\b")
_COUNT_FIRST = re.compile(
    rb"^\s*" + _ANSI + rb"(\d+)/(\d+)" + _ANSI + rb" +" + _ANSI + rb"\xe2\x94\x81"
)
_BRACKET = re.compile(rb"\[\s*(\d+)/(\d+)(?:\]|\s+(?!\d))")  # [ 120/1251]
_WORD = re.compile(
    rb"(?:[Ss]tep|STEP|[Ii]ter(?:ation)?|ITER(?:ATION)?)\b[\s:#=]*(\d[\d,]*)(?:\s*/\s*(\d+))?"
)
_WORDS = (b"step", b"Step", b"STEP", b"iter", b"Iter", b"ITER")
# "Batch 1206/1207": a batch counted against its total (a bare "batch 32" is a size).
_BATCH = re.compile(rb"(?:[Bb]atch|BATCH)\b[\s:#=\[]*(\d[\d,]*)\s*/\s*(\d+)")
_BATCH_WORDS = (b"batch", b"Batch", b"BATCH")
_BEFORE = 24  # bytes before a "[" in which a bar's counter is looked for
# A Hugging Face Trainer log row ("{'loss': 0.69, 'learning_rate': 5e-05, 'epoch': 0.53}"):
# its fractional epoch counts the steps taken (in ten-thousandths of an epoch).
_HF_ROW = re.compile(
    rb"^\s*\{(?=.*'(?:loss|learning_rate|eval_\w+)': ).*'epoch': (\d+(?:\.\d+)?)[,}]"
)
_HF_SCALE = 10_000
CHECKPOINT = re.compile(
    rb"\b(?:[Ss]av(?:ing|ed)|SAV(?:ING|ED)|[Ww]rote|[Ww]riting)\b[^\r\n]{0,40}?"
    rb"\b(?:[Cc]heckpoint|CHECKPOINT|ckpt|[Mm]odel|MODEL|[Ww]eights)\b|\b[Cc]heckpoint saved\b"
)


class Mark(NamedTuple):
    """The counters of one progress segment."""

    epoch: int | None = None
    epochs: int | None = None  # the epoch total, when printed
    key: bytes | None = None  # which row the step counter belongs to
    n: int | None = None
    worded: bool = False  # the step counter is a `step` / `iter` word
    stalled: bool = False  # a bar reporting over STALL_S seconds per iteration

    @property
    def trains(self) -> bool:
        """Whether the segment shows training done: a step taken in an epoch (or counted by
        a step word), or an epoch past the first of a printed total. A bar alone (loading
        shards, tokenising) is not training."""
        if self.n is not None and self.n >= 1 and (self.epoch is not None or self.worded):
            return True
        return self.epochs is not None and self.epoch is not None and self.epoch >= 2


def parse(segment: bytes) -> Mark | None:
    """The counters of a segment, or None when it shows none (read past a launcher's tag:
    "[rank1]:  3/100  2.61G ...", as text skipped in bulk still holds it)."""
    segment = after_rank_prefix(segment)[0]
    if b"'epoch': " in segment:  # a Hugging Face Trainer log row
        row = _HF_ROW.search(segment)
        if row is not None:
            return Mark(key=b"'epoch'", n=round(float(row[1]) * _HF_SCALE), worded=True)
    epoch = epochs = None
    found = _ROW.match(segment) if b"G" in segment else None
    if found is None:
        found = _match_word(segment, (b"poch", b"POCH"), 1, _EPOCH)
    if found:
        epoch = int(found[1])
        epochs = int(found[2]) if found[2] else None
    bracket = segment.find(b"[")
    if bracket > 0:
        mark = _bar(segment, bracket, epoch, epochs)
        if mark is not None:
            return mark
    if b"\xe2\x94\x81" in segment:
        line_bar = _COUNT_AFTER.search(segment) or _COUNT_FIRST.match(segment)
        if line_bar is not None:
            return Mark(epoch, epochs, b"/" + line_bar[2], int(line_bar[1]))
    word = _match_word(segment, _WORDS, 0, _WORD) or _match_word(segment, _BATCH_WORDS, 0, _BATCH)
    if word:
        at = word.start()
        key = segment[at : at + 4].lower() + (b"/" + word[2] if word[2] else b"")
        return Mark(epoch, epochs, key, int(word[1].replace(b",", b"")), worded=True)
    return Mark(epoch, epochs) if epoch is not None else None


def _match_word(
    segment: bytes, words: tuple[bytes, ...], back: int, regex: re.Pattern[bytes]
) -> re.Match[bytes] | None:
    """`regex` matched where one of `words` starts a word (`back` bytes before it)."""
    for word in words:
        at = segment.find(word)
        while at >= 0:
            start = at - back
            if start >= 0 and (start == 0 or not _is_word_byte(segment[start - 1])):
                found = regex.match(segment, start)
                if found:
                    return found
            at = segment.find(word, at + 1)
    return None


def _is_word_byte(byte: int) -> bool:
    return byte == 95 or 48 <= byte <= 57 or 65 <= byte <= 90 or 97 <= byte <= 122


def _bar(segment: bytes, bracket: int, epoch: int | None, epochs: int | None) -> Mark | None:
    """A tqdm/Keras bar counter before a "[" (`34/54 [`, `17671it [`), or a `[n/total]`."""
    while bracket > 0:
        lo = max(0, bracket - _BEFORE)
        bar = _BAR.search(segment, lo, bracket) or _ITS.search(segment, lo, bracket)
        if bar is not None:
            if bar.re is _ITS:
                return Mark(epoch, epochs, b"it", int(bar[1]))
            rate = _RATE.search(segment, bracket) if b"s/it" in segment else None
            stalled = rate is not None and float(rate[1]) >= STALL_S
            return Mark(epoch, epochs, b"/" + bar[2], int(bar[1]), stalled=stalled)
        inside = _BRACKET.match(segment, bracket)
        if inside is not None:
            return Mark(epoch, epochs, b"/" + inside[2], int(inside[1]))
        bracket = segment.find(b"[", bracket + 1)
    return None


def redraw(mark: Mark, marks: Marks) -> bool:
    """Whether `mark` shows nothing new past `marks`: the same epoch and no higher count on a
    row already seen, or, when no row was seen, a bar at its total (the last redraw tqdm
    prints as it closes) or a bar at 0 that shows no epoch (tqdm draws one so as the
    exception that ended the program closes it). A row first seen otherwise, or another
    epoch, is output going on."""
    another_epoch = mark.epoch is not None and mark.epoch != marks.epoch
    if another_epoch and (marks.epoch is not None or mark.key is None):
        return False
    if mark.key is None or mark.n is None:
        return mark.epoch is not None and mark.epoch == marks.epoch
    seen = marks.counters.get(mark.key)
    if seen is not None:
        return mark.n <= seen
    if not marks.counters and mark.n == 0 and mark.epoch is None and not mark.worded:
        return mark.key.startswith(b"/")  # a bar ("0/3"), not a worded counter
    return not marks.counters and mark.key == b"/%d" % mark.n


class Marks:
    """What was seen before a failure: the epoch, and the count of each row."""

    __slots__ = ("counters", "epoch")

    def __init__(self, *marks: Mark | None) -> None:
        self.epoch: int | None = None
        self.counters: dict[bytes, int] = {}
        for mark in marks:
            if mark is not None:
                self.absorb(mark)

    def advanced_by(self, mark: Mark) -> bool:
        """Whether `mark` moved past what was seen: a later epoch, or a larger count on a
        row already seen in the same epoch."""
        if mark.epoch is not None and self.epoch is not None and mark.epoch != self.epoch:
            return mark.epoch > self.epoch
        if mark.key is None or mark.n is None:
            return False
        seen = self.counters.get(mark.key)
        return seen is not None and mark.n > seen

    def absorb(self, mark: Mark) -> None:
        """Note a segment that did not advance: the first sighting of an epoch or a row."""
        if self.epoch is None and mark.epoch is not None:
            self.epoch = mark.epoch
        if mark.key is not None and mark.n is not None:
            self.counters.setdefault(mark.key, mark.n)
