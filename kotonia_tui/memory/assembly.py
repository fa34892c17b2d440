"""Prompt assembly: the order that keeps the prompt cache (docs/architecture.md, "Placement rules").

1. system: the character setup only, shared by every conversation with that character;
2. the character's picture as a fixed exchange, when the model can see (also shared);
3. the memory as a synthetic exchange at the head of the history: "the story so far"
   (the ledger, the synopsis, then the chapters oldest first under one heading, each under
   its range and its in-story time, the time said once for a run of chapters with the same
   one: `render_chapters`; under a header
   that says a character's statement is a record that it was said, not necessarily the truth);
4. the verbatim window, oldest first, ending with the new message (system notes imported from
   SillyTavern, like "[Start a new chat]", are left out, as SillyTavern leaves them out; an
   Author's Note or a card's Character's Note with a depth N > 0 sits N messages from its end,
   `place_notes`: docs/architecture.md says what that costs);
5. notes for this turn only (keyed lorebook entries, the Author's Note and a card's system
   note at depth 0, post-history instructions): last, so that what changes with recent
   messages never changes anything before the history.

Between folds, 1-3 are byte-identical, so only the new messages are evaluated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kotonia_tui.domain import (
    Chapter,
    ChatMessage,
    ChatRole,
    DepthNote,
    ImageInput,
    Role,
    StoredLedgerEntry,
)
from kotonia_tui.memory.extract import label_time
from kotonia_tui.memory.ledger import render_ledger

# A reply that reaches this line has left the story for the prompt's own framing: the reply
# stops there (chat/prompting.py; docs/decisions.md D-14).
MEMORY_TITLE = "[The story so far]"
# The block's framing is paid for in verbatim messages: at n_ctx 2048 the earlier two-sentence
# header, the ledger's explanation and a long acknowledgement took 86 of a 392-token block
# (assets/eval/README.md, "A memory block that earns its tokens"), nearly three messages of the
# window. So the framing says only what a reader needs: what the block is, its order, and
# that a statement recorded here is not necessarily the truth.
MEMORY_HEADER = (
    f"{MEMORY_TITLE}\n"
    "Oldest first. A character's statement recorded here is a record that it was said, not "
    "necessarily the truth."
)
CHAPTERS_HEADING = "## Chapters"
MEMORY_ACK = "[I remember the story so far.]"
PORTRAIT_NOTE = "[This is what {char} looks like.]"
PORTRAIT_ACK = "[I see.]"


@dataclass(frozen=True)
class MemoryBlock:
    """The memory the prompt carries. Rendered once when a fold is applied, then kept as is."""

    synopsis: str | None
    chapters: tuple[Chapter, ...]
    ledger: tuple[StoredLedgerEntry, ...] = ()  # the live entries

    @property
    def empty(self) -> bool:
        return not self.synopsis and not self.chapters and not self.ledger

    def render(self) -> str:
        if self.empty:
            return ""
        parts = [MEMORY_HEADER]
        if ledger := render_ledger(self.ledger):
            parts.append(ledger)
        if self.synopsis:
            parts.append(f"## Synopsis\n{self.synopsis.strip()}")
        if self.chapters:
            parts.append(render_chapters(self.chapters))
        return "\n\n".join(parts)


def render_chapters(chapters: Sequence[Chapter]) -> str:
    """The chapters under one heading, oldest first, each under its range and in-story time
    ("#33-#51, Wednesday, 31 October 2018:"), labelled as a quoted synopsis labels its lines.

    One heading, not one per chapter: "## Chapter (messages #33-#51; in-story time: ...)" and
    the blank line before it cost about 13 tokens a chapter, and the embedded chronicler's
    chapters hold 10-30 (issue 28: 59-121 of a 350-420-token block at n_ctx 2048 were
    headings). A time once for a run of chapters with the same one: a date said again tells
    the reader nothing new."""
    lines = [CHAPTERS_HEADING]
    shown: str | None = None  # the in-story time of the chapters before
    for chapter in chapters:
        when = label_time(chapter.story_time) if chapter.story_time != shown else None
        span = f"#{chapter.first_message_id}-#{chapter.last_message_id}"
        lines.append(f"{span}, {when}:" if when else f"{span}:")
        lines.append(chapter.text.strip())
        shown = chapter.story_time or shown
    return "\n".join(lines)


@dataclass(frozen=True)
class PromptLine:
    """A stored message as the prompt needs it."""

    role: Role
    speaker: str
    text: str
    images: tuple[ImageInput, ...] = ()


def memory_exchange(memory_text: str) -> tuple[ChatMessage, ...]:
    if not memory_text:
        return ()
    return (ChatMessage("user", memory_text), ChatMessage("assistant", MEMORY_ACK))


def assemble_prompt(
    *,
    system_text: str,
    char_name: str,
    memory_text: str,
    window: Sequence[PromptLine],
    notes: str = "",
    depth_notes: Sequence[DepthNote] = (),
    portrait: ImageInput | None = None,
) -> tuple[ChatMessage, ...]:
    """The prompt: the history with `depth_notes` placed in it (`place_notes`; the system notes
    at depth 0 are meant to be in `notes` instead, `split_notes`), then `notes`."""
    # The history alone is what the next prompt starts with, up to the first note (the next
    # turn moves a note one line further down, `history_for_next_turn`).
    history = build_history(
        system_text=system_text,
        char_name=char_name,
        memory_text=memory_text,
        window=window,
        depth_notes=depth_notes,
        portrait=portrait,
    )
    return with_notes(history.messages, notes)


@dataclass(frozen=True)
class History:
    """The prompt without this turn's notes, in its parts: the head (setup, picture, memory),
    the lines of the verbatim window as sent, and the notes placed among them by depth."""

    head: tuple[ChatMessage, ...]
    lines: tuple[ChatMessage, ...]
    notes: tuple[DepthNote, ...] = ()
    # Lines after `lines` that the notes' depths count but the history does not send: 1 for
    # a continued reply, which the request carries as its prefill (`place_notes`).
    trailing: int = 0

    @property
    def messages(self) -> tuple[ChatMessage, ...]:
        return (*self.head, *place_notes(self.lines, self.notes, trailing=self.trailing))


def build_history(
    *,
    system_text: str,
    char_name: str,
    memory_text: str,
    window: Sequence[PromptLine],
    depth_notes: Sequence[DepthNote] = (),
    portrait: ImageInput | None = None,
    continued: bool = False,
) -> History:
    """1-4 above in parts. `depth_notes` in SillyTavern's order: the Author's Note first, then
    the cards' (see `place_notes`). `continued`: the window is followed by the reply being
    continued (sent as the request's prefill, not as a line), which the notes' depths count
    as SillyTavern counts it."""
    head: list[ChatMessage] = [ChatMessage("system", system_text)]
    if portrait is not None:
        head.append(ChatMessage("user", PORTRAIT_NOTE.format(char=char_name), images=(portrait,)))
        head.append(ChatMessage("assistant", PORTRAIT_ACK))
    head.extend(memory_exchange(memory_text))
    # Imported notes are never sent, so they never count for a depth.
    lines = tuple(prompt_message(line) for line in window if in_prompt(line.role))
    return History(tuple(head), lines, tuple(depth_notes), trailing=1 if continued else 0)


def split_notes(notes: Sequence[DepthNote]) -> tuple[str, tuple[DepthNote, ...]]:
    """`notes` (the Author's Note first, then the cards') as a prompt carries them: the system
    notes at depth 0, joined by a line break, to go after the history with the turn's other
    notes, where they keep the cache (one part, as SillyTavern makes them one message); and
    the notes the history holds (a depth > 0, or a card's user or assistant note at depth 0,
    which ends the history, after the last message). No notes: ("", ())."""
    last = "\n".join(n.text for n in notes if n.depth == 0 and n.role == "system")
    held = tuple(n for n in notes if n.depth > 0 or n.role != "system")
    return last, held


# SillyTavern's order of the messages injected at one depth, as they read ("most important go
# lower": its `doChatInject` splices system, user, assistant into the reversed chat, so the
# system message ends up nearest the end).
_ROLE_ORDER: tuple[ChatRole, ...] = ("assistant", "user", "system")


def place_notes(
    lines: Sequence[ChatMessage], notes: Sequence[DepthNote], *, trailing: int = 0
) -> tuple[ChatMessage, ...]:
    """`lines` with each note before the last `depth` of them (first, when there are fewer;
    after the last at depth 0), as SillyTavern injects its in-chat prompts (public/script.js
    `doChatInject`, public/scripts/openai.js `populationInjectionPrompts`): at one depth, one
    message per role, assistant then user then system (nearest the end), the notes of a role
    joined by a line break in the order given (the Author's Note, then the cards', as
    SillyTavern's key order puts "2_floating_prompt" before "DEPTH_PROMPT"). A depth counts the
    lines only, never the notes placed after them; notes that land at one place for depths past
    the window's start go deepest first, as SillyTavern stacks them there.

    `trailing`: lines after `lines` that a depth counts but that are not placed here: the
    reply a Continue goes on with, which the request sends as its prefill after the notes.
    SillyTavern injects into the chat with the continued message still in it and moves depth
    0 to depth 1 (`doChatInject(coreChat, isContinue)`), so a note at depth N > 0 sits before
    the last N - 1 of `lines`, and the notes at depths 0 and 1 all go after the last of
    `lines`, right before the continued reply, deepest first.

    A note moves down the history as the history grows: `history_for_next_turn`."""
    at: dict[int, list[DepthNote]] = {}
    for note in notes:
        if note.text.strip():
            index = min(len(lines), max(0, len(lines) + trailing - note.depth))
            at.setdefault(index, []).append(note)
    placed: list[ChatMessage] = []
    for index in range(len(lines) + 1):
        here = sorted(at.get(index, ()), key=lambda n: -n.depth)  # stable: the given order
        for depth in dict.fromkeys(n.depth for n in here):
            for role in _ROLE_ORDER:
                same = [n for n in here if n.depth == depth and n.role == role]
                if same:
                    text = "\n".join(n.text.strip() for n in same)
                    placed.append(ChatMessage(role, text, name=same[0].name))
        if index < len(lines):
            placed.append(lines[index])
    return tuple(placed)


def history_for_next_turn(
    history: History, reply: ChatMessage | None = None
) -> tuple[ChatMessage, ...]:
    """`history` (and the `reply` to it, when there is one) as the next turn's prompt will
    start: its notes moved to where that turn puts them, one line further down (the next
    message makes the last `depth - 1` lines `depth`); a note at depth 0 goes after the next
    message, so it is not in what the next turn starts with. After a Continue, `reply` is the
    continued reply: the line the history's `trailing` counted, now sent as a line.

    The saved KV state of a conversation is this history's stable prefix (engine/resume.py);
    with a note left where this turn put it, the next prompt would differ from the saved state
    at the note, and a sliding-window model's state cannot be cut back there (it was not used
    at all: only the setup's state was loaded)."""
    lines = (*history.lines, reply) if reply is not None else history.lines
    moved = tuple(replace(note, depth=note.depth - 1) for note in history.notes if note.depth > 0)
    return (*history.head, *place_notes(lines, moved))


def in_prompt(role: Role) -> bool:
    """Whether a message of this role goes to the model: imported system notes ("[Start a
    new chat]") are shown in the chat, never sent, as SillyTavern does (a base model given
    them repeated them)."""
    return role is not Role.SYSTEM


def shared_setup_messages(portrait: ImageInput | None) -> int:
    """How many leading messages every conversation with the character shares (1-2 above)."""
    return 3 if portrait is not None else 1


def prompt_message(line: PromptLine) -> ChatMessage:
    """A stored message as the prompt carries it."""
    if line.role is Role.SYSTEM:
        return ChatMessage("system", line.text, images=line.images)
    if line.role is Role.USER:
        return ChatMessage("user", line.text, name=line.speaker, images=line.images)
    return ChatMessage("assistant", line.text, name=line.speaker, images=line.images)


def with_notes(history: tuple[ChatMessage, ...], notes: str) -> tuple[ChatMessage, ...]:
    """The history with this turn's notes after it (5 above), when there are any."""
    if notes.strip():
        return (*history, ChatMessage("system", notes.strip()))
    return history


def line_cost_text(line: PromptLine) -> str:
    """The text whose token count stands for a message's cost in the prompt ("" for a line
    the prompt leaves out: it costs nothing)."""
    if not in_prompt(line.role):
        return ""
    return f"{line.speaker}: {line.text}\n" if line.speaker else f"{line.text}\n\n"
