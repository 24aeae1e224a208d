"""Hang detection as a pure function of (time, progress, CPU time): no sleeping, no psutil.

A job is hung when it makes no progress for the timeout in force (before its first
progress: the startup timeout) while its process tree is idle. A silent but busy tree
(kernel compilation keeps a core at 100 % for many minutes) is hung only after the hard
limit: `hard_factor` times the larger of the timeout in force and the configured one, so
an adapted (shorter) timeout never shortens the patience owed to a busy job.

The timeout adapts to the job's rhythm once it is known: after ADAPT_AFTER progress
intervals that together span at least the configured timeout (a burst of startup lines
says nothing about how long the job may legitimately stay quiet later).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

IDLE_CORES = 0.05  # below this CPU use (in cores) over the window, a silent job is idle
ADAPT_AFTER = 5  # progress intervals seen before the timeout adapts
ADAPT_FACTOR = 4.0  # adapted timeout = this many times the longest interval seen
FLOOR_CAP = 60.0  # the adapted timeout never drops below min(configured timeout, this)
CHECKS_PER_LIMIT = 30  # hang checks within one silence limit
SAMPLES_PER_WINDOW = 60  # CPU samples kept per averaging window (more checks share one)


@dataclass(frozen=True)
class HangConfig:
    timeout: float = 1800.0
    startup_timeout: float = 3600.0
    hard_factor: float = 3.0
    adapted: float | None = None  # carried over from earlier attempts of the same job
    busy_limit: float | None = None  # hang.busy_limit; None: hard_factor x the limit

    @property
    def floor(self) -> float:
        """The lowest timeout adaptation may reach."""
        return min(self.timeout, FLOOR_CAP)


@dataclass(frozen=True)
class HangVerdict:
    silent_for: float
    limit: float  # the limit that was passed: the timeout when idle, the hard limit when busy
    cpu_cores: float
    busy: bool
    why: str = ""  # why the limit had that value

    def describe(self) -> str:
        how = "busy" if self.busy else "idle"
        why = f": {self.why}" if self.why else ""
        return (
            f"no progress for {self.silent_for:.1f} s (limit {self.limit:.1f} s{why}) "
            f"while {how} ({self.cpu_cores:.2f} cores)"
        )


@dataclass
class HangDetector:
    config: HangConfig
    started: float
    last_progress: float | None = None
    first_progress: float | None = None
    longest: float = 0.0
    intervals: int = 0
    samples: deque[tuple[float, float]] = field(default_factory=deque)
    cpu_total: float = 0.0  # tree CPU time, never decreasing (see _accumulate)
    cpu_raw: float | None = None

    @property
    def learned(self) -> bool:
        """Enough progress seen, over a long enough span, to trust the job's own rhythm."""
        if self.first_progress is None or self.last_progress is None:
            return False
        span = self.last_progress - self.first_progress
        return self.intervals >= ADAPT_AFTER and span >= self.config.timeout

    @property
    def timeout(self) -> float:
        """The timeout in force: adapted to this attempt's rhythm, carried over, or configured."""
        if self.learned:
            return max(self.config.floor, ADAPT_FACTOR * self.longest)
        if self.config.adapted is not None:
            return max(self.config.floor, self.config.adapted)
        return self.config.timeout

    def check_every(self, least: float, most: float) -> float:
        """How often a check is worth making: a thirtieth of the limit in force, bounded."""
        return min(most, max(least, self._limits()[0] / CHECKS_PER_LIMIT))

    def progress(self, now: float) -> None:
        """The job made progress (a heartbeat, an epoch line, new output) at `now`."""
        if self.last_progress is not None:
            self.longest = max(self.longest, now - self.last_progress)
            self.intervals += 1
        else:
            self.first_progress = now
        self.last_progress = now

    def check(self, now: float, cpu_seconds: float | None) -> HangVerdict | None:
        """A verdict when the job is hung now, else None. `cpu_seconds`: the tree's CPU time."""
        since = self.last_progress if self.last_progress is not None else self.started
        limit = self._limits()[0]
        silent = now - since
        cores = self._cores(now, cpu_seconds, limit)
        if silent < limit:
            return None
        if cores < IDLE_CORES:
            return HangVerdict(silent, limit, cores, busy=False, why=self.why())
        hard = self.busy_limit()
        if silent < hard:
            return None
        return HangVerdict(silent, hard, cores, busy=True, why=self.why(busy=True))

    def busy_limit(self) -> float:
        """How long a silent job may stay busy: hang.busy_limit, else the factor."""
        if self.config.busy_limit is not None:
            return self.config.busy_limit
        limit, base = self._limits()
        return max(limit, base) * self.config.hard_factor

    def silent_for(self, now: float) -> float:
        since = self.last_progress if self.last_progress is not None else self.started
        return now - since

    def limit(self) -> float:
        """The silence limit in force for an idle job."""
        return self._limits()[0]

    def why(self, busy: bool = False) -> str:
        """Why the limit in force has its value, in words."""
        if busy:
            if self.config.busy_limit is not None:
                return "hang.busy_limit"
            return f"hang.hard_limit_factor ({self.config.hard_factor:g}) x the silence limit"
        if self.last_progress is None:
            return "hang.startup_timeout: no progress yet"
        if self.learned:
            return (f"adapted: {ADAPT_FACTOR:g} x the longest gap between progress seen "
                    f"({self.longest:.0f} s), at least {self.config.floor:g} s")  # fmt: skip
        if self.config.adapted is not None:
            return "adapted to the job's rhythm in an earlier attempt"
        return "hang.timeout"

    def _limits(self) -> tuple[float, float]:
        """(the silence limit in force, the configured one it stands for)."""
        if self.last_progress is None:
            return self.config.startup_timeout, self.config.startup_timeout
        return self.timeout, self.config.timeout

    def _cores(self, now: float, cpu_seconds: float | None, window: float) -> float:
        """Mean cores the tree used over the last `window` seconds (0 when unknown)."""
        if cpu_seconds is None:
            return 0.0
        total = self._accumulate(cpu_seconds)
        if not self.samples or now - self.samples[-1][0] >= window / SAMPLES_PER_WINDOW:
            self.samples.append((now, total))
        horizon = 2 * window  # the mean is over one window; a second one for slack
        while len(self.samples) > 2 and self.samples[1][0] <= now - horizon:
            self.samples.popleft()
        start = self.samples[0]
        for sample in self.samples:
            if sample[0] > now - window:
                break
            start = sample
        elapsed = now - start[0]
        return (total - start[1]) / elapsed if elapsed > 0 else 0.0

    def _accumulate(self, raw: float) -> float:
        # The tree's sum drops when a process leaves it (its CPU time goes with it); only
        # growth counts, so a worker exiting never reads as negative, i.e. idle, CPU use.
        if self.cpu_raw is not None:
            self.cpu_total += max(0.0, raw - self.cpu_raw)
        self.cpu_raw = raw
        return self.cpu_total
