"""What a prompt is made of, as the KV cache holds it: text tokens and image chunks, in order.

Kept apart from the projector (which needs llama_cpp) so saved-state files can be read and
described without loading the model library.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class ImageItem:
    """An image chunk in a prompt: equal to another when it is the same image, same size."""

    key: str
    cells: int
    positions: int
    chunk: Any = field(default=None, compare=False, hash=False)  # valid during one call only


PromptItem = int | ImageItem


def item_cells(item: PromptItem) -> int:
    """KV cells the item takes (an image: its tokens; M-RoPE images take fewer positions)."""
    return item.cells if isinstance(item, ImageItem) else 1


def item_positions(item: PromptItem) -> int:
    return item.positions if isinstance(item, ImageItem) else 1


def cells_of(items: Sequence[PromptItem]) -> int:
    return sum(item_cells(i) for i in items)


def positions_of(items: Sequence[PromptItem]) -> int:
    return sum(item_positions(i) for i in items)


def common_prefix(held: Sequence[PromptItem], new: Sequence[PromptItem]) -> int:
    """How many leading items the two sequences share."""
    count = 0
    for a, b in zip(held, new, strict=False):
        if a != b:
            break
        count += 1
    return count


def without_chunk(item: PromptItem) -> PromptItem:
    """The item without its mtmd chunk pointer (valid only while its prompt is tokenized)."""
    return replace(item, chunk=None) if isinstance(item, ImageItem) else item


def items_digest(items: Sequence[PromptItem]) -> str:
    """A short stable name for a sequence of items."""
    plain = [i if isinstance(i, int) else [i.key, i.cells, i.positions] for i in items]
    return hashlib.sha256(json.dumps(plain, separators=(",", ":")).encode()).hexdigest()[:24]
