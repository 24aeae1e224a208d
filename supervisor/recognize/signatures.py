"""The failure signature catalogue (config/signatures.yaml): load, check, compile, merge.

Each entry becomes a `Signature` with its regex compiled and the literal keywords of
which every match contains one. The live classifier looks for those keywords in whole
chunks of output first, so ordinary lines never reach the regexes.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from rsup.supervisor.core.errors import UsageError
from rsup.supervisor.effects.configdir import config_file
from rsup.supervisor.recognize.catalogue import CATEGORY_PRIORITY as CATEGORY_PRIORITY
from rsup.supervisor.recognize.catalogue import EXCEPTION_SCOPE as EXCEPTION_SCOPE
from rsup.supervisor.recognize.catalogue import FRAME_SCOPE as FRAME_SCOPE
from rsup.supervisor.recognize.catalogue import LINE_SCOPE as LINE_SCOPE
from rsup.supervisor.recognize.catalogue import SCOPES as SCOPES
from rsup.supervisor.recognize.catalogue import Catalogue as Catalogue
from rsup.supervisor.recognize.catalogue import Signature as Signature
from rsup.supervisor.recognize.keywords import ANCHOR_MIN as ANCHOR_MIN
from rsup.supervisor.recognize.keywords import MIN_KEYWORD
from rsup.supervisor.recognize.keywords import derive_keywords as derive_keywords
from rsup.supervisor.recognize.keywords import trigger_words as trigger_words

_REQUIRED = ("id", "category", "pattern", "meaning", "action", "fatal")
_OPTIONAL = ("priority", "remedy", "keywords", "triggers", "enabled", "survivable", "scope")
_ID_RE = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")


class SignatureError(UsageError, ValueError):
    """A catalogue file cannot be read or one of its entries is invalid."""


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
        isinstance(a, str) and len(a) >= MIN_KEYWORD for a in anchors
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
    for field in ("keywords", "triggers"):
        words = entry.get(field, [])
        if not isinstance(words, list) or not all(isinstance(k, str) and k for k in words):
            raise SignatureError(f"{where}: '{field}' must be a list of non-empty strings")
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
    triggers = entry.get("triggers") or derive_keywords(pattern, prefer) or words
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
