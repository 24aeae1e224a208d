"""Which fatal signature a line matches: trigger-word gates first, then regexes; warnings veto."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rsup.supervisor.recognize.catalogue import (
    EXCEPTION_SCOPE,
    FRAME_SCOPE,
    LINE_SCOPE,
    TAIL_SCOPE,
    Catalogue,
    Signature,
)
from rsup.supervisor.recognize.keywords import trigger_words


class Matcher:
    """The fatal signatures of a catalogue by scope, and the trigger words that gate them."""

    def __init__(self, cat: Catalogue, extra: Iterable[bytes] = ()):
        fatal = sorted((s for s in cat.signatures if s.fatal), key=lambda s: -s.priority)
        self.fatal = [s for s in fatal if s.scope == LINE_SCOPE]
        self.exception_sigs = [s for s in fatal if s.scope == EXCEPTION_SCOPE]
        self.frame_sigs = [s for s in fatal if s.scope == FRAME_SCOPE]
        self.tail_sigs = [s for s in fatal if s.scope == TAIL_SCOPE]
        self.benign = [s for s in cat.signatures if not s.fatal]
        self.words, self.words_ci, self.every_line = trigger_words(self.fatal, cat.anchors, extra)
        self.groups = trigger_groups(self.fatal, self.words, self.words_ci)
        self.keywordless = {i for i, s in enumerate(self.fatal) if not s.keywords}

    def match(self, body: bytes) -> Signature | None:
        """The highest-priority fatal signature matching, unless a warning matches too."""
        lowered = body.lower() if self.words_ci else body
        picked = set(self.keywordless)
        for word, gate, folded, keywords in self.groups:
            haystack = lowered if folded else body
            if word in haystack and gate.search(haystack):
                for keyword, members in keywords:
                    if keyword in haystack:
                        picked.update(members)
        if not picked:
            return None
        text = body.decode("utf-8", "replace")
        fatal = (self.fatal[i] for i in sorted(picked))  # in priority order
        found = next((s for s in fatal if s.regex.search(text)), None)
        if found is None or self.harmless(body, lowered, text):
            return None
        return found

    def harmless(self, body: bytes, lowered: bytes | None = None, text: str | None = None) -> bool:
        """Whether a `fatal: false` signature matches: the line is known to be harmless
        (`lowered` and `text`, when given, are the line lowered and decoded)."""
        lowered = body.lower() if lowered is None else lowered
        text = body.decode("utf-8", "replace") if text is None else text
        return any(_matches(s, body, lowered, text) for s in self.benign)

    def match_tail(self, body: bytes) -> Signature | None:
        """The highest-priority `scope: tail` signature matching a line among the last of
        the output, unless a warning matches too."""
        if not self.tail_sigs:
            return None
        lowered, text = body.lower(), body.decode("utf-8", "replace")
        found = next((s for s in self.tail_sigs if _matches(s, body, lowered, text)), None)
        if found is None or self.harmless(body, lowered, text):
            return None
        return found

    def match_exception(self, body: bytes) -> Signature | None:
        """The highest-priority `scope: exception` signature matching an exception line."""
        if not self.exception_sigs:
            return None
        text = body.decode("utf-8", "replace")
        return next((s for s in self.exception_sigs if s.regex.search(text)), None)


def _matches(sig: Signature, body: bytes, lowered: bytes, text: str) -> bool:
    if sig.keywords:
        haystack = lowered if sig.ignore_case else body
        if not any(word in haystack for word in sig.keywords):
            return False
    return sig.regex.search(text) is not None


Group = tuple[bytes, re.Pattern[bytes], bool, tuple[tuple[bytes, tuple[int, ...]], ...]]


def trigger_groups(
    fatal: list[Signature], words: tuple[bytes, ...], folded: tuple[bytes, ...]
) -> list[Group]:
    """For each trigger word: a gate matching any keyword of the signatures a trigger
    literal of which holds the word, and for each such keyword the fatal signatures (by
    index) it belongs to. Most lines that hold a trigger word open no gate, and cost one
    search instead of a test per signature."""
    groups: list[Group] = []
    for pool, is_folded in ((words, False), (folded, True)):
        for word in pool:
            owners: dict[bytes, list[int]] = {}
            for i, sig in enumerate(fatal):
                if sig.ignore_case != is_folded:
                    continue
                if any(word in literal for literal in sig.triggers or sig.keywords):
                    for keyword in sig.keywords:
                        owners.setdefault(keyword, []).append(i)
            if owners:
                ordered = sorted(owners, key=len, reverse=True)
                keywords = tuple((k, tuple(owners[k])) for k in ordered)
                groups.append((word, trie_regex(ordered), is_folded, keywords))
    return groups


def trie_regex(words: Iterable[bytes]) -> re.Pattern[bytes]:
    """A regex matching any of `words`, branching on one byte at a time (a trie): at each
    offset only the words that begin with the byte there are tried."""
    trie: dict[int, Any] = {}
    for word in words:
        node = trie
        for byte in word:
            node = node.setdefault(byte, {})
        node[-1] = {}  # a word ends here

    def build(node: dict[int, Any]) -> bytes:
        branches = [re.escape(bytes([b])) + build(node[b]) for b in sorted(node) if b >= 0]
        if not branches:
            return b""
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        return b"(?:" + body + b")?" if -1 in node else body

    return re.compile(build(trie))
