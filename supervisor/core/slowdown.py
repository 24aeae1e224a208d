"""Slowdown alert: an attempt whose epochs run well below its own best speed, for a while.

Thermal throttling, a card that also drives a desktop, or a remedy that costs speed all
look like this; a person wants to know before the ETA quietly doubles.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RATIO = 0.75  # speed below this fraction of the attempt's best counts as slow
WINDOW = 3  # epochs in a row that must be slow
WARMUP = 3  # epochs seen before the window starts counting (first epochs are uneven)


@dataclass
class SlowdownWatch:
    best: float | None = None  # shortest epoch time seen in this attempt
    recent: list[float] = field(default_factory=list)
    alerted: bool = False
    seen: int = 0

    def epoch(self, seconds: float) -> str | None:
        """Feed one epoch time; a message the first time the slowdown is sustained."""
        self.seen += 1
        self.best = seconds if self.best is None else min(self.best, seconds)
        self.recent = [*self.recent, seconds][-WINDOW:]
        slow = self.seen >= WARMUP + WINDOW and all(self.best / s < RATIO for s in self.recent)
        if not slow:
            self.alerted = False
            return None
        if self.alerted:
            return None
        self.alerted = True
        speed = self.best / max(self.recent)
        return (
            f"the last {WINDOW} epochs ran at {speed:.0%} of this attempt's best speed "
            f"({max(self.recent):.1f} s vs {self.best:.1f} s per epoch): thermal throttling, "
            f"a shared card or a slow remedy?"
        )
