"""One output segment: the cut of an overlong one, the torchrun rank prefix, a finding's text."""

from __future__ import annotations

import re

HEAD = 4096
TAIL = 4096
CUT_MARK = b" [...] "
TEXT_MAX = 500  # characters of a line kept in a finding

# Tags a launcher puts before each line of a process: torchrun --tee's and torch's own
# "[rank0]:", Ray's "(ActorName pid=123, ip=10.0.0.2) ".
RANK_PREFIX = re.compile(rb"(?:\[(?:rank|default)\d+\]: ?|\((?:\w+ )?pid=\d+(?:, ip=[\d.]+)?\) )+")


def after_rank_prefix(segment: bytes) -> tuple[bytes, bool]:
    """The segment without a launcher's tag before it, and whether it had one."""
    prefix = RANK_PREFIX.match(segment) if segment[:1] in b"[(" else None
    return (segment[prefix.end() :], True) if prefix else (segment, False)


def cut(segment: bytes) -> bytes:
    """The segment, or its first HEAD and last TAIL bytes around CUT_MARK when overlong."""
    if len(segment) > HEAD + TAIL:
        return segment[:HEAD] + CUT_MARK + segment[-TAIL:]
    return segment


def text_of(segment: bytes) -> str:
    """The text a finding keeps of a segment: decoded, stripped, at most TEXT_MAX characters."""
    text = segment.decode("utf-8", "replace").rstrip()
    return text if len(text) <= TEXT_MAX else text[: TEXT_MAX - 1] + "…"
