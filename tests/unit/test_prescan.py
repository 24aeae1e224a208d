"""The bulk pre-scan's word search: find_word finds exactly what bytes.find finds.

Short trigger words are searched by a pattern that starts at their rarest byte and looks
back for the bytes before it (prescan.rare_first); whatever the text and the start offset,
the answer must be bytes.find's: the first offset at or after `pos` where the word starts.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rsup.supervisor.recognize.matcher import Matcher
from rsup.supervisor.recognize.prescan import (
    SHORT_WORD,
    SMALL_REGION,
    Finder,
    find_word,
    rare_first,
)
from rsup.supervisor.recognize.signatures import load_catalogue

WORDS = sorted(Matcher(load_catalogue()).words)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def text_and_word(draw: st.DrawFn) -> tuple[bytes, bytes, int]:
    word = draw(st.sampled_from(WORDS))
    # pieces of the word (its head and tail alone make near misses), other words, noise
    half = len(word) // 2
    piece = st.sampled_from([word, word[:half], word[half:], word[1:], word[:-1], b"\n", b" "])
    other = st.sampled_from(WORDS)
    noise = st.binary(max_size=6)
    parts = draw(st.lists(st.one_of(piece, other, noise), max_size=12))
    text = b"".join(parts)
    pos = draw(st.integers(min_value=0, max_value=len(text) + 2))
    return text, word, pos


@SETTINGS
@given(text_and_word())
def test_find_word_finds_what_bytes_find_finds(case: tuple[bytes, bytes, int]) -> None:
    text, word, pos = case
    assert find_word(text, word, pos) == text.find(word, pos)


def test_every_position_of_overlapping_and_adjacent_words() -> None:
    for word in WORDS:
        text = b"x" + word + word + word[:-1] + b" " + word[1:] + word
        for pos in range(len(text) + 2):
            assert find_word(text, word, pos) == text.find(word, pos), (word, pos)


def test_short_words_take_the_pattern_and_long_ones_bytes_find() -> None:
    assert rare_first(b"rror") is not None
    assert rare_first(b"x" * SHORT_WORD) is None
    k, pattern = rare_first(b" WARN") or (None, None)
    assert k == 1 and pattern is not None  # "W" is rarer than the space before it
    assert pattern.search(b"a WARN b").start() - k == 1
    assert pattern.search(b"aXWARN b") is None  # the byte looked back for must be there


# Fixed words so that every path stays covered whatever the catalogue holds: short words
# sharing their rarest byte ("W"), a long word, and case-folded words.
FIXED = (b" WARN", b"Watchdog", b"WorkNCCL(", b"rror", b"Segmentation fault")
FOLDED = (b"abort", b"oom-kill")
FILLERS = (b"", b"x" * SMALL_REGION, b"W" * SMALL_REGION, b"step 1 loss 0.5\n" * 300)


@st.composite
def regions(
    draw: st.DrawFn, words: tuple[bytes, ...], fillers: tuple[bytes, ...] = (b"",)
) -> tuple[bytes, list[int]]:
    """Words, halves of words and noise, before or after a filler (small, large, dense in
    "W", progress lines), and the positions to ask at."""
    word = st.sampled_from(words)
    piece = word.map(lambda w: w[: len(w) // 2]) | word.map(lambda w: w[len(w) // 2 :])
    parts = b"".join(draw(st.lists(word | piece | st.binary(max_size=6), max_size=12)))
    filler = draw(st.sampled_from(fillers))
    region = draw(st.sampled_from([filler + parts, parts + filler]))
    return region, draw(st.lists(st.integers(0, len(region) + 1), max_size=6))


def assert_finder_agrees(
    region: bytes, positions: list[int], words: tuple[bytes, ...], folded: tuple[bytes, ...]
) -> None:
    """Finder.next at growing offsets (as the classifier asks) is the first word's offset."""
    finder = Finder(region, words, folded)
    lowered = region.lower()
    for pos in sorted(positions):
        hits = [region.find(w, pos) for w in words] + [lowered.find(w, pos) for w in folded]
        hits = [at for at in hits if at >= 0]
        assert finder.next(pos) == (min(hits) if hits else -1)


@SETTINGS
@given(regions(tuple(WORDS)))
def test_finder_gives_the_first_word_at_or_after_each_position(
    case: tuple[bytes, list[int]],
) -> None:
    assert_finder_agrees(*case, tuple(WORDS), ())


@SETTINGS
@given(regions(FIXED + FOLDED + (b"ABORT", b"Abort", b"OOM-Kill"), FILLERS))
def test_finder_paths_small_large_dense_and_folded(case: tuple[bytes, list[int]]) -> None:
    assert_finder_agrees(*case, FIXED, FOLDED)
