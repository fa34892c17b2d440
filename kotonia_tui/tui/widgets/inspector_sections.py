"""The inspector's sections about the turn itself: its settings, lorebook entries and recall.

The settings say which layer set each value (the profile's are shown plain; a character's or a
conversation's say so) and where the Author's Note, the card's Character's Note (its text too:
nothing else shows it) and the post-history instructions go. The
lorebook section lists every entry that fired on the last turn, the keys it fired on, and
whether it was sent or left out for the lore budget (`lore_budget_ratio` of the window, or the
character's or the conversation's, F9), and, when the scan stopped at its bound (a book that
multiplies: a long recursive chain, many slow regex keys), why and what it did not check. The
recall section lists the archived messages the last turn quoted, the words they matched, and
the ones found but left out (the memory already states them, or over `recall_budget_ratio`).
"""

from __future__ import annotations

from textual.content import Content

from kotonia_tui.chat.chat_settings import GENERATION_FIELDS, LABELS, Layer
from kotonia_tui.chat.inspection import MemoryView
from kotonia_tui.tui.literal import literal_line
from kotonia_tui.tui.render import plural, short_text, tokens

# Enough of a Character's Note to know it by (most are a line or two): only here is its text shown.
NOTE_SHOWN_CHARS = 240


def settings_content(view: MemoryView) -> Content:
    """The settings the next turn runs with; a value set over the profile says by whom."""
    settings = view.settings
    if settings is None:
        return Content.styled("the card is missing: no turn can run", "italic $text-muted")
    parts: list[Content] = []
    for name in GENERATION_FIELDS:
        effective = settings.generation[name]
        value = f"{effective.value:g}" if isinstance(effective.value, float) else effective.value
        item = Content.assemble((f"{LABELS[name]} ", "$text-muted"), (str(value), "bold"))
        if effective.layer is not Layer.PROFILE:
            item = Content.assemble(item, (f" ({effective.layer})", "$accent"))
        parts.append(item)
    lore = settings.lore_budget
    item = Content.assemble(("lore budget ", "$text-muted"), (f"{lore.value:,}", "bold"))
    if lore.layer is not Layer.CONFIG:
        item = Content.assemble(item, (f" ({lore.layer})", "$accent"))
    parts.append(item)
    lines = [Content(" · ").join(parts)]
    if settings.author_note_layer is not None:
        depth = settings.author_note_depth
        where = "after the history" if depth == 0 else f"{plural(depth, 'message')} from the end"
        lines.append(
            Content.assemble(
                ("Author's Note ", "$text-muted"),
                (tokens(view.note_tokens), "bold"),
                (f", {where} ({settings.author_note_layer})", "$text-muted"),
            )
        )
    for note, count in view.character_notes:
        depth = note.depth
        where = "after the history" if depth == 0 else f"{plural(depth, 'message')} from the end"
        owner = f"{note.owner}'s card" if note.owner else "the card's"
        lines.append(
            Content.assemble(
                ("Character's Note ", "$text-muted"),
                (tokens(count), "bold"),
                literal_line(f", {where}, as a {note.role} line ({owner})", "$text-muted"),
            )
        )
        lines.append(literal_line(short_text(note.text, NOTE_SHOWN_CHARS), "italic"))
    if view.post_history_tokens:
        lines.append(
            Content.assemble(
                ("post-history instructions ", "$text-muted"),
                (tokens(view.post_history_tokens), "bold"),
                (", after the history (the card's)", "$text-muted"),
            )
        )
    return Content("\n").join(lines)


def lore_content(view: MemoryView) -> Content:
    """Which entries fired on the last turn, on which keys, and which the budget left out."""
    lore = view.lore
    if lore is None:
        return Content.styled("no turn yet since the app opened", "italic $text-muted")
    if not lore.books:
        return Content.styled(
            "no lorebook: the card has none and no World Info is attached (F9)",
            "italic $text-muted",
        )
    selection = lore.selection
    lines = [
        Content.assemble(
            (f"{selection.tokens:,} of {selection.budget:,} tokens", "bold"),
            literal_line(f" · {', '.join(lore.books)}", "$text-muted"),
        )
    ]
    if not selection.fired:
        lines.append(Content.styled("no entry fired", "italic $text-muted"))
    for firing in selection.fired:
        keys = " + ".join(repr(k) for k in firing.keys) if firing.keys else "constant"
        mark, style = ("✓ ", "$success") if firing.sent else ("✗ ", "$warning")
        lines.append(
            Content.assemble(
                (mark, f"bold {style}"),
                literal_line(firing.label, "bold"),
                literal_line(f" ({firing.book}) on {keys}", "$text-muted"),
                (f" · {tokens(firing.tokens)}", "$text-muted"),
                ("" if firing.sent else f" · left out: {firing.left_out}", style),
            )
        )
    if selection.cut is not None:
        lines.append(literal_line(f"✗ {selection.cut.text()}", "$warning"))
    return Content("\n").join(lines)


def recall_content(view: MemoryView) -> Content:
    """What the last turn recalled from the archive and why (the words each matched, and with
    semantic recall its similarity in meaning and fused score)."""
    recall = view.recall
    by = literal_line(f"matches by {view.recall_by}", "$text-muted") if view.recall_by else None
    if recall is None:
        waiting = Content.styled("no turn yet since the app opened", "italic $text-muted")
        return waiting if by is None else Content("\n").join([waiting, by])
    if recall.budget == 0:
        return Content.styled("off (recall_budget_ratio is 0)", "italic $text-muted")
    lines = [
        Content.assemble(
            (f"{recall.tokens:,} of {recall.budget:,} tokens", "bold"),
            (f" · {plural(len(recall.excerpts), 'excerpt')}", "$text-muted"),
        )
    ]
    if by is not None:
        lines.append(by)
    if not recall.excerpts and not recall.left_out:
        lines.append(Content.styled("nothing older than the window matched", "italic $text-muted"))
    for excerpt in recall.excerpts:
        first = excerpt.lines[0]
        lines.append(
            Content.assemble(
                ("✓ ", "bold $success"),
                (excerpt.marker().rstrip(":"), "bold"),
                literal_line(f" {excerpt.why()}", "$text-muted"),
                "\n  ",
                literal_line(first.render()),
            )
        )
    for left in recall.left_out:
        lines.append(
            Content.assemble(
                ("✗ ", "bold $warning"),
                (f"Message #{left.number}", "bold"),
                literal_line(f" {left.why()}", "$text-muted"),
                (f" · left out: {left.reason}", "$warning"),
            )
        )
    return Content("\n").join(lines)
