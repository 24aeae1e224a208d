"""The classifier's offline door: a whole log read at once (`rsup diagnose`, preflight, the
real-log corpus). The same LiveClassifier that reads a job's output live (classify.py)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rsup.supervisor.recognize.catalogue import Catalogue
from rsup.supervisor.recognize.classify import LiveClassifier
from rsup.supervisor.recognize.diagnosis import Diagnosis


def diagnose_file(
    path: str | Path, *, catalogue: Catalogue | None = None, progress_seen: bool = False
) -> Diagnosis:
    """Classify a whole log file (raises OSError when it cannot be read)."""
    with open(path, "rb") as log:
        return _diagnose(iter(lambda: log.read(1 << 20), b""), catalogue, progress_seen)


def diagnose_text(
    text: str, *, catalogue: Catalogue | None = None, progress_seen: bool = False
) -> Diagnosis:
    """Classify a whole log given as text."""
    return _diagnose([text.encode("utf-8", "replace")], catalogue, progress_seen)


def _diagnose(chunks: Iterable[bytes], catalogue: Catalogue | None, progress: bool) -> Diagnosis:
    classifier = LiveClassifier(catalogue, progress_seen=progress)
    for chunk in chunks:
        classifier.feed(chunk)
    classifier.close()
    return classifier.verdict()
