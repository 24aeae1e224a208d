"""The real-log corpus is what its index says: every log present, labelled with a known
category, a public source and a reason; dev and test kept apart per category."""

from __future__ import annotations

from collections import Counter

from rsup.workers import constants as C

from tests.corpus.evaluate import CORPUS, entries

LABELS = {*C.CATEGORIES, "killed"}
AUDIT_FLAGS = {"offdomain", "noevidence", "conflict", "edited"}


def test_every_indexed_log_exists_with_a_source_and_a_reason() -> None:
    rows = entries(audited_out=False)
    assert len(rows) >= 250
    for row in rows:
        assert (CORPUS / row.file).is_file(), row.file
        assert row.file.startswith(f"real/{row.label}/"), row.file
        assert row.label in LABELS and row.split in ("dev", "test")
        assert row.source.startswith("https://") and row.note.strip()
        assert not row.audit or row.audit.split(":")[0] in AUDIT_FLAGS, row.audit


def test_logs_come_from_distinct_threads_and_every_category_is_in_both_splits() -> None:
    rows = entries()  # those scored
    assert len({row.source for row in rows}) >= 200
    per_split = Counter((row.label, row.split) for row in rows)
    for label in {row.label for row in rows}:
        assert per_split[(label, "dev")] and per_split[(label, "test")], label
    assert sum(row.label == "none" for row in rows) >= 30
    per_label = Counter(row.label for row in rows)
    assert min(per_label.values()) >= 15, per_label


def test_no_log_is_indexed_twice_and_none_is_left_out() -> None:
    files = [row.file for row in entries(audited_out=False)]
    assert len(files) == len(set(files))
    on_disk = {str(p.relative_to(CORPUS)) for p in (CORPUS / "real").rglob("*.log")}
    assert on_disk == set(files)
