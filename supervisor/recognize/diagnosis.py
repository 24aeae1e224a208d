"""What the classifier reports: a fatal line as soon as it is complete, and a log's root cause."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Finding:
    """A fatal line, reported as soon as it is complete."""

    signature: str
    category: str
    line: int
    text: str
    survivable: bool = False  # progress that advances after it excuses it


@dataclass(frozen=True)
class Diagnosis:
    """The root cause of a log. Evidence is (line, text); line 0 means outside the log."""

    category: str
    signature: str | None = None
    evidence: list[tuple[int, str]] = field(default_factory=list)
    line: int | None = None
    remedy: str | None = None
    meaning: str | None = None
    action: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The `rsup diagnose --json` document."""
        evidence = [{"line": n, "text": t} for n, t in self.evidence]
        return {**asdict(self), "evidence": evidence}
