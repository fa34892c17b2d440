"""Cutting one message too long for a chronicler call into parts that each fit one.

A pasted letter or a 100 KB message cannot be folded with its neighbours: the fold worker
summarizes it on its own, part by part. The parts follow the text's own seams where it has them
(paragraphs, then sentences, in any of the app's languages), and fall back to a cut between
characters only for a run with no seam at all. Nothing is dropped: the parts joined are the
message. Pure logic: sizes come from the token counter it is given.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# Where a part may end (zero-width, so nothing is lost): after a paragraph, a line, a sentence
# (English, Japanese, Chinese), then after a clause or any space.
_SEAMS = (
    re.compile(r"(?<=\n\n)"),
    re.compile(r"(?<=\n)"),
    re.compile(r"(?<=[.!?…]\s)|(?<=[。！？])"),
    re.compile(r"(?<=[，、；：])|(?<=\s)"),
)


def split_text(text: str, max_tokens: int, count: Callable[[str], int]) -> list[str]:
    """`text` cut into consecutive parts of at most `max_tokens` each (as `count` measures a
    part), at the coarsest seams that make them fit. "".join(parts) == text."""
    if max_tokens < 1:
        raise ValueError(f"a part must be allowed at least one token, got {max_tokens}")
    return _split(text, max_tokens, count, 0)


def _split(text: str, max_tokens: int, count: Callable[[str], int], level: int) -> list[str]:
    if count(text) <= max_tokens:
        return [text]
    if level >= len(_SEAMS):
        return _halve(text, max_tokens, count)
    pieces = [p for p in _SEAMS[level].split(text) if p]
    if len(pieces) < 2:
        return _split(text, max_tokens, count, level + 1)
    parts: list[str] = []
    current = ""
    for piece in pieces:
        if count(piece) > max_tokens:
            # A piece larger than a part on its own is cut at the next finer seam; its last
            # part stays open, so what follows (a paragraph's blank line) can join it.
            if current:
                parts.append(current)
            *whole, current = _split(piece, max_tokens, count, level + 1)
            parts.extend(whole)
            continue
        if current and count(current + piece) > max_tokens:
            parts.append(current)
            current = piece
        else:
            current += piece
    if current:
        parts.append(current)
    return parts


def _halve(text: str, max_tokens: int, count: Callable[[str], int]) -> list[str]:
    """A run with no seam (one endless word): cut between characters, in halves."""
    if count(text) <= max_tokens or len(text) < 2:
        return [text]
    middle = len(text) // 2
    return _halve(text[:middle], max_tokens, count) + _halve(text[middle:], max_tokens, count)
