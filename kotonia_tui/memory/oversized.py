"""Cutting one message too long for a chronicler call into parts that each fit one.

A pasted letter or a 100 KB message cannot be folded with its neighbours: the fold worker
summarizes it on its own, part by part. The parts follow the text's own seams where it has them
(paragraphs, then sentences, in any of the app's languages), and fall back to a cut between
characters only for a run with no seam at all. Nothing is dropped: the parts joined are the
message. Pure logic: sizes come from the token counter it is given.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

Count = Callable[[list[str]], Awaitable[list[int]]]  # many texts' token counts, in order

# Where a part may end (zero-width, so nothing is lost): after a paragraph, a line, a sentence
# (English, Japanese, Chinese), then after a clause or any space.
_SEAMS = (
    re.compile(r"(?<=\n\n)"),
    re.compile(r"(?<=\n)"),
    re.compile(r"(?<=[.!?…]\s)|(?<=[。！？])"),
    re.compile(r"(?<=[，、；：])|(?<=\s)"),
)


async def split_text(text: str, max_tokens: int, count: Count) -> list[str]:
    """`text` cut into consecutive parts of at most `max_tokens` each (as `count` measures a
    part), at the coarsest seams that make them fit. "".join(parts) == text.

    `count(texts)` measures many texts at once (one batch per seam level and per check, so a
    server backend is asked a few times, not once per sentence)."""
    if max_tokens < 1:
        raise ValueError(f"a part must be allowed at least one token, got {max_tokens}")
    (size,) = await count([text])
    return await _split(text, size, max_tokens, count, 0)


async def _split(text: str, size: int, max_tokens: int, count: Count, level: int) -> list[str]:
    if size <= max_tokens:
        return [text]
    if level >= len(_SEAMS):
        return await _halve(text, size, max_tokens, count)
    pieces = [p for p in _SEAMS[level].split(text) if p]
    if len(pieces) < 2:
        return await _split(text, size, max_tokens, count, level + 1)
    sizes = await count(pieces)
    # Pieces joined while their counts add up to a part. A piece larger than a part on its own
    # is cut at the next finer seam; its last part stays open, so what follows (a paragraph's
    # blank line) can join it.
    parts: list[str] = []
    current, used = "", 0
    for piece, piece_size in zip(pieces, sizes, strict=True):
        if piece_size > max_tokens:
            if current:
                parts.append(current)
            *whole, current = await _split(piece, piece_size, max_tokens, count, level + 1)
            parts.extend(whole)
            (used,) = await count([current])
            continue
        if current and used + piece_size > max_tokens:
            parts.append(current)
            current, used = "", 0
        current += piece
        used += piece_size
    if current:
        parts.append(current)
    # Joined, pieces can count a little more than apart (a token across a seam): a part that
    # came out over is cut again, finer.
    checked: list[str] = []
    for part, part_size in zip(parts, await count(parts), strict=True):
        if part_size <= max_tokens:
            checked.append(part)
        else:
            checked.extend(await _split(part, part_size, max_tokens, count, level + 1))
    return checked


async def _halve(text: str, size: int, max_tokens: int, count: Count) -> list[str]:
    """A run with no seam (one endless word): cut between characters, in halves."""
    if size <= max_tokens or len(text) < 2:
        return [text]
    middle = len(text) // 2
    left, right = text[:middle], text[middle:]
    left_size, right_size = await count([left, right])
    return await _halve(left, left_size, max_tokens, count) + await _halve(
        right, right_size, max_tokens, count
    )
