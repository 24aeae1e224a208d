"""Keywords: the literals every match of a pattern holds, and the trigger words searched in bulk."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from rsup.supervisor.recognize.catalogue import LINE_SCOPE, Signature

_INLINE_FLAGS_RE = re.compile(r"\(\?[aiLmsux-]+[:)]")
MIN_KEYWORD = 3
ANCHOR_MIN = 2  # trigger literals an anchor must stand for to be searched instead of them


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
        if found and min(len(w) for w in found) >= MIN_KEYWORD:
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
