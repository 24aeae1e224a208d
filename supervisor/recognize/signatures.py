"""The failure signature catalogue (config/signatures.yaml): load, check, compile, merge.

Each entry becomes a `Signature` with its regex compiled and the literal keywords of
which every match contains one. The live classifier looks for those keywords in whole
chunks of output first, so ordinary lines never reach the regexes.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rsup.supervisor.core.errors import UsageError
from rsup.supervisor.effects.configdir import config_file
from rsup.workers import constants as C

# When a log holds several failures, the highest priority is the root cause: a cause
# ranks above the consequences it leads to (a GPU fault above the abort it causes).
CATEGORY_PRIORITY: dict[str, int] = {
    C.GPU_MEMORY_FAULT: 90,
    C.HOST_OOM: 88,
    C.HIP_RUNTIME_INIT: 85,
    C.OOM: 80,
    C.CONFIG_ERROR: 75,
    C.DATALOADER_WORKER: 70,
    C.NCCL_DISTRIBUTED: 60,
    C.HANG: 50,
    C.SEGFAULT_ABORT: 30,
    C.KILLED: 25,
    C.UNKNOWN: 10,
}

# Where a signature is tried. `line`: every line outside a traceback's frames (plain lines
# and exception lines). `exception`: only the exception line that ends a traceback (and
# the exception class a notebook traceback's header names). `frame`: only the frames of a
# traceback, and only heard when the traceback's exception line is missing (cut off),
# unknown, or an interrupt; the deepest frame matched speaks.
LINE_SCOPE, EXCEPTION_SCOPE, FRAME_SCOPE = "line", "exception", "frame"
SCOPES = (LINE_SCOPE, EXCEPTION_SCOPE, FRAME_SCOPE)

_REQUIRED = ("id", "category", "pattern", "meaning", "action", "fatal")
_OPTIONAL = ("priority", "remedy", "keywords", "enabled", "survivable", "scope")
_ID_RE = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")
_INLINE_FLAGS_RE = re.compile(r"\(\?[aiLmsux-]+[:)]")
_MIN_KEYWORD = 3
ANCHOR_MIN = 2  # trigger literals an anchor must stand for to be searched instead of them


class SignatureError(UsageError, ValueError):
    """A catalogue file cannot be read or one of its entries is invalid."""


@dataclass(frozen=True)
class Signature:
    """One catalogue entry, compiled."""

    id: str
    category: str
    pattern: str
    regex: re.Pattern[str]
    meaning: str
    action: str
    fatal: bool
    priority: int
    remedy: str | None
    # Literals (UTF-8) of which every match contains one; lower case when ignore_case.
    # Empty when none could be derived: such a pattern is tried on every line. A line
    # reaches the pattern only when it holds one (the most telling literals are chosen).
    keywords: tuple[bytes, ...]
    ignore_case: bool
    source: str
    # A job can live through it (a caught OOM, a logged import error): a match followed
    # by progress is not a cause of death.
    survivable: bool = False
    scope: str = LINE_SCOPE  # where it is tried: line, exception, frame (see SCOPES)
    # Literals of which every match contains one too, chosen to hold a `prefilter` word
    # where the pattern allows: what is searched for in whole chunks (empty: keywords).
    triggers: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class Catalogue:
    """All enabled signatures, in file order, and the files they came from."""

    signatures: tuple[Signature, ...]
    sources: tuple[str, ...]
    # Short strings searched for in whole chunks before any line is looked at (`prefilter`).
    anchors: tuple[str, ...] = ()

    def get(self, signature_id: str) -> Signature | None:
        """The signature with this id, or None."""
        return next((s for s in self.signatures if s.id == signature_id), None)


def load_catalogue(path: Path | None = None, extra: Sequence[Path] = ()) -> Catalogue:
    """Load the catalogue at `path` (default config/signatures.yaml), merging `extra` over it.

    An extra entry with an existing id replaces that entry; `enabled: false` removes it.
    """
    files = [path or config_file("signatures.yaml"), *extra]
    entries: dict[str, dict[str, Any]] = {}
    anchors: dict[str, None] = {}
    for file in files:
        file_entries, file_anchors = _read_file(file)
        anchors.update(dict.fromkeys(file_anchors))
        for entry in file_entries:
            entries.pop(entry["id"], None)  # a replaced entry moves to the end
            entries[entry["id"]] = entry
    prefer = tuple(anchors)
    signatures = tuple(
        _compile(e, prefer) for e in entries.values() if e.get("enabled", True) is not False
    )
    return Catalogue(signatures, tuple(str(f) for f in files), prefer)


def user_files() -> list[Path]:
    """Existing user catalogues merged over the defaults, system-wide first."""
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    candidates = [Path("/etc/rsup/signatures.yaml"), Path(xdg) / "rsup" / "signatures.yaml"]
    return [p for p in candidates if p.is_file()]


@functools.lru_cache(maxsize=1)
def default_catalogue() -> Catalogue:
    """The default catalogue plus user files, loaded once (``cache_clear()`` to reload)."""
    return load_catalogue(extra=user_files())


def trigger_words(
    fatal: Sequence[Signature], anchors: Sequence[str], extra: Iterable[bytes] = ()
) -> tuple[tuple[bytes, ...], tuple[bytes, ...], bool]:
    """Words, one of which is in every fatal line: exact, lower-cased, and whether every
    line must be matched anyway (a pattern with no keyword).

    An anchor (a `prefilter` word) stands in for the trigger literals containing it when
    there are enough of them: each word searched costs a pass over the chunk.
    """
    fatal = [sig for sig in fatal if sig.scope == LINE_SCOPE]
    every_line = any(not sig.keywords for sig in fatal)
    exact = {*extra, *(w for s in fatal if not s.ignore_case for w in s.triggers or s.keywords)}
    folded = {w for s in fatal if s.ignore_case for w in s.triggers or s.keywords}
    return _stand_in(exact, anchors), _stand_in(folded, [a.lower() for a in anchors]), every_line


def _stand_in(words: set[bytes], anchors: Sequence[str]) -> tuple[bytes, ...]:
    encoded = (a.encode("utf-8") for a in anchors)
    chosen = [a for a in encoded if sum(a in w for w in words) >= ANCHOR_MIN]
    words = {next((a for a in chosen if a in w), w) for w in words}
    # A word containing another is redundant: finding the shorter one suffices.
    return tuple(sorted(w for w in words if not any(o != w and o in w for o in words)))


def _read_file(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The entries and the prefilter anchors of one catalogue file."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise SignatureError(f"{path}: cannot read: {err.strerror or err}") from err
    except yaml.YAMLError as err:
        raise SignatureError(f"{path}: not valid YAML: {err}") from err
    if document is None:
        return [], []
    if not isinstance(document, dict) or not isinstance(document.get("signatures"), list):
        raise SignatureError(f"{path}: expected a mapping with a 'signatures' list")
    unknown = sorted(set(document) - {"version", "prefilter", "signatures"})
    if unknown:
        raise SignatureError(f"{path}: unknown top-level key(s): {', '.join(map(str, unknown))}")
    anchors = document.get("prefilter") or []
    if not isinstance(anchors, list) or not all(
        isinstance(a, str) and len(a) >= _MIN_KEYWORD for a in anchors
    ):
        raise SignatureError(f"{path}: 'prefilter' must list strings of 3 characters or more")
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, raw in enumerate(document["signatures"], start=1):
        entry = _check_entry(raw, f"{path}: entry {index}")
        if entry["id"] in seen:
            raise SignatureError(f"{path}: entry {index}: duplicate id {entry['id']!r}")
        seen.add(entry["id"])
        entry["_where"] = f"{path}: entry {index} ({entry['id']})"
        entries.append(entry)
    return entries, anchors


def _check_entry(raw: object, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise SignatureError(f"{where}: expected a mapping, got {type(raw).__name__}")
    entry: dict[str, Any] = dict(raw)
    ident = entry.get("id")
    if not isinstance(ident, str) or not _ID_RE.match(ident):
        raise SignatureError(f"{where}: 'id' must match [a-z0-9][a-z0-9._-]*, got {ident!r}")
    where = f"{where} ({ident})"
    if entry.get("enabled", True) is False and set(entry) <= {"id", "enabled"}:
        return entry  # a user file switching a default entry off
    unknown = sorted(set(entry) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise SignatureError(f"{where}: unknown field(s): {', '.join(unknown)}")
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise SignatureError(f"{where}: missing field(s): {', '.join(missing)}")
    _check_types(entry, where)
    return entry


def _check_types(entry: dict[str, Any], where: str) -> None:
    if entry["category"] not in CATEGORY_PRIORITY:
        known = ", ".join(CATEGORY_PRIORITY)
        raise SignatureError(f"{where}: unknown category {entry['category']!r} (known: {known})")
    for key in ("pattern", "meaning", "action"):
        if not isinstance(entry[key], str) or not entry[key].strip():
            raise SignatureError(f"{where}: {key!r} must be a non-empty string")
    if not isinstance(entry["fatal"], bool):
        raise SignatureError(f"{where}: 'fatal' must be true or false")
    priority = entry.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 100:
        raise SignatureError(f"{where}: 'priority' must be an integer from 0 to 100")
    if entry.get("remedy") is not None and not isinstance(entry["remedy"], str):
        raise SignatureError(f"{where}: 'remedy' must be a string")
    keywords = entry.get("keywords", [])
    if not isinstance(keywords, list) or not all(isinstance(k, str) and k for k in keywords):
        raise SignatureError(f"{where}: 'keywords' must be a list of non-empty strings")
    for flag in ("enabled", "survivable"):
        if not isinstance(entry.get(flag, True), bool):
            raise SignatureError(f"{where}: {flag!r} must be true or false")
    if entry.get("scope", LINE_SCOPE) not in SCOPES:
        raise SignatureError(f"{where}: 'scope' must be one of: {', '.join(SCOPES)}")
    try:
        re.compile(entry["pattern"])
    except re.error as err:
        raise SignatureError(f"{where}: bad pattern {entry['pattern']!r}: {err}") from err


def _compile(entry: dict[str, Any], prefer: Sequence[str]) -> Signature:
    pattern: str = entry["pattern"]
    ignore_case = pattern.startswith("(?i)")
    given = entry.get("keywords")
    words = list(given) if given else derive_keywords(pattern)
    triggers = derive_keywords(pattern, prefer) or words
    if ignore_case:
        words = [w.lower() for w in words] if all(w.isascii() for w in words) else []
        triggers = [w.lower() for w in triggers] if all(w.isascii() for w in triggers) else []
    return Signature(
        id=entry["id"],
        category=entry["category"],
        pattern=pattern,
        regex=re.compile(pattern),
        meaning=entry["meaning"].strip(),
        action=entry["action"].strip(),
        fatal=entry["fatal"],
        priority=entry.get("priority") or CATEGORY_PRIORITY[entry["category"]],
        remedy=(entry.get("remedy") or "").strip() or None,
        keywords=tuple(w.encode("utf-8") for w in words),
        ignore_case=ignore_case,
        source=entry["_where"],
        survivable=entry.get("survivable", False),
        scope=entry.get("scope", LINE_SCOPE),
        triggers=tuple(w.encode("utf-8") for w in triggers) if words else (),
    )


def derive_keywords(pattern: str, prefer: Sequence[str] = ()) -> list[str]:
    """Literals of which every match of `pattern` contains one; [] when none is certain.

    A small reading of the regex: top-level alternatives each need a literal; within a
    sequence the literal run or mandatory group chosen is one whose literals all contain
    a `prefer` string if possible, else the longest. Anything unusual (inline flags other
    than a leading (?i)) gives [] and the pattern is simply tried on every line.
    """
    body = pattern[4:] if pattern.startswith("(?i)") else pattern
    if _INLINE_FLAGS_RE.search(body):
        return []
    return _alternation(body, tuple(prefer)) or []


def _alternation(text: str, prefer: tuple[str, ...]) -> list[str] | None:
    words: list[str] = []
    for alternative in _split_top(text):
        found = _sequence(alternative, prefer)
        if found is None:
            return None
        words.extend(found)
    return sorted(set(words))


def _sequence(text: str, prefer: tuple[str, ...]) -> list[str] | None:
    options: list[list[str]] = []
    for is_group, part in _atoms(text):
        found = _alternation(part, prefer) if is_group else [part]
        if found and min(len(w) for w in found) >= _MIN_KEYWORD:
            options.append(found)
    if not options:
        return None

    def score(words: list[str]) -> tuple[bool, int]:
        covered = all(any(a in w for a in prefer) for w in words)
        return covered, min(len(w) for w in words)

    return max(options, key=score)


def _atoms(text: str) -> Iterable[tuple[bool, str]]:
    """(False, literal run) and (True, mandatory group body) items of one sequence."""
    run: list[str] = []
    i = 0
    while i < len(text):
        literal, group, end = _next_atom(text, i)
        optional, after = _quantifier(text, end)
        if literal is not None and not optional:
            run.append(literal)
        # A run ends at anything but a plain literal; a repeated literal may be doubled.
        if literal is None or after > end:
            if run:
                yield False, "".join(run)
            run = []
        if group is not None and not optional:
            yield True, group
        i = after
    if run:
        yield False, "".join(run)


def _next_atom(text: str, i: int) -> tuple[str | None, str | None, int]:
    """(literal char, group body, index after the atom) for the atom at `i`."""
    char = text[i]
    if char == "\\":
        escaped = text[i + 1 : i + 2]
        literal = escaped if escaped and not escaped.isalnum() else None
        return literal, None, i + 2
    if char == "[":
        return None, None, _class_end(text, i)
    if char == "(":
        close = _group_end(text, i)
        inner = text[i + 1 : close]
        mandatory = not inner.startswith("?") or inner.startswith(("?:", "?P<"))
        if inner.startswith("?P<"):
            inner = inner[inner.index(">") + 1 :]
        elif inner.startswith("?:"):
            inner = inner[2:]
        return None, inner if mandatory else None, close + 1
    if char in ".^$|":
        return None, None, i + 1
    return char, None, i + 1


def _quantifier(text: str, i: int) -> tuple[bool, int]:
    """(whether the preceding atom may be absent, index after its quantifier)."""
    if i >= len(text) or text[i] not in "*+?{":
        return False, i
    optional = text[i] != "+"
    if text[i] == "{":
        close = text.find("}", i)
        minimum = text[i + 1 : close].split(",")[0] if close > 0 else ""
        optional = not (minimum.isdigit() and int(minimum) > 0)
        i = close if close > 0 else i
    i += 1
    if i < len(text) and text[i] in "?+":
        i += 1  # lazy or possessive
    return optional, i


def _class_end(text: str, i: int) -> int:
    j = i + 1
    if text[j : j + 1] == "^":
        j += 1
    if text[j : j + 1] == "]":
        j += 1
    while j < len(text) and text[j] != "]":
        j += 2 if text[j] == "\\" else 1
    return j + 1


def _group_end(text: str, i: int) -> int:
    depth, j = 0, i
    while j < len(text):
        char = text[j]
        if char == "\\":
            j += 2
            continue
        if char == "[":
            j = _class_end(text, j)
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return j
        j += 1
    return len(text)


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    start, j = 0, 0
    while j < len(text):
        char = text[j]
        if char == "\\":
            j += 2
        elif char == "[":
            j = _class_end(text, j)
        elif char == "(":
            j = _group_end(text, j) + 1
        else:
            if char == "|":
                parts.append(text[start:j])
                start = j + 1
            j += 1
    parts.append(text[start:])
    return parts
