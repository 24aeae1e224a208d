"""Add newly gathered real logs to INDEX.tsv, each given its split by its thread's URL.

    python tests/corpus/intake.py ROWS.tsv...

A row is `file<TAB>label<TAB>source<TAB>note` (file relative to tests/corpus/); its audit
column starts empty. A log goes
to the test split when the SHA-1 of its source URL, read as a number, is 0-3 modulo 10
(40 %), else to dev: the split is fixed before anyone reads the log, and every log of one
thread lands on the same side. Rows whose URL or file is indexed already are skipped.
"""

from __future__ import annotations

import csv
import hashlib
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parent
INDEX = CORPUS / "INDEX.tsv"
FIELDS = ("file", "label", "split", "source", "note", "audit")


def split_of(url: str) -> str:
    """The split a thread's logs go to."""
    return "test" if int(hashlib.sha1(url.encode()).hexdigest(), 16) % 10 < 4 else "dev"


def main(argv: list[str]) -> int:
    with INDEX.open(newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    files = {r["file"] for r in rows}
    urls = {r["source"] for r in rows}
    added = 0
    for path in argv:
        for line in Path(path).read_text().splitlines():
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != 4:
                print(f"{path}: skipped, not 4 fields: {line[:80]!r}", file=sys.stderr)
                continue
            file, label, source, note = (p.strip() for p in parts)
            if file in files or source in urls:
                print(f"{path}: skipped, indexed already: {file}", file=sys.stderr)
                continue
            if not (CORPUS / file).is_file():
                print(f"{path}: skipped, no such log: {file}", file=sys.stderr)
                continue
            values = (file, label, split_of(source), source, note, "")
            rows.append(dict(zip(FIELDS, values, strict=True)))
            files.add(file)
            urls.add(source)
            added += 1
    rows.sort(key=lambda r: r["file"])
    with INDEX.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, FIELDS, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"added {added} logs; {len(rows)} in the index")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
