"""The memory by speaker (issue 31): a page with what each cast member and the player did,
said and are known for, as the chapters and the ledger attribute it (memory/attribution.py)."""

from __future__ import annotations

from collections.abc import Mapping

from textual.content import Content

from kotonia_tui.chat.numbering import chapter_span, evidence_said
from kotonia_tui.memory.attribution import Attributed, CastMemory, SpeakerMemory
from kotonia_tui.tui.literal import literal, literal_line
from kotonia_tui.tui.screens.dialogs import TextScreen


def _item(
    item: Attributed, numbers: dict[int, int], chapters: Mapping[int, tuple[int, ...]]
) -> Content:
    where = evidence_said(numbers.get(i) for i in item.evidence) or "no message"
    source = "ledger"
    if item.chapter_id is not None:
        source = f"from {chapter_span(chapters.get(item.chapter_id))}"
    head = f"{item.label} {item.kind}" if item.label else item.kind
    ended = " · ended" if item.ended else ""
    return Content.assemble(
        ("  • ", ""),
        literal_line(f"{head} · {where} · {source}{ended}", "$text-muted"),
        "\n    ",
        literal(item.text, "$text-muted strike" if item.ended else ""),
    )


def speaker_block(
    speaker: SpeakerMemory, numbers: dict[int, int], chapters: Mapping[int, tuple[int, ...]]
) -> Content:
    """One speaker: what rests on their lines, then what is said about them elsewhere; each
    item's chapter named by its range in `chapters` (`CastMemory.chapter_numbers`)."""
    who = f"{speaker.name} (you)" if speaker.player else speaker.name
    lines = len(speaker.cited_lines)
    parts: list[Content] = [
        Content.assemble(
            literal_line(who, "bold $accent"),
            (f" · {lines} of their lines cited" if lines else " · none of their lines cited", ""),
        )
    ]
    if speaker.said:
        parts.append(Content.styled("did and said (resting on their own lines)", "bold"))
        parts.extend(_item(item, numbers, chapters) for item in speaker.said)
    else:
        parts.append(Content.styled("nothing in the memory rests on their lines yet", "italic"))
    if speaker.about:
        parts.append(Content.styled("about them (from others' lines)", "bold"))
        parts.extend(_item(item, numbers, chapters) for item in speaker.about)
    return Content("\n").join(parts)


def cast_memory_page(memory: CastMemory, numbers: dict[int, int]) -> TextScreen:
    """Each speaker in turn (the cast in its order, then the player); `numbers` gives each
    cited message still stored its place in the conversation (chat/numbering.py
    `cited_numbers`: one not in it was deleted, and is said in words)."""
    blocks = [
        Content.styled(
            "What the chapters and the ledger hold of each speaker: an item belongs to whoever "
            "spoke the lines it cites, so what one member said is not shown as another's.",
            "italic $text-muted",
        )
    ]
    blocks.extend(speaker_block(s, numbers, memory.chapter_numbers) for s in memory.speakers)
    if memory.prose_chapters:
        blocks.append(
            Content.styled(
                f"{memory.prose_chapters} older chapter(s) are prose that cites no lines: "
                "read them in the inspector's Chapters.",
                "italic $text-muted",
            )
        )
    return TextScreen("Memory by speaker", blocks)
