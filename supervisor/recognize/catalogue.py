"""The signature catalogue's model: categories by priority, scopes, `Signature`, `Catalogue`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rsup.workers import constants as C

# When a log holds several failures, the highest priority is the root cause: a cause
# ranks above the consequences it leads to (a GPU fault above the abort it causes).
CATEGORY_PRIORITY: dict[str, int] = {
    C.GPU_MEMORY_FAULT: 90,
    C.HOST_OOM: 88,
    C.HIP_RUNTIME_INIT: 85,
    C.OOM: 80,
    C.CONFIG_ERROR: 75,
    C.DATALOADER_WORKER: 70,
    C.NCCL_DISTRIBUTED: 60,
    C.HANG: 50,
    C.SEGFAULT_ABORT: 30,
    C.KILLED: 25,
    C.UNKNOWN: 10,
}

# Where a signature is tried. `line`: every line outside a traceback's frames (plain lines
# and exception lines). `exception`: only the exception line that ends a traceback (and
# the exception class a notebook traceback's header names). `frame`: only the frames of a
# traceback, and only heard when the traceback's exception line is missing (cut off),
# unknown, or an interrupt; the deepest frame matched speaks. `tail`: only the last
# TAIL_LINES lines of the output (of its last 16 KiB), read once it has ended, and of those
# only the lines no line signature read as they came and that are not part of a traceback:
# for wordings without a trigger word (they cost nothing while the job runs, and are not
# acted on live). Also the line above a native abort (a `segfault_abort` line: glog's fatal
# message above "*** Check failure stack trace: ***"), when the abort is read, if no line
# signature read it; not by the survivable ones there. A `survivable` tail wording counts
# only where the output ends with it, or goes on with nothing but tracebacks, exception
# lines, failures a line signature knows, or more of it.
LINE_SCOPE, EXCEPTION_SCOPE, FRAME_SCOPE, TAIL_SCOPE = "line", "exception", "frame", "tail"
SCOPES = (LINE_SCOPE, EXCEPTION_SCOPE, FRAME_SCOPE, TAIL_SCOPE)
TAIL_LINES = 40


@dataclass(frozen=True)
class Signature:
    """One catalogue entry, compiled."""

    id: str
    category: str
    pattern: str
    regex: re.Pattern[str]
    meaning: str
    action: str
    fatal: bool
    priority: int
    remedy: str | None
    # Literals (UTF-8) of which every match contains one; lower case when ignore_case.
    # Empty when none could be derived: such a pattern is tried on every line. A line
    # reaches the pattern only when it holds one (the most telling literals are chosen).
    keywords: tuple[bytes, ...]
    ignore_case: bool
    source: str
    # A job can live through it (a caught OOM, a logged import error): a match followed
    # by progress is not a cause of death.
    survivable: bool = False
    scope: str = LINE_SCOPE  # where it is tried: line, exception, frame, tail (see SCOPES)
    # Literals of which every match contains one too, chosen to hold a `prefilter` word
    # where the pattern allows: what is searched for in whole chunks (empty: keywords).
    triggers: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class Catalogue:
    """All enabled signatures, in file order, and the files they came from."""

    signatures: tuple[Signature, ...]
    sources: tuple[str, ...]
    # Short strings searched for in whole chunks before any line is looked at (`prefilter`).
    anchors: tuple[str, ...] = ()

    def get(self, signature_id: str) -> Signature | None:
        """The signature with this id, or None."""
        return next((s for s in self.signatures if s.id == signature_id), None)
