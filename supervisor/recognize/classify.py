"""What killed the job: one classifier of its output, with a live door and an offline door.

Live: rsupd feeds `LiveClassifier.feed()` the bytes appended to output.log; each call returns at
once the fatal lines that chunk completed, and `verdict()` names the root cause so far. Offline:
offline.py's `diagnose_file()` / `diagnose_text()` run it.

Lines: numbers count "\\n" only, as `nl` and editors do. A "\\r" (a progress bar redraw) splits
a line into segments matched one by one under the line's number. Of a segment over 8 KiB only
the first and last 4 KiB are kept; bytes are decoded as UTF-8 with replacement.

Root cause: a line is a failure when a `fatal: true` signature matches it and no `fatal: false`
one (a warning) does. The highest priority wins, the earliest a tie: a cause outranks its
consequences (a GPU fault outranks the abort it causes, any real cause outranks the SIGTERM a
scheduler sends after it, `killed`).

Tracebacks (see tracebacks.py for the layouts read: Python's, notebooks', Rich's):

- Indented frames are never matched by line signatures. The exception line of a traceback
  decides when a signature knows it (signatures of `scope: exception` are tried on exception
  lines only); the final exception line of a chain decides over the earlier ones of that chain.
- A traceback that ends the output is fatal: its exception line decides, and an exception no
  signature knows is `unknown` (an unknown final exception of a chain leaves the known one of
  the chain standing). Raised before the job trained, such an exception is a `config_error`
  (signature `exception-before-training`): the same code on the same setup raises it again. Not
  when it names what comes and goes (the network or a socket, a timeout or deadline, the GPU
  runtime, memory, a signal) or NaN values: those stay `unknown` and are retried.
- In a job of several processes (torchrun's rank prefixes, frames of torch.distributed,
  DeepSpeed or Horovod), an unknown exception about a lost connection (reset, refused, broken
  pipe, a socket timeout) is `nccl_distributed`.
- A traceback Python only printed ("Exception ignored in ...", "Error in atexit...") is not a
  failure; nor, unless a signature knows its exception or frames, one that ended a thread other
  than the main one ("Exception in thread ..."), or one printed under a retry's or the
  program's own warning ("WARNING: ...") that output goes on after (one the output ends with
  ended the job, and is decided by what its frames showed). Its chained tracebacks read the
  same. Frames that run only after training (torch.save, save_checkpoint, saving an adapter's
  weights or an Accelerate state, picking the best metric, epoch-end and evaluation hooks, an
  evaluation called with the loop's epoch), a printed training loss, an epoch that says it ended
  ("took 28 s"), a schedule stepped past its total ("Tried to step 60002 times") and an epoch-end
  callback missing the metric it monitors ("ReduceLROnPlateau conditioned on metric val_loss which
  is not available") count as training done, for the exception they end in (config errors
  included). An exception no signature knows that names a numbered checkpoint while failing to
  write it (an OSError with an errno other than ENOENT: `[Errno 95] Operation not supported:
  'epoch_1.pth'`) came at a save, after training. So does an evaluation frame (`evaluate`,
  `Evaluation`, `validation_step`, `val_step`; in the job's own code, not an installed package,
  `val` and a method of an `evaluator.py` other than its constructor...), or a line just above
  the traceback that announces one ("evaluating validation performance...", "Running
  evaluation"; not "Validating", which setup prints), for an exception no signature knows,
  except in Lightning's sanity check and for a file or module missing (an evaluation script of
  its own fails so).
- PaddlePaddle's "C++ Traceback (most recent call last):" opens no traceback: its native stack
  and error summary are read as lines, and its error line (`InvalidArgumentError: ...`) as an
  exception line standing alone.
- An exception line with nothing after its colon (`AssertionError: `) is read with the line
  under it, where torch and others print the message.
- An exception line standing alone at column 0 (`KeyError: 'boxes'`, a dotted or CamelCase name
  ending in Error or Exception, outside any traceback) is the exception line of a traceback
  whose frames were not printed or not copied, and counts as one where the output ends with it,
  its message's indented lines, the notes a library prints under it (PaddlePaddle's hints,
  gin-config's configurable and binding, NumPy's removed alias), or redraws of a row (the same
  count again, or the one bar tqdm closes as the program exits: at its total, or at 0 without
  an epoch); indented with its frames (a poster indented the whole log), it is heard as a
  frame. Under Hydra's `Error executing job with overrides: [...]` any exception line
  (`omegaconf.errors.MissingMandatoryValue: ...`) is one: Hydra prints the exception that
  ended the job so, without its frames, and a hint line after it.
- A cut-off traceback (the excerpt starts inside its frames, or ends before its exception line)
  still counts: by its exception line when present; else by the exception class a notebook
  header named; else by the deepest frame a `scope: frame` signature knows (`rebuild_storage_fd`
  is a DataLoader worker's file-descriptor failure, a frame in the `yaml` package a YAML error);
  else, cut off in a wait for a child process (a launcher's `os.waitpid`: only an interrupt
  breaks it), it is a `hang`; else it is `unknown`. The frames also speak when the exception
  line is unknown or an interrupt (`KeyboardInterrupt` while waiting on the DataLoader's queue is
  a hang).

Progress (advance.py reads the counters): a fatal line of a `survivable` signature (an OOM
AutoBatch caught, a logged ImportError) and an unknown exception are excused only by progress
that ADVANCES past what was seen before the failure: a later epoch, a larger count on a row (a
tqdm or Keras bar, `step N`, `[n/total]`) already seen, a checkpoint saved, or the caller's
`note_progress()` (a heartbeat). A redraw of the same row (the same counter, a bar tqdm
re-prints after the traceback, "\\r" redraws) is not progress, nor is a bar glued onto the error
line itself (it is read before the error, so it is part of what was seen). "Seen before" is the
last progress segment and the last epoch among the WINDOW lines before the failure (before its
traceback's first line, for an exception). A row first seen after the failure is noted and must
then advance. Other fatal lines are never excused.

A run that diverged: where the last training loss the output prints (on its last progress
line, or among its last TAIL_LINES lines, once it has ended: a Keras row, "'loss': nan",
"Loss is nan.", Paddle's "loss [ nan ...]") is NaN or infinite, the job ended `unknown`
(signature `loss-not-finite-at-end`), ranked above the stop it leads to. A validation or test loss,
a loss scale, or a loss that came back finite after it, is not a diverged run.

A hang is silence, not a line; signs of it are read around the lines: a traceback (an
interrupt) or a kill right after a bar reporting over 1000 s per iteration, the frames an
interrupt found the job in (above), are `hang`.

Config errors count as `config_error` only until the job has trained (a step counted in an epoch
or by a `step` word, an epoch past the first, a checkpoint, or the caller's `progress_seen` /
`note_progress()`); after that they are `unknown`, and so is one the output shows training
around after all (tqdm's last redraw of a bar, printed after the traceback, counts the steps
done before it). Loading bars alone (checkpoint shards, tokenising) are not training.

torch's "CUDA initialization: ..." warning of a broken runtime (driver too old, error 802-804)
is a survivable `hip_runtime_init`; "Found no NVIDIA driver" alone (a CPU-only machine) counts
only when an unknown exception follows before training. Speed: lines outside a traceback holding
no trigger word are skipped in bulk (prescan.py); signatures of `scope: tail`, whose wordings hold
no trigger word, are tried on the last TAIL_LINES lines once the output has ended (close()),
and on the line above a native abort (a `segfault_abort` line) when the abort is read: what the
program reported before it aborted (glog's fatal message above its "Check failure stack trace").
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from typing import NamedTuple

from rsup.supervisor.recognize import advance
from rsup.supervisor.recognize.advance import Marks
from rsup.supervisor.recognize.catalogue import TAIL_LINES, Catalogue, Signature
from rsup.supervisor.recognize.diagnosis import Diagnosis as Diagnosis
from rsup.supervisor.recognize.diagnosis import Finding as Finding
from rsup.supervisor.recognize.exitcodes import classify_exit as classify_exit
from rsup.supervisor.recognize.inferred import (
    CONNECT_RETRY,
    CONNECT_RETRY_WORD,
    CUDA_INIT_WARNING,
    DISTRIBUTED_FRAME,
    EVAL_ANNOUNCED,
    EVAL_FRAME,
    GPU_ABSENT,
    GPU_WARNED,
    HIP_INIT_WARNING,
    IGNORED_BY_PYTHON,
    LOGGED_RETRY,
    LOSS_NOT_FINITE,
    SANITY_FRAME,
    TRAINED_FRAME,
    Trace,
    last_loss_finite,
    names_saved_file,
    printed_only,
)
from rsup.supervisor.recognize.matcher import Matcher
from rsup.supervisor.recognize.prescan import Finder, SkippedText
from rsup.supervisor.recognize.segments import (
    CUT_MARK,
    HEAD,
    TAIL,
    after_rank_prefix,
    cut,
    text_of,
)
from rsup.supervisor.recognize.segments import TEXT_MAX as TEXT_MAX
from rsup.supervisor.recognize.signatures import default_catalogue
from rsup.supervisor.recognize.tracebacks import (
    ALONE,
    CHAIN_MARKERS,
    EXCEPTION,
    FRAME,
    FRAME_WORDS,
    IDLE,
    MESSAGE_NEXT,
    ORPHAN_WORDS,
    PLAIN,
    TB_HEADER,
    Tracebacks,
    is_failure_exception,
    is_orphan_exception,
    takes_message,
)
from rsup.workers import constants as C

# Hydra's line above the exception that ended the job, printed without its traceback
HYDRA_HEADER = b"Error executing job with overrides: "
LAST_BYTES = 16 * 1024  # the end of the output kept for `scope: tail` signatures


# What PaddlePaddle prints under the error line of its error summary ("  [Hint: Expected
# x == y] (at /paddle/...)", the operator that raised it, the time and signal of a crash).
PADDLE_NOTES = (b"[Hint:", b"[operator <", b"[Advise:", b"[TimeInfo:", b"[SignalInfo:")
# What gin-config adds under the exception it re-raises: the configurables it was calling
# ("  In call to configurable 'Runner' (<function Runner.__init__ at 0x...>)") or the binding
# it was parsing ("  In bindings string line 2", "  In file \"train.gin\", line 3"), with
# that binding on the line under it, indented deeper, and maybe a caret under the binding.
GIN_CALL_NOTE = b"In call to configurable '"
GIN_BINDING_NOTES = (b"In bindings string line ", b'In file "')
# The lines NumPy 1.24+ prints under "AttributeError: module 'numpy' has no attribute
# 'float'.": which alias it was, and where it was deprecated (the link on its own line).
NUMPY_ALIAS_NOTES = (
    b"`np.",
    b"The aliases was originally deprecated in NumPy ",
    b"https://numpy.org/devdocs/release/",
)
# Notes a library prints under its error line: more of the same error.
ERROR_NOTES = PADDLE_NOTES + NUMPY_ALIAS_NOTES


class Orphan(NamedTuple):
    """An exception line, pending: it counts if nothing but redraws of a progress row (or
    more of its message) follow it to the end of the output (LiveClassifier._went_on). A lone
    line, or the exception line of a traceback printed under a warning or a retry (`trace`,
    `chain`: decided then by what its frames showed)."""

    body: bytes
    shown: str
    line: int
    marks: Marks  # the progress seen before it, and the rows first seen after it
    # indented lines under it are more of its message (its message began on the line under
    # it, "RuntimeError:"; or it ends a traceback, whose message may go on so)
    message_under: bool = False
    trace: Trace | None = None
    chain: int | None = None
    # the indent of gin's note naming a binding, whose line comes next, deeper (-1: none);
    # then the indent under which gin's caret may follow that line. Kept here, as the marks
    # are, so the verdict does not depend on how the output came.
    gin_binding: int = -1
    gin_caret: int = -1


def _end_of(region: bytes) -> bytes:
    """The last LAST_BYTES of `region` (which ends with a terminator) with each segment over
    HEAD + TAIL bytes cut, as one that comes in pieces is (_hold): the end of the output reads
    the same however it was fed."""
    probe = region[-(LAST_BYTES + HEAD + TAIL + 1) :]
    if max(map(len, probe.replace(b"\r", b"\n").split(b"\n"))) <= HEAD + TAIL:
        return region[-LAST_BYTES:]
    parts: list[bytes] = []
    size, end = 0, len(region)
    while end > 0 and size < LAST_BYTES:
        stop = end - 1  # region[stop] is the segment's terminator
        start = max(region.rfind(b"\n", 0, stop), region.rfind(b"\r", 0, stop)) + 1
        parts.append(cut(region[start:stop]) + region[stop:end])
        size, end = size + len(parts[-1]), start
    return b"".join(reversed(parts))[-LAST_BYTES:]


def _segments(line: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The segments of a line that are not blank ("\\r" redraws), each with its text as the
    classifier reads it (cut, past a launcher's tag)."""
    for segment in line.split(b"\r"):
        body = after_rank_prefix(cut(segment))[0].strip()
        if body:
            yield segment, body


@functools.lru_cache(maxsize=4)
def _matcher(cat: Catalogue) -> Matcher:
    """The matcher of a catalogue, built once (a catalogue is immutable, a matcher holds no
    state): building one costs tens of milliseconds, and rsupd and `rsup diagnose` make a
    classifier per log."""
    words = (TB_HEADER, *CHAIN_MARKERS, *FRAME_WORDS, *ORPHAN_WORDS, CUDA_INIT_WARNING,
             HIP_INIT_WARNING, CONNECT_RETRY_WORD)  # fmt: skip
    return Matcher(cat, words)


class LiveClassifier(SkippedText):
    """Classifies a job's output fed in chunks of any size, as the file grows."""

    def __init__(self, catalogue: Catalogue | None = None, *, progress_seen: bool = False):
        super().__init__(progress_seen=progress_seen)
        self._matcher = _matcher(catalogue or default_catalogue())
        self._tb = Tracebacks()
        self._trace: Trace | None = None
        self._pending = b""  # the unterminated segment, when short
        self._head: bytes | None = None  # the unterminated segment, when cut: head and tail
        self._tail = b""
        self._closed = False
        self._region, self._pos = b"", 0  # the region and offset of the line being read
        self._segment_before = b""  # the segment before the one being read, on its line
        self._prev_line = b""  # the last line of the region before, for the line above
        self._prev_line_no = 0  # its number
        # the end of the output so far (its overlong segments cut, as they are when they come
        # in pieces), for `scope: tail` signatures and the last loss printed
        self._last_bytes = b""
        self._last_line = 0  # the number of its last complete line
        self._traced: deque[int] = deque(maxlen=4 * TAIL_LINES)  # lines read in tracebacks
        self._signed: deque[int] = deque(maxlen=4 * TAIL_LINES)  # lines a line signature read
        self._orphan: Orphan | None = None
        self._printed: tuple[int, str | None] | None = None  # the last traceback's chain, printed
        # An exception line whose message is on the next line ("AssertionError: " then
        # "Found no NVIDIA driver on your system."): decided with that line.
        self._unsaid: tuple[bytes, str, int, Trace | None, int | None] | None = None

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
        self._say(b"", out)
        if self._orphan is not None:  # a pending exception line ends the output
            orphan, self._orphan = self._orphan, None
            if orphan.trace is None:
                self._exception(orphan.body, orphan.shown, None, out, orphan.line, None, None)
            else:  # a traceback printed under a warning or a retry: what its frames showed
                text, trace = orphan.body.decode("utf-8", "replace"), orphan.trace
                trained = trace.trained_for(orphan.body)
                self._unknown_exception(
                    text, orphan.line, orphan.shown, orphan.chain, trace.marks, trained
                )
        self._read_last_lines(out)
        self._pending, self._head, self._closed = b"", None, True
        return out

    def _read_last_lines(self, out: list[Finding]) -> None:
        """The `scope: tail` signatures, tried on the last TAIL_LINES lines of the output (of
        its last LAST_BYTES) that no line signature read as they came and that are not part
        of a traceback."""
        data = self._last_bytes
        if len(data) >= LAST_BYTES:  # the window may begin inside a line: not a line to read
            data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
        lines = data.split(b"\n")
        last = self._last_line
        if lines and not lines[-1]:
            lines.pop()  # the terminator of the last line
        else:
            last += 1  # the output ends inside a line ("\r" redraws): the line after
        first = last - len(lines) + 1
        traced = set(self._traced) | set(self._signed)  # read as they came
        self._read_last_loss(lines, first, traced, out)
        for at in range(max(0, len(lines) - TAIL_LINES), len(lines)):
            if first + at in traced:
                continue
            for segment, body in _segments(lines[at]):
                sig = self._matcher.match_tail(body)
                if sig is None:
                    continue
                if not (
                    sig.survivable
                    and self._went_on_past(lines[at + 1 :], first + at + 1, sig, traced)
                ):
                    self._add(sig, first + at, text_of(segment), None, out)
                break  # one finding a line; none when the job went on past a survivable one

    def _read_last_loss(
        self, lines: list[bytes], first: int, read: set[int], out: list[Finding]
    ) -> None:
        """The last training loss printed among the last TAIL_LINES `lines` (the first
        numbered `first`), outside tracebacks and lines a signature read: NaN or infinite,
        the training had diverged (a progress row or a trainer's own line: "Loss is nan.")."""
        for at in range(len(lines) - 1, max(0, len(lines) - TAIL_LINES) - 1, -1):
            if first + at in read:
                continue
            for segment, body in reversed(list(_segments(lines[at]))):
                finite = last_loss_finite(body)
                if finite is None:
                    continue
                if finite:
                    self._loss_back_at = first + at  # a NaN loss before it came back
                else:
                    self._add(LOSS_NOT_FINITE, first + at, text_of(segment), None, out)
                return

    def _went_on_past(self, after: list[bytes], at: int, sig: Signature, read: set[int]) -> bool:
        """Whether the output went on after a survivable tail wording of `sig` (`after`: the
        lines below it, the first numbered `at`): a line that is not more of the same, not
        part of a traceback, not an exception line (nor Hydra's line announcing one), and not
        a failure a line signature read as it came, which speaks for itself (`read`: the
        numbers of those lines and of the traceback lines). "Rank 0: Completed store-based
        barrier" after "Waiting in store based barrier" is the job going on, as is a
        progress row; a traceback under it is not."""
        for n, line in enumerate(after, at):
            if n in read:
                continue
            for _, body in _segments(line):
                if is_orphan_exception(body) or body.startswith(HYDRA_HEADER):
                    continue  # an exception line, or Hydra announcing the one under it
                if self._matcher.match_tail(body) is not sig:
                    return True
        return False

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
        finder = Finder(region, self._matcher.words, self._matcher.words_ci)
        pos, size = 0, len(region)
        while pos < size:
            if self._tb.state == IDLE and not self._matcher.every_line and not self._unsaid:
                hit = finder.next(pos)
                start = size if hit < 0 else max(pos, region.rfind(b"\n", pos, hit) + 1)
                if self._orphan is not None and self._went_on(region[pos:start]):
                    self._orphan = None
                self._skip(region, pos, start)
                pos = start
                if pos >= size:
                    break
            pos = self._line(region, pos, out)
        tail = region.rstrip()
        if tail:  # the last line that is not blank, for the line above
            self._prev_line = tail[tail.rfind(b"\n") + 1 :][-4096:]
            self._prev_line_no = self._lines + 1 - region.count(b"\n", len(tail))
        self._last_bytes = (self._last_bytes + _end_of(region))[-LAST_BYTES:]
        self._last_line = self._lines

    def _line(self, region: bytes, pos: int, out: list[Finding]) -> int:
        """Classify the segments of the line at `pos`; return where the next line starts."""
        end = region.find(b"\n", pos)
        self._region, self._pos, self._segment_before = region, pos, b""
        piece = region[pos:end] if end >= 0 else region[pos:]
        for segment in piece.split(b"\r"):
            if segment:
                self._segment(segment, out)
                if not segment.isspace():
                    self._segment_before = segment
        if end < 0:
            return len(region)
        self._lines += 1
        return end + 1

    def _line_above(self) -> bytes:
        """The line above the one being read: see _above."""
        return self._above()[0]

    def _above(self) -> tuple[bytes, int]:
        """The last line above the one being read that is not blank (from the region before
        when this one holds none), as the classifier reads it (its last `\\r` segment, past a
        launcher's tag), and its number: the same whatever chunks the output came in. A
        segment after a `\\r` has the segment before it above it."""
        if self._segment_before:
            return after_rank_prefix(self._segment_before)[0].strip(), self._lines + 1
        region, end = self._region, self._pos
        i = end
        while i > 0 and region[i - 1] in b" \t\r\n\f\v":  # past the blank lines above
            i -= 1
        if i > 0:
            start = max(region.rfind(b"\n", 0, i) + 1, i - 4096)
            above, at = region[start:i], self._lines + 1 - region.count(b"\n", i, end)
        else:
            above, at = self._prev_line, self._prev_line_no
        return after_rank_prefix(above.rsplit(b"\r", 1)[-1])[0].strip(), at

    def _segment(self, segment: bytes, out: list[Finding]) -> None:
        segment = cut(segment)
        body, prefix = after_rank_prefix(segment)
        joined = False
        if self._unsaid is not None and body.strip():  # its message, or output going on
            joined = takes_message(body, alone=self._unsaid[4] == ALONE)
            named = not joined and self._names_it(body)
            self._say(body.strip() if joined or named else b"", out, lived_through=named)
            joined = joined or named
        if self._orphan is not None and not joined and self._went_on(segment):
            self._orphan = None
        if prefix:
            self._distributed = True  # torchrun's rank prefixes
        tb = self._tb
        role = tb.step(body)
        line = self._lines + 1
        if self._matcher.tail_sigs and (role != PLAIN or tb.state != IDLE):
            self._traced.append(line)  # the tail pass (close()) leaves traceback lines alone
        if tb.cut:
            self._end_trace(out)
        if tb.started:
            head = body.find(TB_HEADER)
            if head > 0 and advance.CANDIDATE.search(body, 0, head):
                # a bar drawn just before the traceback, on its line, was seen before it
                self._progress(body[:head], line)
            self._trace = Trace(
                tb.chain, line, text_of(segment), self._seen_before(line), tb.notebook_class
            )
            if head >= 0:  # a chained traceback is printed only when its chain's first was
                kept = self._printed if self._printed and self._printed[0] == tb.chain else None
                above = self._line_above()
                printed = printed_only(above) or (kept[1] if kept else None)
                self._trace.printed, self._printed = printed, (tb.chain, printed)
                if EVAL_ANNOUNCED.search(above):
                    self._trace.evaluating = True
            self._stalled_before(line, out)
        if role == FRAME:
            if self._trace is not None and TB_HEADER not in body:
                self._frame(body, segment, line)
            return
        if role == PLAIN and advance.CANDIDATE.search(body):
            self._progress(body, line)
        signature = self._matcher.match(body)
        if role == EXCEPTION:
            trace, self._trace = self._trace, None
            if signature is None and MESSAGE_NEXT.match(body):
                self._unsaid = (body, text_of(segment), line, trace, tb.chain)
                return
            self._exception(body, text_of(segment), signature, out, line, trace, tb.chain)
        elif signature is not None:
            self._add(signature, line, text_of(segment), None, out)
            self._signed.append(line)
            if signature.category == C.SEGFAULT_ABORT and self._matcher.tail_sigs:
                self._read_above_abort(out)
        elif (
            tb.state == IDLE
            and is_failure_exception(text_of(body))
            and self._line_above().startswith(HYDRA_HEADER)
        ):  # the exception that ended a Hydra job, printed without its frames
            if MESSAGE_NEXT.match(body):  # "AssertionError: ", its message under it
                self._unsaid = (body, text_of(segment), line, None, None)
            else:
                self._exception(body, text_of(segment), None, out, line, None, None)
        elif tb.state == IDLE and is_orphan_exception(body):
            if MESSAGE_NEXT.match(body):  # "RuntimeError:" alone, its message under it
                self._unsaid = (body, text_of(segment), line, None, ALONE)
            else:
                self._orphan = Orphan(body, text_of(segment), line, self._marks_before(line))
        elif CUDA_INIT_WARNING in body or HIP_INIT_WARNING in body:
            self._gpu_init_warned = True
            if not GPU_ABSENT.search(body):  # a GPU is there and its runtime broke
                self._add(GPU_WARNED, line, text_of(segment), None, out)
        elif CONNECT_RETRY_WORD in body and CONNECT_RETRY.regex.search(text_of(body)):
            self._add(CONNECT_RETRY, line, text_of(segment), None, out)

    def _read_above_abort(self, out: list[Finding]) -> None:
        """The line above a native abort says what the program reported before it aborted
        (glog's fatal message above "*** Check failure stack trace: ***"). When no line
        signature read it (skipped in bulk, it holds no trigger word), it is tried against the
        `scope: tail` signatures, which are for such wordings; not the survivable ones (those
        count only where the output ends with them, which is not known yet); once a line."""
        body, at = self._above()
        if not body or at in self._traced or at in self._signed:
            return
        sig = self._matcher.match_tail(body)
        if sig is not None and not sig.survivable:
            self._traced.append(at)  # read: neither this nor the tail pass reads it again
            self._add(sig, at, text_of(body), None, out)

    def _marks_before(self, line: int) -> Marks:
        return Marks(*self._seen_before(line))

    def _went_on(self, text: bytes) -> bool:
        """Whether output went on after the pending lone exception line: any line but a
        redraw of a progress row (advance.redraw: the same count again, or the one bar tqdm
        closes as the program exits, at its total or at 0), a note a library prints under its
        error line (ERROR_NOTES: PaddlePaddle's, NumPy's on a removed alias), gin-config's
        indented notes and the binding line a note names under it, with its caret
        (GIN_CALL_NOTE, GIN_BINDING_NOTES), or, under an exception line whose message began on
        the line under it, an indented line (more of that message)."""
        assert self._orphan is not None
        marks, message_under = self._orphan.marks, self._orphan.message_under
        binding, caret = self._orphan.gin_binding, self._orphan.gin_caret
        for piece in text.splitlines():
            body, _ = after_rank_prefix(piece)
            if not body.strip():
                continue
            indent = len(body) - len(body.lstrip(b" \t"))
            awaited, binding, under, caret = binding, -1, caret, -1
            if indent > awaited >= 0:
                caret = awaited
                continue  # the binding a gin note named (whatever it holds)
            if indent > under >= 0 and body.strip() == b"^":
                continue  # gin's caret under that binding
            mark = advance.parse(cut(body))
            if mark is None and message_under and body[:1] in b" \t":
                continue  # the message goes on under it
            if mark is None and body.lstrip().startswith(ERROR_NOTES):
                continue  # a library's notes under its error line: more of the same error
            if mark is None:
                if indent and body.lstrip().startswith(GIN_CALL_NOTE):
                    continue  # gin's notes under the exception it re-raised
                if indent and body.lstrip().startswith(GIN_BINDING_NOTES):
                    binding = indent
                    continue
            if mark is None or not advance.redraw(mark, marks):
                return True
            marks.absorb(mark)
        if (binding, caret) != (self._orphan.gin_binding, self._orphan.gin_caret):
            self._orphan = self._orphan._replace(gin_binding=binding, gin_caret=caret)
        return False

    def _names_it(self, body: bytes) -> bool:
        """Whether a line at column 0 under a lone exception line with no message
        (`AssertionError:`) is its message all the same: read with it, it is a failure a
        signature knows (torch's "Found no NVIDIA driver on your system" begins so)."""
        assert self._unsaid is not None
        if TB_HEADER in body or self._matcher.match(body) is not None:
            return False
        return self._matcher.match(self._unsaid[0].rstrip() + b" " + body.strip()) is not None

    def _say(self, message: bytes, out: list[Finding], *, lived_through: bool = False) -> None:
        """Decide a held exception line (see _unsaid) with the `message` line under it;
        `lived_through`: the message is a line at column 0 (_names_it), so the failure it names
        is excused, as a survivable one is, by progress that advances after it."""
        if self._unsaid is None:
            return
        body, shown, line, trace, chain = self._unsaid
        self._unsaid = None
        if message and self._matcher.match(message) is None:  # not a failure line of its own
            body = body.rstrip() + b" " + message
            shown = text_of(body)
        signature = self._matcher.match(body)
        if chain != ALONE:
            self._exception(body, shown, signature, out, line, trace, chain)
        elif signature is not None:
            if lived_through and not signature.survivable:
                signature = replace(signature, survivable=True)
            self._add(signature, line, shown, None, out)
        else:  # counts, as any lone exception line, only if nothing but redraws follow it
            self._orphan = Orphan(body, shown, line, self._marks_before(line), True)

    def _frame(self, body: bytes, segment: bytes, line: int) -> None:
        assert self._trace is not None
        if not body.strip(b" \t\r\n^~"):  # blank, or the carets Python 3.11+ prints under code
            return
        self._trace.last_frame = (line, text_of(segment))
        text = body.decode("utf-8", "replace")
        if TRAINED_FRAME.search(text):
            self._trace.trained = True
        if EVAL_FRAME.search(text):
            self._trace.evaluating = True
        if SANITY_FRAME.search(text):
            self._trace.sanity = True
        if DISTRIBUTED_FRAME.search(text):
            self._distributed = True
        line_of = body.strip()
        if is_orphan_exception(line_of):  # an exception line the poster indented with the rest
            sig = self._matcher.match(line_of) or self._matcher.match_exception(line_of)
            if sig is not None:
                self._trace.hint = (sig, line, text_of(segment))
                return
        for sig in self._matcher.frame_sigs:
            if any(k in body for k in sig.keywords) and sig.regex.search(text):
                self._trace.hint = (sig, line, text_of(segment))  # deeper frames replace it
                return

    def _exception(
        self,
        body: bytes,
        shown: str,
        signature: Signature | None,
        out: list[Finding],
        line: int,
        trace: Trace | None,
        chain: int | None,
    ) -> None:
        """The exception line `body` (`shown` in findings) at `line`, of the traceback
        `trace` (of `chain`), or standing alone (None, None)."""
        if trace is not None and trace.printed == IGNORED_BY_PYTHON:
            return  # never raised
        marks, trained = (trace.marks, trace.trained) if trace else (None, False)
        signature = signature or self._matcher.match_exception(body)
        if signature is not None:
            self._add(signature, line, shown, chain, out, marks, trained)
            if signature.category == C.KILLED and trace is not None:
                self._add_hint(trace, out)  # where the interrupt found the job
        elif trace is not None and trace.hint is not None:
            self._add_hint(trace, out)
        else:
            text = body.decode("utf-8", "replace")
            harmless = bool(trace and trace.printed) or self._matcher.harmless(body)
            if trace and trace.printed == LOGGED_RETRY and not self._matcher.harmless(body):
                if is_failure_exception(text):  # counts if the output ends with it
                    seen = self._marks_before(line)
                    self._orphan = Orphan(body, shown, line, seen, True, trace, chain)
                return
            if is_failure_exception(text) and not harmless:
                trained = trace.trained_for(body) if trace else names_saved_file(body)
                self._unknown_exception(text, line, shown, chain, marks, trained)

    def _end_trace(self, out: list[Finding]) -> None:
        """A traceback ended without its exception line: decide by what it showed."""
        trace, self._trace = self._trace, None
        if trace is None or trace.printed == IGNORED_BY_PYTHON:
            return
        named = trace.notebook_class
        signature = None
        if named:
            encoded = named.encode()
            signature = self._matcher.match(encoded) or self._matcher.match_exception(encoded)
        if signature is not None:
            self._add(
                signature, trace.line, trace.text, trace.chain, out, trace.marks, trace.trained
            )
            if signature.category == C.KILLED:
                self._add_hint(trace, out)
        elif trace.hint is not None:
            self._add_hint(trace, out)
        elif not trace.printed:
            line, text = trace.last_frame or (trace.line, trace.text)
            body = text.strip().encode()
            body = after_rank_prefix(body)[0].strip()
            if trace.last_frame and is_orphan_exception(body):  # the poster indented it all
                signature = self._matcher.match(body)
                self._exception(body, text, signature, out, line, trace, trace.chain)
            else:
                self._cut_unknown(line, text, trace.chain, trace.marks)

    def _add_hint(self, trace: Trace, out: list[Finding]) -> None:
        if trace.hint is not None:
            sig, line, text = trace.hint
            self._add(sig, line, text, None, out, trace.marks, trace.trained)
