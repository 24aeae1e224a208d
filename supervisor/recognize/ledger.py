"""The failures seen so far: hits kept, excused by advancing progress, ranked to a root cause."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rsup.supervisor.recognize import advance
from rsup.supervisor.recognize.advance import Mark, Marks
from rsup.supervisor.recognize.catalogue import CATEGORY_PRIORITY, Signature
from rsup.supervisor.recognize.diagnosis import Diagnosis, Finding
from rsup.supervisor.recognize.inferred import (
    GPU_NOT_STARTED,
    INTERRUPTED_WAIT,
    LINK_LOST,
    LOSS_NOT_FINITE,
    NET_FAILURE,
    STALLED,
    TRAINED_MESSAGE,
    TRANSIENT,
    UNTRAINED,
    loss_not_finite,
    trains_by_loss,
)
from rsup.supervisor.recognize.segments import text_of
from rsup.workers import constants as C

EVIDENCE_MAX = 10
HITS_MAX = 1000
WINDOW = 200  # lines before a failure in which the progress it must advance past is looked for

UNKNOWN_MEANING = "The job raised a Python exception that no signature recognises."
UNKNOWN_ACTION = "Restart with backoff until max_attempts."


@dataclass
class Hit:
    """One failure seen: its finding, and whether it still counts."""

    finding: Finding
    signature: Signature | None
    priority: int
    chain: int | None  # traceback chain of an exception line, else None
    survivable: bool  # survived when progress advances after it
    active: bool = True
    marks: Marks | None = None  # what progress must advance past to excuse it


class FailureLedger:
    """The hits of one classifier and the progress they must be excused by."""

    def __init__(self, *, progress_seen: bool = False):
        self._hits: list[Hit] = []
        self._open: list[Hit] = []  # survivable hits waiting for an advance
        self._trained = progress_seen
        self._last: tuple[int, Mark, bytes] | None = None  # the last progress segment
        self._last_epoch: tuple[int, Mark, bytes] | None = None  # the last showing an epoch
        self._stall_told = 0  # line of the stalled bar last reported
        self._distributed = False  # rank prefixes or distributed frames were seen
        self._gpu_init_warned = False  # torch warned the GPU runtime did not start
        self._loss_back_at = 0  # the line of the last training loss read finite at the end

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
        last = self._last
        # the run ended diverged: its last progress line's loss, not read finite after it
        if last and loss_not_finite(last[2]) and self._loss_back_at <= last[0]:
            line, _, segment = last
            found = Finding(LOSS_NOT_FINITE.id, C.UNKNOWN, line, text_of(segment))
            active.append(Hit(found, LOSS_NOT_FINITE, LOSS_NOT_FINITE.priority, None, False))
        if not active:
            return Diagnosis(category=C.NONE)
        # training shown after a config error (a bar's last redraw counts the steps done
        # before it): not a mistake in the setup after all
        read = [self._after_training(h) for h in active] if self._trained else active
        root = max(range(len(read)), key=lambda i: (read[i].priority, -read[i].finding.line, -i))
        return diagnosis_of(read[root], self._evidence(active[root]))

    @staticmethod
    def _after_training(hit: Hit) -> Hit:
        """A config error's hit as it reads once the job is known to have trained."""
        if hit.finding.category != C.CONFIG_ERROR:
            return hit
        if hit.signature is UNTRAINED:  # inferred from "before training": no longer holds
            unknown = replace(hit.finding, signature="", category=C.UNKNOWN)
            return replace(hit, finding=unknown, signature=None,
                           priority=CATEGORY_PRIORITY[C.UNKNOWN])  # fmt: skip
        finding = replace(hit.finding, category=C.UNKNOWN)
        return replace(hit, finding=finding, priority=CATEGORY_PRIORITY[C.UNKNOWN])

    def _evidence(self, root: Hit) -> list[tuple[int, str]]:
        hits = [
            h for h in self._hits if h.active or (h.chain is not None and h.chain == root.chain)
        ]
        if len(hits) > EVIDENCE_MAX:
            hits = sorted(hits, key=lambda h: h is not root)[:EVIDENCE_MAX]
        ordered = sorted(hits, key=lambda h: h.finding.line)
        return [(h.finding.line, h.finding.text) for h in ordered]

    @property
    def _want_progress(self) -> bool:
        return not self._trained or bool(self._open)

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
            self._trained = mark.trains or grew or trains_by_loss(segment, mark.epoch)
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
            self._add(STALLED, last[0], text_of(last[2]), None, out)

    def _seen_before(self, line: int) -> tuple[Mark | None, Mark | None]:
        """The last progress segment and the last epoch within WINDOW lines before `line`."""
        last = self._last[1] if self._last and line - self._last[0] <= WINDOW else None
        epoch = (
            self._last_epoch[1]
            if self._last_epoch and line - self._last_epoch[0] <= WINDOW
            else None
        )
        return last, epoch

    def _add(
        self,
        sig: Signature,
        line: int,
        text: str,
        chain: int | None,
        out: list[Finding],
        marks: tuple[Mark | None, Mark | None] | None = None,
        trained: bool = False,
    ) -> None:
        """Record `sig` seen at `line`; `trained`: its traceback shows the job past training."""
        category, priority = sig.category, sig.priority
        if category == C.CONFIG_ERROR and (self._trained or trained):
            category, priority = C.UNKNOWN, CATEGORY_PRIORITY[C.UNKNOWN]
        if category == C.KILLED:
            self._stalled_before(line, out)
        finding = Finding(sig.id, category, line, text, sig.survivable)
        if chain is not None:
            self._supersede(chain)
        self._store(Hit(finding, sig, priority, chain, sig.survivable), marks)
        out.append(finding)

    def _unknown_exception(
        self,
        text: str,
        line: int,
        shown: str,
        chain: int | None,
        marks: tuple[Mark | None, Mark | None] | None,
        trained: bool = False,
    ) -> None:
        """An exception line no signature knows; `trained`: its traceback shows the job past
        training. What it is taken for (inferred.py): the GPU runtime torch warned did not
        start, a lost link between ranks, a config error before training, else unknown."""
        trained = self._trained or trained or bool(TRAINED_MESSAGE.search(text))
        if self._gpu_init_warned and not trained:
            sig: Signature | None = GPU_NOT_STARTED
        elif self._distributed and NET_FAILURE.search(text):
            sig = LINK_LOST
        elif not trained and not TRANSIENT.search(text):
            sig = UNTRAINED
        else:
            sig = None
        self._store(_inferred_hit(sig, line, shown, chain), marks)

    def _cut_unknown(
        self, line: int, text: str, chain: int, marks: tuple[Mark | None, Mark | None]
    ) -> None:
        """A traceback cut off before its exception line, that nothing in it explains; `text`
        is its last frame line."""
        sig: Signature | None = None
        if INTERRUPTED_WAIT.regex.search(text):
            sig = INTERRUPTED_WAIT
        elif self._gpu_init_warned and not self._trained:
            sig = GPU_NOT_STARTED
        self._store(_inferred_hit(sig, line, text, chain), marks)

    def _supersede(self, chain: int) -> None:
        for hit in self._hits:
            if hit.chain == chain:
                hit.active = False

    def _store(self, hit: Hit, marks: tuple[Mark | None, Mark | None] | None = None) -> None:
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


def _inferred_hit(sig: Signature | None, line: int, text: str, chain: int | None) -> Hit:
    """The hit of an inferred cause (`sig`), or of an unknown exception (None)."""
    if sig is None:
        unknown = Finding("", C.UNKNOWN, line, text)
        return Hit(unknown, None, CATEGORY_PRIORITY[C.UNKNOWN], chain, True)
    return Hit(Finding(sig.id, sig.category, line, text), sig, sig.priority, chain, True)


def diagnosis_of(root: Hit, evidence: list[tuple[int, str]]) -> Diagnosis:
    """The diagnosis a root-cause hit gives, with the evidence lines."""
    sig, found = root.signature, root.finding
    diagnosis = Diagnosis(found.category, None, evidence, found.line, None, UNKNOWN_MEANING)
    if sig is None:
        return replace(diagnosis, action=UNKNOWN_ACTION)
    if found.category != sig.category:  # a config error after progress
        meaning = f"{sig.meaning} It came after training had made progress."
        return replace(diagnosis, signature=sig.id, meaning=meaning, action=UNKNOWN_ACTION)
    return replace(diagnosis, signature=sig.id, meaning=sig.meaning, action=sig.action,
                   remedy=sig.remedy)  # fmt: skip
