"""The memory designs compared on one replayed conversation: what each arm's prompt carries.

- generational (ours, the production path): the prompt `Prompter.preview` builds after the
  replay: setup, synopsis + chapters, the verbatim window.
- rolling: the seed's first design. At each of the same fold points, one summary is rewritten
  from the previous summary and the newly overflowed part, with the chronicler's own rules
  (so the arms differ in structure, not in instructions). It carries the same verbatim window
  as the generational arm, so only the memory differs.
- truncation: a sliding window and no memory: the newest messages that fit the same number of
  history tokens the generational prompt spends on memory + verbatim (equal budget).
- full: the whole conversation verbatim, the upper bound, where it fits a context window.
- generational+recall, truncation+recall: the same prompts, and for each question the
  archive older than the arm's verbatim window recalled as a turn recalls it (chat/recall.py:
  the question is the new message; what the arm's memory states is left out; within the
  profile's recall budget, on top of the arm's own prompt), placed after the history.

Non-generational prompts are assembled with `memory.assembly.assemble_prompt` from the card's
setup; lorebook entries selected per turn are not carried there (the shipped dataset's card has
no lorebook). The card's Character's Note is, where the generational arm's Prompter puts it (in
the history at its depth, or after it at depth 0: `split_notes`), so every arm carries the same
notes (the shipped datasets' cards have none: their prompts are as without the note).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from kotonia_tui.chat.fold.chronicle import NoRoomError, chronicle
from kotonia_tui.chat.fold.worker import MAX_ATTEMPTS
from kotonia_tui.chat.numbering import numbered
from kotonia_tui.chat.prompting import memory_tokens
from kotonia_tui.domain import ChatMessage, Message
from kotonia_tui.engine import (
    Engine,
    GenerationRequest,
)
from kotonia_tui.eval.arguments import RECALL
from kotonia_tui.eval.block_variants import VariantPrompt
from kotonia_tui.eval.replay import Replay
from kotonia_tui.memory.assembly import (
    MEMORY_TITLE,
    PromptLine,
    assemble_prompt,
    in_prompt,
    split_notes,
)
from kotonia_tui.memory.chronicler import Cast, ChronicleRequest
from kotonia_tui.memory.policy import WindowMessage, split_source

# The chronicler's chapter rules, verbatim, under a rolling rewrite's task.
ROLLING_HEADER = (
    f"{MEMORY_TITLE}\n"
    "This is the record of the story before the messages that follow. A character's statement "
    "recorded here is a record that it was said, not necessarily the truth."
)

# Room kept for the question and the answer when deciding whether a prompt fits a window.
QUESTION_ROOM = 192


@dataclass
class ArmPrompt:
    name: str
    messages: tuple[ChatMessage, ...] | None  # None: the arm was skipped (see note)
    engine: Engine | None
    memory_text: str = ""  # as stored (store ids): what recall reads as already stated
    # As the reader reads it: the messages it cites numbered in the conversation, as the chat
    # numbers them (chat/numbering.py); the evidence is read from this.
    shown_memory: str = ""
    memory_tokens: int = 0
    verbatim_tokens: int = 0
    verbatim_messages: int = 0
    prompt_tokens: int = 0
    n_ctx: int = 0
    note: str = ""
    build_seconds: float = 0.0
    build_calls: int = 0
    failures: list[str] = field(default_factory=list)
    recall_from: int | None = None  # recall arms: the archive is what is older than this id
    recall_budget: int = 0  # tokens recalled per question; 0: not a recall arm
    window_ids: frozenset[int] = frozenset()  # stored ids of the messages carried verbatim

    @property
    def skipped(self) -> bool:
        return self.messages is None


def _sent(window: Sequence[Message]) -> frozenset[int]:
    """The ids of the window's messages the prompt carries (imported notes are left out)."""
    return frozenset(m.id for m in window if m.id is not None and in_prompt(m.role))


def _lines(messages: Sequence[Message]) -> list[PromptLine]:
    return [PromptLine(m.role, m.speaker, m.text) for m in messages]


def _prompt(replay: Replay, memory_text: str, window: Sequence[Message]) -> tuple[ChatMessage, ...]:
    setup = replay.setup
    # The card's notes as the generational arm's Prompter carries them (chat/prompting.py):
    # the system ones at depth 0 after the history, before the post-history instructions.
    last, held = split_notes(setup.character_notes)
    return assemble_prompt(
        system_text=setup.system_text,
        char_name=setup.display_name,
        memory_text=memory_text,
        window=_lines(window),
        notes="\n\n".join(part for part in (last, setup.post_history) if part),
        depth_notes=held,
    )


def _cells(engine: Engine, messages: tuple[ChatMessage, ...], replay: Replay) -> int:
    request = GenerationRequest(
        messages=messages,
        max_tokens=1,
        reply_name=replay.setup.display_name,
        user_name=replay.persona.name,
    )
    return engine.prompt_cells(request)


def generational(replay: Replay, engine: Engine) -> ArmPrompt:
    final = replay.final
    messages = final.request.messages
    return ArmPrompt(
        name="generational",
        messages=messages,
        engine=engine,
        memory_text=final.state.memory_text,
        shown_memory=numbered(replay.store, replay.conv_id, final.state.memory_text),
        memory_tokens=final.plan.memory_tokens,
        verbatim_tokens=final.plan.verbatim_tokens,
        verbatim_messages=len(final.window),
        prompt_tokens=_cells(engine, messages, replay),
        n_ctx=engine.n_ctx,
        recall_from=final.window[0].id if final.window else None,
        window_ids=_sent(final.window),
    )


async def rolling(
    replay: Replay,
    engine: Engine,
    *,
    max_output: int,
    progress: Callable[[str], None] | None = None,
) -> ArmPrompt:
    """One summary, rewritten at every fold point of the generational replay."""
    prompter = replay.service.prompter
    budget = prompter.budgets.chapter_source
    cast = Cast(char=replay.setup.display_name, user=replay.persona.name)
    summary: str | None = None
    calls = 0
    failures: list[str] = []
    started = time.monotonic()
    for span in replay.ranges:
        if not span.folded:
            continue
        source = replay.messages(span.first_id, span.last_id)
        # A range too large for one call is rewritten piece by piece, as the worker splits it.
        pieces = split_source(
            [WindowMessage(m.id, prompter.message_tokens(m)) for m in source],
            budget,
        )
        for first, last in pieces:
            part = [m for m in source if first <= m.id <= last]
            text, used = await _rewrite(engine, summary, part, cast, max_output)
            calls += used
            if progress is not None:
                state = "rewritten" if text else "no usable rewrite"
                progress(f"rolling: messages #{first}-#{last} {state} ({used} calls)")
            if text is None:
                failures.append(f"messages #{first}-#{last}: no usable rewrite; kept the previous")
                continue
            summary = text
    memory_text = f"{ROLLING_HEADER}\n\n## Summary\n{summary.strip()}" if summary else ""
    # Numbered as the generational arm's memory is, where it cites in the memory's shapes
    # ("(#12)"); its source's "[#12]" marks stay store ids (no reference shape of
    # memory/numbering.py), which the eval's fresh store numbers alike.
    shown = numbered(replay.store, replay.conv_id, memory_text)
    window = replay.final.window
    messages = _prompt(replay, shown, window)
    return ArmPrompt(
        name="rolling",
        messages=messages,
        engine=engine,
        memory_text=memory_text,
        shown_memory=shown,
        memory_tokens=memory_tokens(engine, shown),
        verbatim_tokens=sum(prompter.message_tokens(m) for m in window),
        verbatim_messages=len(window),
        prompt_tokens=_cells(engine, messages, replay),
        n_ctx=engine.n_ctx,
        build_seconds=time.monotonic() - started,
        build_calls=calls,
        failures=failures,
        window_ids=_sent(window),
    )


async def _rewrite(
    engine: Engine,
    previous: str | None,
    messages: Sequence[Message],
    cast: Cast,
    max_output: int,
) -> tuple[str | None, int]:
    """The rolling rewrite of `previous` with `messages`; None when no attempt was usable.

    Through the same chronicler call as a chapter, with the same retry budget as a chapter
    job: a cut, empty or refused rewrite is tried again, up to the worker's MAX_ATTEMPTS, and
    never used.
    """
    request = ChronicleRequest.rolling(previous, messages, cast)
    calls = 0
    for _attempt in range(MAX_ATTEMPTS):
        try:
            done = await chronicle(engine, request, max_output=max_output, calls=1)
        except NoRoomError:
            return None, calls
        calls += done.calls
        if done.reply.ok:
            return done.reply.text, calls
    return None, calls


def truncation(replay: Replay, engine: Engine, history_budget: int) -> ArmPrompt:
    """The newest messages within `history_budget` tokens (always at least the newest one)."""
    prompter = replay.service.prompter
    kept: list[Message] = []
    used = 0
    for message in reversed(replay.all_messages()):
        cost = prompter.message_tokens(message)
        if kept and used + cost > history_budget:
            break
        kept.append(message)
        used += cost
    kept.reverse()
    messages = _prompt(replay, "", kept)
    return ArmPrompt(
        name="truncation",
        messages=messages,
        engine=engine,
        verbatim_tokens=used,
        verbatim_messages=len(kept),
        prompt_tokens=_cells(engine, messages, replay),
        n_ctx=engine.n_ctx,
        note=f"the newest messages within {history_budget} history tokens (the generational "
        "arm's memory + verbatim)",
        recall_from=kept[0].id if kept else None,
        window_ids=_sent(kept),
    )


def block_variant(
    replay: Replay, engine: Engine, variant: VariantPrompt, *, name: str, recall_budget: int
) -> ArmPrompt:
    """A generational arm whose memory block is another rendering of the same final rows
    (block_variants.py), recalling `recall_budget` tokens (0: none) as its base arm does."""
    messages = _prompt(replay, variant.shown_memory, variant.window)
    return ArmPrompt(
        name=name,
        messages=messages,
        engine=engine,
        memory_text=variant.memory_text,
        shown_memory=variant.shown_memory,
        memory_tokens=variant.memory_tokens,
        verbatim_tokens=variant.verbatim_tokens,
        verbatim_messages=len(variant.window),
        prompt_tokens=_cells(engine, messages, replay),
        n_ctx=engine.n_ctx,
        note=f"the final memory rows rendered as {name} at the generational arm's history "
        "tokens (the window reaches back over what the block leaves)"
        + (f"; recall: up to {recall_budget} tokens per question" if recall_budget else ""),
        recall_from=variant.window[0].id if variant.window else None,
        recall_budget=recall_budget,
        window_ids=_sent(variant.window),
    )


def with_recall(arm: ArmPrompt, budget: int) -> ArmPrompt:
    """The arm's prompt, answering each question with the archive recalled for it: up to
    `budget` tokens, less where the prompt leaves less room beside a question and answer."""
    budget = max(0, min(budget, arm.n_ctx - arm.prompt_tokens - QUESTION_ROOM))
    return replace(
        arm,
        name=arm.name + RECALL,
        recall_budget=budget,
        note=(arm.note + "; " if arm.note else "")
        + f"recall: up to {budget} tokens per question from the messages older than its window",
        failures=list(arm.failures),
    )


EngineFactory = Callable[[int], Awaitable[Engine]]


async def full(
    replay: Replay,
    engine: Engine,
    *,
    bigger: EngineFactory | None,
    max_ctx: int,
    answered: bool = True,
) -> ArmPrompt:
    """The whole conversation verbatim; a larger window is opened if allowed and needed
    (`answered` False: nobody reads it, so it is only measured, never loaded wider)."""
    prompter = replay.service.prompter
    everything = replay.all_messages()
    messages = _prompt(replay, "", everything)
    verbatim = sum(prompter.message_tokens(m) for m in everything)
    cells = _cells(engine, messages, replay)
    needed = cells + QUESTION_ROOM
    arm = ArmPrompt(
        name="full",
        messages=messages,
        engine=engine,
        verbatim_tokens=verbatim,
        verbatim_messages=len(everything),
        prompt_tokens=cells,
        n_ctx=engine.n_ctx,
        window_ids=_sent(everything),
    )
    if needed <= engine.n_ctx:
        arm.note = "fits the evaluation window"
        return arm
    if not answered:
        arm.note = (
            f"needs {needed} tokens, more than the {engine.n_ctx}-token evaluation window: "
            "measured, not answered (evidence only), so no wider load"
        )
        return arm
    # Round up to a multiple of 1024: a tidy window just large enough.
    wanted = -(-needed // 1024) * 1024
    if bigger is None or wanted > max_ctx:
        arm.messages = None
        arm.engine = None
        arm.note = (
            f"skipped: the whole conversation needs {needed} tokens; the evaluation window is "
            f"{engine.n_ctx}"
            + (f" and the full arm may use at most {max_ctx}" if bigger is not None else "")
        )
        return arm
    started = time.monotonic()
    big = await bigger(wanted)
    arm.engine = big
    arm.n_ctx = big.n_ctx
    arm.build_seconds = time.monotonic() - started
    arm.note = (
        f"needs {needed} tokens, more than the {engine.n_ctx}-token evaluation window: "
        f"answered by the same model loaded with n_ctx {big.n_ctx}"
    )
    return arm
