"""Where the lines of one rank's own output landed in output.log."""

from __future__ import annotations

from array import array
from bisect import bisect_right

LINE_MAP_MAX = 1 << 20  # rank-line to output.log-line runs kept; older ones are dropped


class LineMap:
    """A rank's line numbers mapped to output.log's, stored as runs of consecutive lines."""

    def __init__(self) -> None:
        self.starts, self.targets = array("Q"), array("Q")
        self.count = 0

    def add(self, global_line: int) -> None:
        self.count += 1
        if not self.starts or global_line - self.targets[-1] != self.count - self.starts[-1]:
            if len(self.starts) >= LINE_MAP_MAX:
                half = LINE_MAP_MAX // 2
                del self.starts[:half], self.targets[:half]
            self.starts.append(self.count)
            self.targets.append(global_line)

    def lookup(self, line: int | None) -> int | None:
        """output.log's line for the rank's `line`; None when unknown or dropped."""
        if not line:
            return None
        i = bisect_right(self.starts, line) - 1
        return None if i < 0 else self.targets[i] + line - self.starts[i]
