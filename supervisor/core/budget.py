"""Time and money: how long a job has been running, what it cost, when to stop it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rsup.supervisor.core.spec import JobSpec


@dataclass(frozen=True)
class Spent:
    seconds: float
    money: float
    currency: str

    def as_dict(self) -> dict[str, Any]:
        return {"elapsed_s": round(self.seconds, 1), "cost": round(self.money, 4),
                "currency": self.currency}  # fmt: skip


def spent(
    spec: JobSpec, first_started: float | None, now: float, ended: float | None = None
) -> Spent:
    """Wall time since the first attempt started: a rented box bills through the backoffs.
    For a finished job, pass `ended` (the end of its last attempt)."""
    until = now if ended is None else ended
    seconds = max(0.0, until - first_started) if first_started is not None else 0.0
    money = seconds / 3600.0 * spec.cost.per_hour
    return Spent(seconds, money, spec.cost.currency)


def over_limit(spec: JobSpec, used: Spent) -> str | None:
    """Why the job must stop now (runtime or budget reached), else None."""
    limit = spec.limits.max_runtime
    if limit is not None and used.seconds >= limit:
        return f"limits.max_runtime reached ({used.seconds / 3600:.2f} h)"
    budget = spec.cost.budget
    if budget is not None and used.money >= budget:
        return f"cost budget reached ({used.money:.2f} of {budget:.2f} {used.currency})"
    return None


def seconds_left(spec: JobSpec, used: Spent) -> float | None:
    """Time until the runtime limit or the budget is reached; None with neither set."""
    left: list[float] = []
    if spec.limits.max_runtime is not None:
        left.append(spec.limits.max_runtime - used.seconds)
    if spec.cost.budget is not None and spec.cost.per_hour > 0:
        rate = spec.cost.per_hour / 3600.0
        left.append((spec.cost.budget - used.money) / rate)
    return max(0.0, min(left)) if left else None


def checkpoint_due(progress: dict[str, Any] | None, now: float, grace: float) -> bool:
    """True when the next epoch end (and its checkpoint) is expected within `grace`."""
    if not progress or not progress.get("epoch_seconds") or not progress.get("at"):
        return False
    next_end = float(progress["at"]) + float(progress["epoch_seconds"])
    return 0 <= next_end - now <= grace
