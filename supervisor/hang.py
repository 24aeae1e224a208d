"""Hang detection as a pure function of (time, progress, CPU time): no sleeping, no psutil."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

IDLE_CORES = 0.05  # below this CPU use (in cores) over the window, a silent job is idle
ADAPT_AFTER = 5  # progress intervals seen before the timeout adapts
ADAPT_FACTOR = 4.0  # adapted timeout = this many times the longest interval seen
FLOOR_CAP = 60.0  # the adapted timeout never drops below min(configured timeout, this)


@dataclass(frozen=True)
class HangConfig:
    timeout: float = 1800.0
    startup_timeout: float = 3600.0
    hard_factor: float = 3.0
    adapted: float | None = None  # carried over from earlier attempts of the same job


@dataclass(frozen=True)
class HangVerdict:
    silent_for: float
    limit: float
    cpu_cores: float
    busy: bool

    def describe(self) -> str:
        how = "busy" if self.busy else "idle"
        return (
            f"no progress for {self.silent_for:.1f} s (limit {self.limit:.1f} s) "
            f"while {how} ({self.cpu_cores:.2f} cores)"
        )


@dataclass
class HangDetector:
    config: HangConfig
    started: float
    last_progress: float | None = None
    longest: float = 0.0
    intervals: int = 0
    samples: deque[tuple[float, float]] = field(default_factory=deque)

    @property
    def timeout(self) -> float:
        """The timeout in force: configured, or adapted to the job's own rhythm."""
        if self.intervals < ADAPT_AFTER and self.config.adapted is None:
            return self.config.timeout
        floor = min(self.config.timeout, FLOOR_CAP)
        longest = max(self.longest, 0.0)
        adapted = max(floor, ADAPT_FACTOR * longest)
        if self.config.adapted is not None and self.intervals < ADAPT_AFTER:
            return max(floor, self.config.adapted)
        return adapted

    def progress(self, now: float) -> None:
        if self.last_progress is not None:
            self.longest = max(self.longest, now - self.last_progress)
            self.intervals += 1
        self.last_progress = now

    def check(self, now: float, cpu_seconds: float | None) -> HangVerdict | None:
        """A verdict when the job is hung now, else None. `cpu_seconds`: the tree's CPU time."""
        since = self.last_progress if self.last_progress is not None else self.started
        limit = self.timeout if self.last_progress is not None else self.config.startup_timeout
        silent = now - since
        cores = self._cores(now, cpu_seconds, limit)
        if silent < limit:
            return None
        busy = cores >= IDLE_CORES
        if busy and silent < limit * self.config.hard_factor:
            return None
        return HangVerdict(silent, limit, cores, busy)

    def _cores(self, now: float, cpu_seconds: float | None, window: float) -> float:
        if cpu_seconds is None:
            return 0.0
        self.samples.append((now, cpu_seconds))
        horizon = window * self.config.hard_factor
        while len(self.samples) > 2 and self.samples[1][0] <= now - horizon:
            self.samples.popleft()
        start = next((s for s in self.samples if s[0] >= now - window), self.samples[0])
        for sample in self.samples:
            if sample[0] <= now - window:
                start = sample
        elapsed = now - start[0]
        return (cpu_seconds - start[1]) / elapsed if elapsed > 0 else 0.0
