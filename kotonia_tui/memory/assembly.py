"""Prompt assembly: the order that keeps the prompt cache (docs/architecture.md, "Placement rules").

1. system: the character setup only, shared by every conversation with that character;
2. the character's picture as a fixed exchange, when the model can see (also shared);
3. the memory as a synthetic exchange at the head of the history: "the story so far"
   (the ledger, the synopsis, then chapters oldest first, under a header that says a
   character's statement is a record that it was said, not necessarily the truth);
4. the verbatim window, oldest first, ending with the new message;
5. notes for this turn only (keyed lorebook entries, post-history instructions): last, so
   that what changes with recent messages never changes anything before the history.

Between folds, 1-3 are byte-identical, so only the new messages are evaluated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kotonia_tui.domain import Chapter, ChatMessage, ImageInput, Role, StoredLedgerEntry
from kotonia_tui.memory.chronicler import chapter_heading
from kotonia_tui.memory.ledger import render_ledger

MEMORY_HEADER = (
    "[The story so far]\n"
    "This is the record of the story before the messages that follow: the synopsis of the "
    "oldest part, then the chapters, oldest first. A character's statement recorded here is "
    "a record that it was said, not necessarily the truth."
)
MEMORY_ACK = "[I remember the story so far and continue from where it stands.]"
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
        for chapter in self.chapters:
            parts.append(f"## {chapter_heading(chapter)}\n{chapter.text.strip()}")
        return "\n\n".join(parts)


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
    portrait: ImageInput | None = None,
) -> tuple[ChatMessage, ...]:
    messages: list[ChatMessage] = [ChatMessage("system", system_text)]
    if portrait is not None:
        messages.append(
            ChatMessage("user", PORTRAIT_NOTE.format(char=char_name), images=(portrait,))
        )
        messages.append(ChatMessage("assistant", PORTRAIT_ACK))
    messages.extend(memory_exchange(memory_text))
    for line in window:
        if line.role is Role.SYSTEM:
            messages.append(ChatMessage("system", line.text, images=line.images))
        elif line.role is Role.USER:
            messages.append(ChatMessage("user", line.text, name=line.speaker, images=line.images))
        else:
            messages.append(
                ChatMessage("assistant", line.text, name=line.speaker, images=line.images)
            )
    if notes.strip():
        messages.append(ChatMessage("system", notes.strip()))
    return tuple(messages)


def line_cost_text(line: PromptLine) -> str:
    """The text whose token count stands for a message's cost in the prompt."""
    return f"{line.speaker}: {line.text}\n" if line.speaker else f"{line.text}\n\n"
