"""Where each line of a job's output stands in Python traceback output."""

from __future__ import annotations

import re

FRAMES_MAX = 1000  # lines of one traceback's frames before it counts as cut off

TB_HEADER = b"Traceback (most recent call last)"
CHAIN_MARKERS = (
    b"During handling of the above exception",
    b"The above exception was the direct cause",
)
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?::\s|:?\s*$)")
_NOT_FAILURES = ("KeyboardInterrupt", "SystemExit", "GeneratorExit")

# States: outside a traceback, in its frames, between two tracebacks of a chain.
IDLE, FRAMES, LINK = "idle", "frames", "link"
# Roles of a segment.
PLAIN, FRAME, EXCEPTION = "plain", "frame", "exception"


class Tracebacks:
    """Where each segment stands in Python traceback output."""

    def __init__(self) -> None:
        self.state = IDLE
        self.chain = 0
        self.frames = 0

    def step(self, body: bytes) -> str:
        """The role of this segment (with any rank prefix removed): plain, frame, exception."""
        if TB_HEADER in body:
            chained = self.state == LINK or body.lstrip().startswith(b"Original ")
            if not chained or self.chain == 0:
                self.chain += 1
            self.state, self.frames = FRAMES, 0
            return FRAME
        if any(marker in body for marker in CHAIN_MARKERS):
            self.state = LINK
            return FRAME
        if self.state == FRAMES:
            self.frames += 1
            if self.frames > FRAMES_MAX:  # a cut-off traceback: what follows is not frames
                self.state = IDLE
            elif not body.strip() or body[:1] in b" \t":
                return FRAME
            else:
                self.state = IDLE
                return EXCEPTION
        if self.state == LINK and body.strip():
            self.state = IDLE
        return PLAIN


def is_failure_exception(text: str) -> bool:
    """Whether an exception line (the one ending a traceback) names a failure: it looks like
    `Name: message` and is not an interrupt or exit."""
    return bool(_EXCEPTION_LINE.match(text)) and not text.startswith(_NOT_FAILURES)
