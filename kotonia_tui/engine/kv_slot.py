"""A KV context and what is in it, so the next prompt evaluates only what changed.

The slot remembers the items it holds (text tokens and image chunks, in order). A new prompt
keeps the longest common prefix of items, removes the rest from the KV cache, and evaluates
the remainder in batches; each batch is a step of the owner thread, so a more urgent call can
run in between. A call that finds, between two of its steps, that another call used the slot
meanwhile stops (`SlotTakenError`) instead of writing into what is now someone else's cache;
the other call kept every batch evaluated so far (the KV is consistent at each step), so a turn
that takes over the prewarm of its prompt part way goes on from the prewarm's progress.

The slot's content can be copied out (`snapshot`) and put back (`load`), for the saved states
that let a conversation resume warm after a restart (engine/resume.py). A state loaded from
disk holds a sliding-window model's (SWA) layers only for the last window of positions, so
such a prefix can be extended but not cut short: `_truncate` checks what the cache still
holds before it keeps a prefix, as llama-server does, and starts over when the window is gone.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace

import llama_cpp
from llama_cpp import _internals as internals

from kotonia_tui.engine.errors import EngineError, SlotTakenError
from kotonia_tui.engine.items import (
    ImageItem,
    PromptItem,
    cells_of,
    common_prefix,
    positions_of,
)
from kotonia_tui.engine.multimodal import Projector

# Prompt tokens evaluated per step of the owner thread. Between two steps a cancel is seen and
# a more urgent call (a reply) goes first, so a step is how long Esc, or a reply arriving
# during a background fold's prompt, waits: small steps, which read a prompt no slower
# (docs/decisions.md D-18, benchmarks/prompt_steps.py).
STEP_TOKENS = 64


@dataclass(frozen=True)
class PrefillStats:
    prompt_cells: int
    reused: int
    evaluated: int
    images: int
    restored: int = 0  # of `reused`: cells a saved state brought (reported once)


class KvSlot:
    """One llama context (sequence 0) and the items it holds."""

    def __init__(
        self,
        ctx: internals.LlamaContext,
        *,
        n_batch: int,
        projector: Projector | None,
        n_swa: int = 0,
    ) -> None:
        self.ctx = ctx
        self.n_batch = n_batch
        self.step_tokens = min(n_batch, STEP_TOKENS)  # prompt tokens per owner-thread step
        self.projector = projector
        self.n_swa = n_swa  # the sliding window of a SWA model (0: none)
        self._batch = internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=False)
        self._items: list[PromptItem] = []
        self._starts: list[int] = []  # position of each item
        self.n_past = 0  # next position
        self.cells = 0  # KV cells in use
        self._dirty = False  # an interrupted prefill left the KV in an unknown state
        self.version = 0  # advanced by every change of the content
        self.state_name: str | None = None  # whose saved state the content continues
        self.saved_version: int | None = None  # the version last written to disk
        self._restored = 0  # cells brought by `load`, not yet reported by a call

    @property
    def n_ctx(self) -> int:
        return int(self.ctx.n_ctx())

    @property
    def items(self) -> tuple[PromptItem, ...]:
        return tuple(self._items)

    def close(self, *, context_too: bool = True) -> None:
        self._batch.close()
        if context_too:
            self.ctx.close()

    def common_prefix_cells(self, items: Sequence[PromptItem]) -> int:
        """KV cells this slot would keep for a prompt of `items` (as `prefill` decides: a
        sliding-window model's restored state that would be cut short keeps nothing)."""
        if self._dirty:
            return 0
        keep = common_prefix(self._items, items)
        if keep == len(items):
            keep -= 1  # the last token is evaluated again
        if 0 <= keep < len(self._items) and not self._window_kept(self._starts[keep]):
            return 0
        return cells_of(self._items[: max(keep, 0)])

    def _truncate(self, keep: int) -> int:
        """Drop items from `keep` on, in the KV too; returns how many items survived."""
        if keep >= len(self._items):
            return len(self._items)
        position = self._starts[keep]
        if not self._window_kept(position) or not self.ctx.kv_cache_seq_rm(0, position, -1):
            # Recurrent models cannot drop a suffix, and a SWA model's restored state has no
            # window before `position`: start over.
            self.reset()
            return 0
        del self._items[keep:]
        del self._starts[keep:]
        self.n_past = position
        self.cells = cells_of(self._items)
        self._restored = min(self._restored, self.cells)
        self._changed()
        return keep

    def _window_kept(self, position: int) -> bool:
        """Whether the cache still holds what a token at `position` attends to."""
        if position == 0 or not self._items:
            return True
        held_from = int(llama_cpp.llama_memory_seq_pos_min(self.ctx.memory, 0))
        if self.n_swa <= 0:
            return held_from <= 0
        # The token at `position` sees the n_swa - 1 positions before it (llama.cpp's mask).
        return held_from <= max(0, position - self.n_swa + 1)

    def reset(self) -> None:
        self.ctx.kv_cache_clear()
        self._items.clear()
        self._starts.clear()
        self.n_past = 0
        self.cells = 0
        self._restored = 0
        self._changed()

    def _changed(self) -> None:
        self.version += 1

    def prefill(
        self,
        items: Sequence[PromptItem],
        *,
        mark: int | None = None,
        on_mark: Callable[[], None] | None = None,
        count_restored: bool = True,
        on_evaluated: Callable[[int], None] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> Generator[None, None, PrefillStats]:
        """Make the KV hold exactly `items`, evaluating only what differs; a step per batch.

        `on_mark()` runs when the slot holds exactly the first `mark` items on the way (a
        batch ends there), never when the slot already held more of them. The cells a saved
        state brought are reported by the first call that reuses them (`count_restored`).
        `on_evaluated(cells)` is told each batch's cells as they are evaluated. When `stop()`
        says so between two batches (the user pressed Esc while the prompt was read), the
        prefill ends there: the slot holds the batches evaluated so far (a consistent prefix
        the next prompt reuses), and the figures say how many were.
        """
        if self._dirty:
            self.reset()
            self._dirty = False
        keep = common_prefix(self._items, items)
        if keep == len(items):
            keep -= 1  # re-evaluate the last token: sampling needs fresh logits
        keep = self._truncate(max(keep, 0))
        reused = self.cells
        restored = min(self._restored, reused)
        if count_restored:
            self._restored = 0
        images = 0
        if on_mark is not None and keep == mark:
            on_mark()
        cells_before = self.cells
        try:
            index = keep
            while index < len(items):
                item = items[index]
                if isinstance(item, ImageItem):
                    self._eval_image(item)
                    images += 1
                    index += 1
                else:
                    run_end = index
                    while (
                        run_end < len(items)
                        and not isinstance(items[run_end], ImageItem)
                        and run_end - index < self.step_tokens
                        and (run_end != mark or run_end == index)
                    ):
                        run_end += 1
                    self._eval_tokens([t for t in items[index:run_end] if isinstance(t, int)])
                    index = run_end
                if on_evaluated is not None:
                    on_evaluated(self.cells - cells_before)
                    cells_before = self.cells
                yield from self._step()
                if on_mark is not None and index == mark:
                    on_mark()
                if stop is not None and index < len(items) and stop():
                    break
        except SlotTakenError:
            raise  # the slot is consistent: whoever took it left it so
        except BaseException:
            # A failed or interrupted prefill leaves the KV in an unknown state. Do not touch
            # the context here: on shutdown it may already be freed; the next prefill clears it.
            self._items.clear()
            self._starts.clear()
            self._dirty = True
            raise
        total = cells_of(items)
        # Stopped part way, only what was evaluated counts (all of it otherwise).
        evaluated = self.cells - reused if index < len(items) else total - reused
        return PrefillStats(total, reused, evaluated, images, restored)

    def _step(self) -> Generator[None, None, None]:
        """A step boundary; after it, stop if another call changed the slot meanwhile."""
        version = self.version
        yield None
        if self.version != version:
            raise SlotTakenError("another call used this context meanwhile")

    def _eval_image(self, item: ImageItem) -> None:
        if self.projector is None:
            raise RuntimeError("image chunk without a projector")
        start = self.n_past
        self.n_past = self.projector.eval_image(item, self.ctx.ctx, start, self.n_batch)
        self._items.append(replace(item, chunk=None))
        self._starts.append(start)
        self.cells += item.cells
        self._changed()

    def _eval_tokens(self, tokens: list[int]) -> None:
        self._batch.set_batch(batch=tokens, n_past=self.n_past, logits_all=False)
        self.ctx.decode(self._batch)
        self._items.extend(tokens)
        self._starts.extend(range(self.n_past, self.n_past + len(tokens)))
        self.n_past += len(tokens)
        self.cells += len(tokens)
        self._changed()

    def accept(self, token: int) -> None:
        """Evaluate one generated token so the next one can be sampled."""
        self._eval_tokens([token])

    # ---- saved states ----------------------------------------------------------------------

    def snapshot(self) -> tuple[tuple[PromptItem, ...], ctypes.Array[ctypes.c_uint8]]:
        """The items held and a copy of the KV state of sequence 0 (a memory copy)."""
        size = int(llama_cpp.llama_state_seq_get_size(self.ctx.ctx, 0))
        buffer = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_seq_get_data(self.ctx.ctx, buffer, size, 0))
        if written != size:
            raise EngineError(f"llama.cpp copied {written} of {size} bytes of the KV state")
        return tuple(self._items), buffer

    def load(
        self, items: Sequence[PromptItem], buffer: ctypes.Array[ctypes.c_uint8], name: str
    ) -> bool:
        """Replace the content with a saved state holding `items`; False (and an empty slot)
        when llama.cpp refuses it (another layout, or no room)."""
        self.reset()
        self._dirty = False
        read = int(llama_cpp.llama_state_seq_set_data(self.ctx.ctx, buffer, len(buffer), 0))
        held_to = int(llama_cpp.llama_memory_seq_pos_max(self.ctx.memory, 0))
        # The last position held must be the items' last (an M-RoPE image's cells all hold its
        # first position, so the check applies when the items end with text, as prompts do).
        ends_in_text = bool(items) and not isinstance(items[-1], ImageItem)
        if read != len(buffer) or (ends_in_text and held_to != positions_of(items) - 1):
            self.reset()
            return False
        position = 0
        for item in items:
            self._items.append(item)
            self._starts.append(position)
            position += item.positions if isinstance(item, ImageItem) else 1
        self.n_past = position
        self.cells = cells_of(items)
        self._restored = self.cells
        self.state_name = name
        self._changed()
        self.saved_version = self.version
        return True
