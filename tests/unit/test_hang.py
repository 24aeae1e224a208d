"""Hang detection with time passed in: idle and busy silence, startup, adaptation."""

from __future__ import annotations

import pytest
from rsup.supervisor.core.hang import FLOOR_CAP, IDLE_CORES, HangConfig, HangDetector, HangVerdict

STEP = 0.5  # the daemon's check period


class Clock:
    """Drives one detector the way the monitor does: a check every STEP seconds."""

    def __init__(self, config: HangConfig, cores: float = 0.0) -> None:
        self.now = 1000.0
        self.cpu = 0.0
        self.cores = cores
        self.detector = HangDetector(config, self.now)

    def run_until(self, end: float) -> HangVerdict | None:
        """Advance to `end` (relative to start), checking on the way; the first verdict."""
        target = self.detector.started + end
        while self.now + STEP <= target + 1e-9:
            self.now += STEP
            self.cpu += self.cores * STEP
            verdict = self.detector.check(self.now, self.cpu)
            if verdict is not None:
                return verdict
        return None

    def progress_every(self, interval: float, times: int) -> None:
        for _ in range(times):
            self.run_until(self.now - self.detector.started + interval)
            self.detector.progress(self.now)

    @property
    def elapsed(self) -> float:
        return self.now - self.detector.started


def after_progress(config: HangConfig, cores: float = 0.0) -> Clock:
    clock = Clock(config, cores)
    clock.detector.progress(clock.now)
    return clock


def test_idle_silence_is_a_hang_at_the_timeout() -> None:
    clock = after_progress(HangConfig(timeout=10, startup_timeout=100))
    verdict = clock.run_until(30)
    assert verdict is not None and not verdict.busy
    assert verdict.silent_for == pytest.approx(10)
    assert verdict.limit == 10 and verdict.cpu_cores < IDLE_CORES
    assert "no progress for 10.0 s (limit 10.0 s: hang.timeout) while idle" in verdict.describe()


def test_not_a_hang_just_before_the_timeout() -> None:
    detector = HangDetector(HangConfig(timeout=10, startup_timeout=100), 0.0)
    detector.progress(5.0)
    assert detector.check(14.99, 0.0) is None
    assert detector.check(15.0, 0.0) is not None


def test_busy_silence_is_not_a_hang_before_the_hard_limit() -> None:
    clock = after_progress(HangConfig(timeout=10, startup_timeout=100, hard_factor=3), cores=1.0)
    assert clock.run_until(29.5) is None
    verdict = clock.run_until(40)
    assert verdict is not None and verdict.busy
    assert verdict.silent_for == pytest.approx(30)
    assert verdict.limit == 30 and verdict.cpu_cores == pytest.approx(1.0)
    assert "while busy (1.00 cores)" in verdict.describe()


def test_a_busy_job_that_goes_idle_is_a_hang_once_the_window_is_idle() -> None:
    clock = after_progress(HangConfig(timeout=10, startup_timeout=100), cores=1.0)
    assert clock.run_until(12) is None
    clock.cores = 0.0
    verdict = clock.run_until(40)
    assert verdict is not None and not verdict.busy
    assert 22 <= clock.elapsed < 30  # the last 10 s held no CPU: hung before the hard limit


def test_little_cpu_counts_as_idle() -> None:
    clock = after_progress(HangConfig(timeout=10, startup_timeout=100), cores=IDLE_CORES / 2)
    verdict = clock.run_until(30)
    assert verdict is not None and not verdict.busy and clock.elapsed == pytest.approx(10)


def test_unknown_cpu_counts_as_idle() -> None:
    detector = HangDetector(HangConfig(timeout=10, startup_timeout=100), 0.0)
    detector.progress(0.0)
    verdict = detector.check(10.0, None)
    assert verdict is not None and not verdict.busy and verdict.cpu_cores == 0.0


def test_a_process_leaving_the_tree_does_not_look_idle() -> None:
    """The tree's CPU sum drops when a worker exits; a busy job must stay busy."""
    detector = HangDetector(HangConfig(timeout=10, startup_timeout=100), 0.0)
    detector.progress(0.0)
    cpu = 50.0
    for tick in range(1, 40):
        cpu += 0.5
        if tick == 22:
            cpu -= 40.0  # a DataLoader worker with 40 s of CPU time exited
        assert detector.check(tick * 0.5, cpu) is None


def test_startup_timeout_applies_before_the_first_progress() -> None:
    clock = Clock(HangConfig(timeout=5, startup_timeout=20))
    assert clock.run_until(19.5) is None
    verdict = clock.run_until(30)
    assert verdict is not None and verdict.limit == 20 and clock.elapsed == pytest.approx(20)


def test_busy_startup_gets_the_hard_limit_of_the_startup_timeout() -> None:
    clock = Clock(HangConfig(timeout=5, startup_timeout=20, hard_factor=3), cores=1.0)
    assert clock.run_until(59.5) is None
    verdict = clock.run_until(70)
    assert verdict is not None and verdict.busy and verdict.limit == 60


def test_timeout_applies_once_progress_came() -> None:
    clock = Clock(HangConfig(timeout=5, startup_timeout=20))
    clock.run_until(15)
    clock.detector.progress(clock.now)
    verdict = clock.run_until(40)
    assert verdict is not None and verdict.limit == 5 and clock.elapsed == pytest.approx(20)


def test_progress_postpones_the_hang() -> None:
    clock = after_progress(HangConfig(timeout=10, startup_timeout=100, hard_factor=3))
    clock.progress_every(9, 4)  # only 4 intervals: the timeout has not adapted
    assert clock.detector.timeout == 10
    assert clock.run_until(clock.elapsed + 9.5) is None
    assert clock.run_until(clock.elapsed + 1) is not None


# --- adaptation -----------------------------------------------------------------------


def test_timeout_adapts_after_five_intervals_to_several_times_the_longest() -> None:
    config = HangConfig(timeout=100, startup_timeout=1000)
    clock = after_progress(config)
    clock.progress_every(30, 4)
    assert clock.detector.timeout == 100  # four intervals are not enough
    clock.progress_every(20, 1)
    assert clock.detector.timeout == pytest.approx(4 * 30)


def test_adapted_timeout_shortens_idle_detection() -> None:
    config = HangConfig(timeout=1000, startup_timeout=1000)
    clock = after_progress(config)
    clock.progress_every(200, 5)
    assert clock.detector.timeout == pytest.approx(800)
    start = clock.elapsed
    verdict = clock.run_until(start + 1000)
    assert verdict is not None and verdict.limit == pytest.approx(800)
    assert clock.elapsed - start == pytest.approx(800)


def test_adapted_timeout_never_drops_below_the_floor() -> None:
    small = after_progress(HangConfig(timeout=30, startup_timeout=100))
    small.progress_every(1, 40)
    assert small.detector.timeout == 30  # floor: the configured timeout when under FLOOR_CAP
    large = after_progress(HangConfig(timeout=1800, startup_timeout=3600))
    large.progress_every(300, 6)
    assert large.detector.timeout == pytest.approx(1200)
    quick = HangDetector(HangConfig(timeout=100, startup_timeout=3600), 0.0)
    for t in range(0, 200, 2):
        quick.progress(float(t))
    assert quick.timeout == FLOOR_CAP


def test_a_burst_of_startup_output_does_not_adapt_the_timeout() -> None:
    """Five quick lines say nothing about how long the job may stay quiet later."""
    detector = HangDetector(HangConfig(timeout=1800, startup_timeout=3600), 0.0)
    for t in range(10):
        detector.progress(t * 0.1)
    assert detector.intervals == 9 and detector.timeout == 1800
    assert detector.check(0.9 + 1799, 0.0) is None


def test_adapted_timeout_may_exceed_the_configured_one() -> None:
    clock = after_progress(HangConfig(timeout=10, startup_timeout=100), cores=1.0)
    clock.progress_every(9, 3)
    clock.run_until(clock.elapsed + 25)  # a busy, silent stretch (kernel compilation)
    clock.detector.progress(clock.now)
    clock.progress_every(9, 1)
    assert clock.detector.timeout == pytest.approx(100)


def test_busy_hard_limit_uses_the_configured_timeout_when_adapted_is_shorter() -> None:
    """A first-epoch compile keeps one core busy for minutes: an adapted 60 s timeout must
    not shrink the 3 x 1800 s patience a busy job is owed."""
    config = HangConfig(timeout=1800, startup_timeout=3600, hard_factor=3)
    detector = HangDetector(config, 0.0)
    for t in range(0, 2000, 10):
        detector.progress(float(t))
    assert detector.timeout == FLOOR_CAP
    last = 1990.0
    assert detector.check(last + 61, 0.0) is not None  # idle: the adapted timeout
    busy = HangDetector(config, 0.0)
    for t in range(0, 2000, 10):
        busy.progress(float(t))
    cpu = 0.0
    for tick in range(1, int(5400 / 5)):
        cpu += 5.0
        assert busy.check(last + tick * 5, cpu) is None
    verdict = busy.check(last + 5400, cpu + 5)
    assert verdict is not None and verdict.busy and verdict.limit == 5400


def test_carried_over_adapted_timeout_applies_from_the_start() -> None:
    config = HangConfig(timeout=100, startup_timeout=1000, adapted=70)
    clock = after_progress(config)
    assert clock.detector.timeout == 70
    verdict = clock.run_until(200)
    assert verdict is not None and verdict.limit == 70 and clock.elapsed == pytest.approx(70)


def test_carried_over_adapted_timeout_respects_the_floor_and_yields_to_learning() -> None:
    assert HangDetector(HangConfig(timeout=100, adapted=5), 0.0).timeout == FLOOR_CAP
    detector = HangDetector(HangConfig(timeout=100, adapted=70), 0.0)
    for t in range(0, 250, 50):
        detector.progress(float(t))
    assert detector.timeout == 70  # 4 intervals: still the carried-over value
    detector.progress(250.0)
    assert detector.timeout == 200  # learned in this attempt: 4 x 50


def test_carried_over_timeout_does_not_replace_the_startup_timeout() -> None:
    detector = HangDetector(HangConfig(timeout=100, startup_timeout=1000, adapted=70), 0.0)
    assert detector.check(999, 0.0) is None
    verdict = detector.check(1000, 0.0)
    assert verdict is not None and verdict.limit == 1000


def test_checks_come_at_a_thirtieth_of_the_limit_in_force_within_bounds() -> None:
    slow = HangDetector(HangConfig(timeout=1800, startup_timeout=90), 0.0)
    assert slow.check_every(1.0, 5.0) == 3.0  # startup: 90 s / 30
    slow.progress(10.0)
    assert slow.check_every(1.0, 5.0) == 5.0  # 1800 s / 30 = 60, capped
    quick = HangDetector(HangConfig(timeout=2, startup_timeout=2), 0.0)
    assert quick.check_every(1.0, 5.0) == 1.0  # a tight limit is still checked each second


def test_cpu_samples_stay_bounded_on_a_long_busy_silence() -> None:
    # Five hours of checks every half second, a busy tree, no progress: the averaging keeps
    # a bounded number of samples (what a job running for days would otherwise accumulate).
    clock = Clock(HangConfig(timeout=600, startup_timeout=600), cores=1.0)
    assert clock.run_until(5 * 3600) is not None  # busy: caught at the hard limit
    clock = Clock(HangConfig(timeout=600, startup_timeout=600, hard_factor=100), cores=1.0)
    assert clock.run_until(5 * 3600) is None
    assert len(clock.detector.samples) <= 2 * 60 + 2
    cores = clock.detector._cores(clock.now + STEP, clock.cpu + STEP, 600)
    assert cores == pytest.approx(1.0, rel=0.02)


def test_a_busy_limit_in_the_spec_is_the_busy_ceiling_and_is_named() -> None:
    config = HangConfig(timeout=10.0, startup_timeout=10.0, busy_limit=25.0)
    detector = HangDetector(config, 0.0)
    detector.progress(0.0)
    assert detector.busy_limit() == 25.0 and detector.why(busy=True) == "hang.busy_limit"
    for t in range(1, 25):  # a core busy all along, silent: under the ceiling
        assert detector.check(float(t), float(t)) is None
    verdict = detector.check(26.0, 26.0)
    assert verdict is not None and verdict.busy and verdict.limit == 25.0
    assert "hang.busy_limit" in verdict.describe()


def test_the_limit_says_why_it_has_its_value() -> None:
    detector = HangDetector(HangConfig(timeout=10.0, startup_timeout=30.0), 0.0)
    assert detector.why() == "hang.startup_timeout: no progress yet"
    detector.progress(1.0)
    assert detector.why() == "hang.timeout"
    assert detector.why(busy=True).startswith("hang.hard_limit_factor (3)")
