"""Where each line of a job's output stands in Python traceback output.

Three layouts are read: Python's own (`Traceback (most recent call last):`, indented
frames, the exception line), notebook ones (IPython, Jupyter, VS Code: a header that names
the exception class, `Name    Traceback (most recent call last)`, then unindented
location lines and `---->` arrows) and Rich's boxed frames (`│ ... │`).

A traceback may be cut: the excerpt starts inside its frames (an unindented
`File "x.py", line N` line, or a notebook `File /x.py:N, in f(...)` line, opens one),
or ends before its exception line (the log ends, another traceback starts, or too many
lines go by). `cut` says so; the classifier then decides by what the frames showed.
"""

from __future__ import annotations

import re

from rsup.supervisor.recognize import advance

FRAMES_MAX = 1000  # lines of one traceback's frames before it counts as cut off
# Unindented lines in a row, none an exception line, before a traceback counts as cut off.
STRAYS_MAX = 4

TB_HEADER = b"Traceback (most recent call last)"
# PaddlePaddle's C++ stack, printed above its own error summary: no Python frames follow it,
# and its error line ("InvalidArgumentError: ...") comes after other lines, read as they are
NATIVE_HEADER = b"C++ " + TB_HEADER
CHAIN_MARKERS = (
    b"During handling of the above exception",
    b"The above exception was the direct cause",
)
# A line that starts a traceback cut at its top: a frame of Python's layout, or an arrow or
# a location line of IPython's. FRAME_WORDS are searched for in bulk to find the first:
# each costs a pass over the output, so only Python's frames are looked for (a notebook
# traceback cut at its top is met at its first line holding another trigger word).
FRAME_WORDS = (b'py", line',)
_FRAME_START = re.compile(
    rb'\s*File "[^"]*", line \d+, in |-{2,}> ?\d+ |File (?:[/~\[]|[A-Za-z]:\\)\S*.*, in \S'
)
# `Name: message` or `Name` alone, where Name is an exception class: a dotted path, or a
# CamelCase word (not INFO, ERROR or a lowercase word such as `worker 3:`).
_EXCEPTION_LINE = re.compile(r"(?:(?:[A-Za-z_]\w*\.)+\w+|_?[A-Z]\w*[a-z]\w*)(?::\s|:?\s*$)")
_EXCEPTION_BYTES = re.compile(_EXCEPTION_LINE.pattern.encode())
_NOTEBOOK_HEADER = re.compile(rb"\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\s+" + re.escape(TB_HEADER))
_BOX = ("│".encode(), "╭".encode(), "╰".encode(), "┃".encode())
# The rest of a frame line a terminal wrapped at its width ('py", line 35, in load').
_WRAPPED_FRAME = re.compile(rb'[^"\s]*", line \d+, in ')
_NOT_FAILURES = ("KeyboardInterrupt", "SystemExit", "GeneratorExit")

# States: outside a traceback, in its frames, between two tracebacks of a chain.
IDLE, FRAMES, LINK = "idle", "frames", "link"
# Roles of a segment.
PLAIN, FRAME, EXCEPTION = "plain", "frame", "exception"


class Tracebacks:
    """Where each segment stands in Python traceback output.

    After each `step`: `started` is true when the segment opened a traceback (a header or
    the first frame of one cut at its top), `cut` when the traceback before it ended with
    no exception line, and `notebook_class` names the exception class a notebook header
    gave (used when the traceback is cut)."""

    def __init__(self) -> None:
        self.state = IDLE
        self.chain = 0
        self.frames = 0
        self.strays = 0
        self.notebook = False
        self.notebook_class: str | None = None
        self.started = False
        self.cut = False

    def step(self, body: bytes) -> str:
        """The role of this segment (with any rank prefix removed): plain, frame, exception."""
        self.started = self.cut = False
        if TB_HEADER in body and NATIVE_HEADER not in body:
            chained = self.state == LINK or body.lstrip().startswith(b"Original ")
            self.cut = self.state == FRAMES
            self._open(chained)
            header = _NOTEBOOK_HEADER.match(body)
            self.notebook = header is not None
            self.notebook_class = header.group(1).decode() if header else None
            return FRAME
        if CHAIN_MARKERS[0] in body or CHAIN_MARKERS[1] in body:
            self.cut = self.state == FRAMES
            self.state = LINK
            return FRAME
        if self.state == FRAMES:
            return self._in_frames(body)
        if _FRAME_START.match(body):  # the excerpt starts inside a traceback's frames
            self._open(self.state == LINK)
            self.notebook = not body.lstrip().startswith(b'File "')  # IPython's layout
            self.notebook_class = None
            return FRAME
        if self.state == LINK and body.strip():
            self.state = IDLE
        return PLAIN

    def close(self) -> bool:
        """End of the output: whether a traceback was left without its exception line."""
        cut = self.state == FRAMES
        self.state = IDLE
        return cut

    def _open(self, chained: bool) -> None:
        if not chained or self.chain == 0:
            self.chain += 1
        self.state, self.frames, self.strays, self.started = FRAMES, 0, 0, True

    def _in_frames(self, body: bytes) -> str:
        self.frames += 1
        if self.frames > FRAMES_MAX:  # a cut-off traceback: what follows is not frames
            self.state, self.cut = IDLE, True
            return PLAIN
        if not body.strip() or body[:1] in b" \t" or body.startswith(_BOX):
            return FRAME
        if (
            body.startswith(b'File "')
            or (self.notebook and not _EXCEPTION_BYTES.match(body))
            or _WRAPPED_FRAME.match(body)
        ):
            self.strays = 0
            return FRAME
        if _EXCEPTION_BYTES.match(body):
            self.state = IDLE
            return EXCEPTION
        # Another process's line printed into the frames, or the traceback was cut.
        self.strays += 1
        if self.strays >= STRAYS_MAX:
            self.state, self.cut = IDLE, True
        return PLAIN


# An exception line standing alone (no traceback before it: the excerpt or the program
# printed only that): a dotted or CamelCase name ending in Error or Exception, at column 0.
_ORPHAN = re.compile(
    rb"(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*(?:Error|Exception)|Exception)(?::\s|:?\s*$)"
)
ORPHAN_WORDS = (b"Error", b"Exception:")  # not "cudnnException," warnings


_METRIC = re.compile(rb"[^:]*:\s*[-+]?\d+\.\d+(?:[eE][-+]?\d+)?\s*$")  # MeanSquaredError: 0.02


def is_orphan_exception(body: bytes) -> bool:
    """Whether a line outside any traceback is an exception line whose frames are missing
    (not a metric printed under its class name)."""
    return _ORPHAN.match(body) is not None and _METRIC.match(body) is None


def is_failure_exception(text: str) -> bool:
    """Whether an exception line (the one ending a traceback) names a failure: it looks like
    `Name: message` and is not an interrupt or exit."""
    return bool(_EXCEPTION_LINE.match(text)) and not text.startswith(_NOT_FAILURES)


# An exception line with no message after its colon: the message is on the next line.
MESSAGE_NEXT = re.compile(rb"^\s*[\w.]*(?:Error|Exception):\s*$")
ALONE = -1  # the chain of such a line standing outside any traceback


def takes_message(body: bytes, *, alone: bool) -> bool:
    """Whether the line `body` is the message of the MESSAGE_NEXT line above it: not a new
    traceback, and under a lone line (ALONE) only an indented line that shows no progress."""
    if TB_HEADER in body:
        return False
    return not alone or (body[:1] in b" \t" and not advance.CANDIDATE.search(body))
