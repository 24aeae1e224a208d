"""Score `rsup diagnose` on the real-log corpus (INDEX.tsv): accuracy, per-category
precision and recall, the confusion matrix, false alarms on benign logs; dev and test apart.

Run it to tune (`python tests/corpus/evaluate.py --split dev --wrong`); `make bench`
(bench_classify) prints both splits. A hang is silence, not a line: a `hang` log counts as
read right when the text alone shows no failure (`none`) or says `hang`.

The `audit` column: a blind read of every log (by people who never saw what rsup makes of
it) marks logs unfit to score: `offdomain` (not an ML job's output: programs that use no ML
framework or library, such as HPC, bioinformatics or database servers, or a system tool
alone such as nvidia-smi; kernel log lines count as in the domain, rsup reads them, and so
do framework tests, benchmarks and samples), `noevidence` (the text
shows nothing of the labelled failure; the label came from the thread's prose), `conflict`
(the text shows another cause more clearly), `edited` (retyped or mixed with prose). They
stay in the corpus, and `--all` scores them too; the figures leave them out.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from rsup.supervisor.recognize.offline import diagnose_file
from rsup.supervisor.recognize.signatures import load_catalogue

CORPUS = Path(__file__).resolve().parent
INDEX = CORPUS / "INDEX.tsv"
ACCEPTED = {"hang": {"hang", "none"}}


@dataclass(frozen=True)
class Entry:
    file: str
    label: str
    split: str
    source: str
    note: str
    audit: str  # empty, or "<flag>: <reason>" for a log left out of the figures


def entries(split: str | None = None, *, audited_out: bool = True) -> list[Entry]:
    """The indexed logs of a split (None: both), without those the audit left out unless
    `audited_out` is false."""
    with INDEX.open(newline="") as handle:
        rows = [Entry(**row) for row in csv.DictReader(handle, delimiter="\t")]
    return [e for e in rows if split in (None, e.split) and not (audited_out and e.audit)]


def right(label: str, got: str) -> bool:
    return got in ACCEPTED.get(label, {label})


def score(split: str | None, *, audited_out: bool = True) -> dict[str, object]:
    catalogue = load_catalogue()
    confusion: dict[str, Counter[str]] = defaultdict(Counter)
    wrong = []
    for entry in entries(split, audited_out=audited_out):
        got = diagnose_file(CORPUS / entry.file, catalogue=catalogue).category
        confusion[entry.label][got] += 1
        if not right(entry.label, got):
            wrong.append({"file": entry.file, "label": entry.label, "got": got})
    total = sum(sum(c.values()) for c in confusion.values())
    correct = total - len(wrong)
    per_category = {}
    for label in sorted(confusion):
        predicted = sum(c[label] for c in confusion.values())
        hits = confusion[label][label] + (confusion[label]["none"] if label == "hang" else 0)
        per_category[label] = {
            "logs": sum(confusion[label].values()),
            "recall": round(hits / max(1, sum(confusion[label].values())), 3),
            "precision": round(confusion[label][label] / predicted, 3) if predicted else None,
        }
    benign = confusion.get("none", Counter())
    left_out = len(entries(split, audited_out=False)) - total
    return {
        "logs": total,
        "left_out_by_audit": left_out,
        "accuracy": round(correct / max(1, total), 4),
        "false_alarms_on_benign": sum(benign.values()) - benign["none"],
        "per_category": per_category,
        "confusion": {label: dict(c) for label, c in sorted(confusion.items())},
        "wrong": wrong,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=["dev", "test"], default=None)
    parser.add_argument("--wrong", action="store_true", help="list the logs read wrong")
    parser.add_argument("--all", action="store_true", help="score the audited-out logs too")
    args = parser.parse_args(argv)
    result = score(args.split, audited_out=not args.all)
    if not args.wrong:
        result.pop("wrong")
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
