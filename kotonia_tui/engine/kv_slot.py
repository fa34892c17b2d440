"""A KV context and what is in it, so the next prompt evaluates only what changed.

The slot remembers the items it holds (text tokens and image chunks, in order). A new prompt
keeps the longest common prefix of items, removes the rest from the KV cache, and evaluates
the remainder in batches; each batch is a step of the owner thread, so a more urgent call can
run in between. A call that starts a prefill on a slot another prefill is part way through
takes it over: it keeps every batch evaluated so far (the KV is consistent at each step), and
the earlier prefill stops with SlotTakenOverError when it resumes, touching nothing.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace

import llama_cpp
from llama_cpp import _internals as internals

from kotonia_tui.engine.errors import SlotTakenOverError
from kotonia_tui.engine.multimodal import ImageItem, Projector, PromptItem


@dataclass(frozen=True)
class PrefillStats:
    prompt_cells: int
    reused: int
    evaluated: int
    images: int


def item_cells(item: PromptItem) -> int:
    return item.cells if isinstance(item, ImageItem) else 1


def _item_positions(item: PromptItem) -> int:
    return item.positions if isinstance(item, ImageItem) else 1


class KvSlot:
    """One llama context (sequence 0) and the items it holds."""

    def __init__(
        self,
        ctx: internals.LlamaContext,
        *,
        n_batch: int,
        projector: Projector | None,
    ) -> None:
        self.ctx = ctx
        self.n_batch = n_batch
        self.projector = projector
        self._batch = internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=False)
        self._items: list[PromptItem] = []
        self._starts: list[int] = []  # position of each item
        self.n_past = 0  # next position
        self.cells = 0  # KV cells in use
        self._dirty = False  # an interrupted prefill left the KV in an unknown state
        self._prefills = 0  # prefills started here; one that sees a newer one was taken over

    @property
    def n_ctx(self) -> int:
        return int(self.ctx.n_ctx())

    def close(self, *, context_too: bool = True) -> None:
        self._batch.close()
        if context_too:
            self.ctx.close()

    def common_prefix_cells(self, items: Sequence[PromptItem]) -> int:
        """KV cells this slot could keep for a prompt of `items`."""
        if self._dirty:
            return 0
        return sum(item_cells(i) for i in self._items[: self._common_prefix(items)])

    def _common_prefix(self, items: Sequence[PromptItem]) -> int:
        count = 0
        for held, new in zip(self._items, items, strict=False):
            if held != new:
                break
            count += 1
        return count

    def _truncate(self, keep: int) -> int:
        """Drop items from `keep` on, in the KV too; returns how many items survived."""
        if keep >= len(self._items):
            return len(self._items)
        position = self._starts[keep]
        if not self.ctx.kv_cache_seq_rm(0, position, -1):
            # Recurrent models cannot drop a suffix: start over.
            self.ctx.kv_cache_clear()
            keep, position = 0, 0
        del self._items[keep:]
        del self._starts[keep:]
        self.n_past = position
        self.cells = sum(item_cells(i) for i in self._items)
        return keep

    def reset(self) -> None:
        self.ctx.kv_cache_clear()
        self._items.clear()
        self._starts.clear()
        self.n_past = 0
        self.cells = 0

    def prefill(self, items: Sequence[PromptItem]) -> Generator[None, None, PrefillStats]:
        """Make the KV hold exactly `items`, evaluating only what differs; a step per batch."""
        if self._dirty:
            self.reset()
            self._dirty = False
        self._prefills += 1
        mine = self._prefills
        keep = self._common_prefix(items)
        if keep == len(items):
            keep -= 1  # re-evaluate the last token: sampling needs fresh logits
        keep = self._truncate(max(keep, 0))
        reused = self.cells
        images = 0
        index = keep
        while index < len(items):
            try:
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
                        and run_end - index < self.n_batch
                    ):
                        run_end += 1
                    self._eval_tokens([t for t in items[index:run_end] if isinstance(t, int)])
                    index = run_end
            except BaseException:
                # A failed evaluation leaves the KV in an unknown state. Do not touch the
                # context here: on shutdown it may already be freed; the next prefill clears it.
                self._items.clear()
                self._starts.clear()
                self._dirty = True
                raise
            # A step boundary: every batch so far is in the KV and in `_items`, so a call that
            # takes this slot over now keeps all of it.
            yield None
            if self._prefills != mine:
                raise SlotTakenOverError(
                    f"a more urgent call took this context over after {index} of "
                    f"{len(items)} prompt items and went on from there"
                )
        total = sum(item_cells(i) for i in items)
        return PrefillStats(total, reused, total - reused, images)

    def _eval_image(self, item: ImageItem) -> None:
        if self.projector is None:
            raise RuntimeError("image chunk without a projector")
        start = self.n_past
        self.n_past = self.projector.eval_image(item, self.ctx.ctx, start, self.n_batch)
        self._items.append(replace(item, chunk=None))
        self._starts.append(start)
        self.cells += item.cells

    def _eval_tokens(self, tokens: list[int]) -> None:
        self._batch.set_batch(batch=tokens, n_past=self.n_past, logits_all=False)
        self.ctx.decode(self._batch)
        self._items.extend(tokens)
        self._starts.extend(range(self.n_past, self.n_past + len(tokens)))
        self.n_past += len(tokens)
        self.cells += len(tokens)

    def accept(self, token: int) -> None:
        """Evaluate one generated token so the next one can be sampled."""
        self._eval_tokens([token])

    def free_cells(self) -> int:
        return self.n_ctx - self.cells


def sample_vocab_is_eog(vocab: llama_cpp.llama_vocab_p, token: int) -> bool:
    return bool(llama_cpp.llama_vocab_is_eog(vocab, token))


def positions_of(items: Sequence[PromptItem]) -> int:
    return sum(_item_positions(i) for i in items)
