"""The watcher's fault reports: each signature once, and once more when a line it reads is
fatal after lines it read were survivable (rsupd's wedge check waits for a fatal one)."""

from __future__ import annotations

from types import SimpleNamespace

from rsup.supervisor.effects.watcher import AttemptWatcher
from rsup.supervisor.recognize.diagnosis import Finding


def reported(findings: list[Finding], seen: set[tuple[str, bool]]) -> list[dict[str, object]]:
    watcher = SimpleNamespace(faults_seen=seen)
    reports = AttemptWatcher._faults(watcher, findings)  # type: ignore[arg-type]
    return [report.fields for report in reports]


def test_a_fatal_finding_after_a_survivable_one_of_the_same_signature_is_reported() -> None:
    seen: set[tuple[str, bool]] = set()
    lived = Finding("no-cuda-device", "hip_runtime_init", 2, "RuntimeError: ...", True)
    fatal = Finding("no-cuda-device", "hip_runtime_init", 5, "RuntimeError: ...", False)
    first = reported([lived], seen)
    assert [r.get("survivable") for r in first] == [True]
    later = reported([fatal, fatal], seen)
    assert len(later) == 1 and "survivable" not in later[0] and later[0]["line"] == 5
    assert reported([lived, fatal], seen) == []  # each kind once
