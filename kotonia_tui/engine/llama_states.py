"""The in-process engine's saved KV states: the calls that keep the chat context ready for a
restart (`settle`, `restore`) and the steps of a chat call that load and save states.

A part of `LlamaEngine` (a mixin), kept apart so the engine's module stays about the model;
`engine/resume.py` decides which state to load and `state_cache.py` keeps the files. Every
method here runs on the owner thread except `settle` and `restore`, which queue jobs there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from kotonia_tui.engine.base import call_metrics
from kotonia_tui.engine.calls import EngineCall, queue_call
from kotonia_tui.engine.errors import SlotTakenError
from kotonia_tui.engine.formats import RenderedPrompt
from kotonia_tui.engine.items import PromptItem, common_prefix, items_digest, without_chunk
from kotonia_tui.engine.kv_slot import KvSlot
from kotonia_tui.engine.owner import OwnerThread
from kotonia_tui.engine.protocol import Call
from kotonia_tui.engine.resume import Resumer
from kotonia_tui.engine.types import (
    ChatMessage,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    Priority,
    Slot,
    StreamEvent,
)

log = logging.getLogger(__name__)

STABLE_PREFIXES_KEPT = 16  # setups whose stable prefix is remembered (tokenized once)
SAVE_ON_EXIT_S = 15.0  # how long closing waits for the chat context's state to be saved


def _next_messages(request: GenerationRequest) -> tuple[ChatMessage, ChatMessage]:
    """Two different next messages from the user: what a history is followed by next turn."""
    return (
        ChatMessage("user", "A", name=request.user_name),
        ChatMessage("user", "B", name=request.user_name),
    )


class SavedStates:
    """Saved-state calls and steps; needs the engine's owner thread, slots and tokenizer."""

    _owner: OwnerThread
    _slots: dict[Slot, KvSlot]
    _resumer: Resumer | None
    _stable: dict[tuple[str, ...], tuple[PromptItem, ...]]
    render: Callable[[GenerationRequest], RenderedPrompt]
    _items_of: Callable[[RenderedPrompt], AbstractContextManager[list[PromptItem]]]
    _slot: Callable[[Slot], KvSlot]

    def _setup_state(
        self, request: GenerationRequest, items: Sequence[PromptItem]
    ) -> tuple[str, tuple[PromptItem, ...]] | None:
        """The saved-state name and items of the character setup the prompt starts with:
        the items every continuation of its shared messages begins with."""
        assert request.state is not None
        shared = request.messages[: request.state.shared_messages]
        if not shared:
            return None
        probes = (
            ChatMessage("user", "A", name=request.user_name),
            ChatMessage("assistant", "B", name=request.reply_name),
        )
        stable = self._stable_items(request, shared, probes, remember=True)
        if not stable or tuple(items[: len(stable)]) != stable:
            return None
        owner = f"{request.state.setup_owner}-" if request.state.setup_owner else ""
        return f"setup-{owner}{items_digest(stable)}", stable

    def _stable_items(
        self,
        request: GenerationRequest,
        messages: Sequence[ChatMessage],
        probes: tuple[ChatMessage, ChatMessage],
        *,
        remember: bool = False,
    ) -> tuple[PromptItem, ...]:
        """The items a prompt starting with `messages` has, whatever comes next: the common
        prefix of two renderings with different next messages (`probes`). Works for any
        format: a template that changes a past message once another follows is handled too."""
        variants = [
            self.render(replace(request, messages=(*messages, probe), prefill=""))
            for probe in probes
        ]
        key = (*(v.text for v in variants), *(i.key for i in variants[0].images))
        if key in self._stable:
            return self._stable[key]
        lists = []
        for rendered in variants:
            with self._items_of(rendered) as items:
                lists.append([without_chunk(i) for i in items])
        stable = tuple(lists[0][: common_prefix(lists[0], lists[1])])
        if remember:
            if len(self._stable) >= STABLE_PREFIXES_KEPT:
                self._stable.clear()
            self._stable[key] = stable
        return stable

    def settle(self, request: GenerationRequest, after: Call) -> EngineCall:
        """After a turn (`after`, its call), once the model is idle: bring the chat context to
        the stable prefix of `request.messages` (the history the next prompt starts with, as
        it will render it) and save it as `request.state`'s conversation, in the background.

        The next turn then evaluates only its new message, in this process or, from the
        saved state, in the next. Does nothing when the chat context changed since that turn
        (a newer turn, another conversation); stops if a chat call takes it meanwhile.
        """
        background = replace(request, priority=Priority.BACKGROUND, prefill_only=True)
        version = after.slot_version if isinstance(after, EngineCall) else None
        return queue_call(
            self._owner,
            lambda _call: self._settle(background, version),
            priority=int(Priority.BACKGROUND),
        )

    def _settle(
        self, request: GenerationRequest, version: int | None
    ) -> Generator[StreamEvent | None, None, Any]:
        ref, slot = request.state, self._slots.get(Slot.CHAT)
        stats: dict[str, Any] = {}
        if (
            ref is not None
            and slot is not None
            and slot.state_name == ref.name
            and slot.version == version
        ):
            started = time.perf_counter()
            stable = self._stable_items(request, request.messages, _next_messages(request))
            try:
                done = yield from slot.prefill(stable, count_restored=False)
            except SlotTakenError:
                done = None  # a chat call came first; its own settle follows
            if done is not None:
                stats = {
                    "positions": done.prompt_cells,
                    "reused": done.reused,
                    "evaluated": done.evaluated,
                    "prompt_ms": (time.perf_counter() - started) * 1000,
                }
                self._save_chat(slot)
        result = GenerationResult(
            "", "", FinishReason.STOP, call_metrics(request, FinishReason.STOP, **stats)
        )
        yield result
        return result

    def _save_chat(self, slot: KvSlot) -> None:
        """Write the chat context as its conversation's saved state (owner thread)."""
        if self._resumer is None or slot.state_name is None or slot.saved_version == slot.version:
            return
        self._resumer.save(slot, slot.state_name)
        slot.saved_version = slot.version

    def restore(self, request: GenerationRequest) -> EngineCall:
        """When a conversation is opened: load its saved state (or its setup's) into the
        chat context in the background, so the first turn starts warm. Nothing is evaluated;
        the first turn reports what was loaded as `restored`."""
        background = replace(request, priority=Priority.BACKGROUND, prefill_only=True)
        return queue_call(
            self._owner, lambda _call: self._restore(background), priority=int(Priority.BACKGROUND)
        )

    def _restore(self, request: GenerationRequest) -> Generator[StreamEvent | None, None, Any]:
        ref, resumer = request.state, self._resumer
        restored = 0
        slot = self._slot(Slot.CHAT)
        if ref is not None and resumer is not None and slot.state_name != ref.name:
            started = time.perf_counter()
            # What the next turn's prompt starts with, as a settle saved it: the history
            # rendered whole ends otherwise (the reply's name invites the model to write), and
            # a sliding-window model's state must match all but its last item to be used.
            items = list(self._stable_items(request, request.messages, _next_messages(request)))
            setup = self._setup_state(request, items)
            names = [ref.name] + ([setup[0]] if setup is not None else [])
            self._save_chat(slot)  # what the context holds now, before it is replaced
            done = resumer.restore(slot, items, names)
            if done is not None:
                restored = done.cells
                log.info(
                    "opened %s warm in %.0f ms", ref.name, (time.perf_counter() - started) * 1000
                )
        metrics = call_metrics(request, FinishReason.STOP, restored=restored)
        result = GenerationResult("", "", FinishReason.STOP, metrics)
        yield result
        return result

    def _save_before_closing(self) -> None:
        """The chat context's state for its conversation, saved if the last settle did not
        (it runs after any settle still queued; bounded, so closing never hangs on it)."""
        if self._resumer is None or self._owner.closed:
            return

        def save() -> None:
            slot = self._slots.get(Slot.CHAT)
            if slot is not None:
                self._save_chat(slot)

        try:
            self._owner.call(save, priority=int(Priority.BACKGROUND)).result(SAVE_ON_EXIT_S)
        except Exception as exc:
            log.warning("the chat's KV state was not saved on exit: %s", exc)
