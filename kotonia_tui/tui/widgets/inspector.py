"""The memory inspector: what the next prompt will carry, and the figures of the last turn.

Everything comes from `ChatService.memory_view` (bounded reads). The pane is refreshed after each
turn and on fold events; a one-second tick only updates the running fold's elapsed time.
"""

from __future__ import annotations

from datetime import UTC, datetime

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.message import Message as TextualMessage
from textual.widgets import Button, Label, ListItem, ListView, Static

from kotonia_tui.chat.events import RunningFold
from kotonia_tui.chat.inspection import ChapterView, MemoryView
from kotonia_tui.domain import ChapterOrigin, FoldStatus, Role, StoredLedgerEntry
from kotonia_tui.memory.ledger import LeftOut
from kotonia_tui.tui.literal import literal, literal_line
from kotonia_tui.tui.render import age, budget_bar_content, plural, short_text, tokens
from kotonia_tui.tui.widgets.inspector_sections import (
    lore_content,
    recall_content,
    settings_content,
)
from kotonia_tui.tui.widgets.repaint import update_static


def fold_queue(view: MemoryView, running: RunningFold | None, now: datetime) -> Content:
    """The Fold queue section: each open or failed job of the conversation named by its kind
    and the range it folds as the chat numbers messages ("○ queued chapter #5-#9  due now",
    `MemoryView.job_label`), never by its store id, which reads as a message number. The
    running job by the label the worker gave it when it started (`RunningFold.label`): the
    view may have been read before that job was queued, so its numbers may not hold the
    job's range, and the one-second tick that repaints this reads no store."""
    lines: list[Content] = []
    if running is not None and running.job.conversation_id == view.conversation_id:
        lines.append(
            Content.assemble(
                ("● running ", "bold $accent"),
                (running.label, ""),
                (f"  {running.elapsed_s:.0f} s", "$text-muted"),
            )
        )
    running_id = running.job.id if running is not None else None
    for job in view.fold_jobs:
        if job.id == running_id:
            continue
        if job.status is FoldStatus.PENDING:
            wait = (job.not_before - now).total_seconds()
            when = f"due in {wait:.0f} s" if wait > 1 else "due now"
            retry = f" · attempt {job.attempts + 1}" if job.attempts else ""
            lines.append(
                Content.assemble(
                    ("○ queued ", "bold"),
                    (view.job_label(job), ""),
                    (f"  {when}{retry}", "$text-muted"),
                )
            )
            if job.last_error:
                lines.append(literal(f"  last error: {job.last_error}", "$warning"))
        elif job.status is FoldStatus.RUNNING:
            lines.append(
                Content.assemble(("● running ", "bold $accent"), (view.job_label(job), ""))
            )
        elif job.status is FoldStatus.FAILED:
            lines.append(
                Content.assemble(
                    ("✗ failed ", "bold $error"),
                    (view.job_label(job), ""),
                    literal(f"  {job.last_error or ''}", "$error"),
                )
            )
    if view.pending_apply:
        lines.append(Content.styled("landed memory: applied on the next turn", "bold $warning"))
    if not lines:
        lines.append(Content.styled("idle", "italic $text-muted"))
    return Content("\n").join(lines)


def chapter_line(view: ChapterView, memory: MemoryView, now: datetime) -> Content:
    chapter = view.chapter
    parts: list[tuple[str, str]] = [
        # Named by its range, as the ledger and its page name it (not by its store id).
        (memory.chapter_span(chapter.id), "bold"),
        # First after the range: a quote is not a summary, and the end of a line can be
        # past the pane's edge.
        (_ORIGIN_MARKS[chapter.origin], "$warning"),
        (f" · {age(chapter.created_at, now)} · {tokens(chapter.tokens)}", "$text-muted"),
    ]
    if view.applied:
        parts.append((" · applied", "$success"))
    else:
        parts.append((" · next turn", "bold $warning"))
    if chapter.stale:
        parts.append((" · stale", "bold $error"))
    if chapter.in_synopsis:
        parts.append((" · in synopsis", "$text-muted"))
    return Content.assemble(*parts)


# Said after a chapter's range when it is not a summary of it.
_ORIGIN_MARKS = {
    ChapterOrigin.SUMMARY: "",
    ChapterOrigin.QUOTED: " quoted",
    ChapterOrigin.PARTS: " in parts",
}


def ledger_place(entry: StoredLedgerEntry, memory: MemoryView) -> str:
    """Where a live entry stands against the prompt ("" when the prompt carries it)."""
    if entry.id in memory.ledger_in_prompt:
        return ""
    if entry.id in memory.ledger_left_out:
        return f"not in the prompt ({LeftOut.OVER_SHARE})"
    return "next turn"


def ledger_line(entry: StoredLedgerEntry, memory: MemoryView) -> Content:
    """One entry: label, kind, text, evidence, and how long it holds, its chapters named by
    their ranges ("from #1-#4", or "#1-#4 to #5-#9, resolved", or "from #1-#4, retired" when
    its chapter was retired, its messages deleted), its evidence by the messages' numbers (one
    deleted since in words: `MemoryView.evidence`); an ended entry is dimmed, it has left the
    prompt, and a live one the prompt does not carry says so."""
    live = entry.ended_by_chapter_id is None
    evidence = memory.evidence(entry.evidence)
    place = ledger_place(entry, memory) if live else ""
    written = memory.chapter_span(entry.chapter_id)
    if live:
        validity = f"from {written}"
    elif entry.retired_with_its_chapter:
        validity = f"from {written}, retired"
    else:
        how = entry.end.value if entry.end else "ended"
        validity = f"{written} to {memory.chapter_span(entry.ended_by_chapter_id)}, {how}"
    return Content.assemble(
        (f"{entry.label} ", "bold" if live else "$text-muted"),
        (f"{entry.kind.label} · {evidence} · {validity}", "$text-muted"),
        (f" · {place}" if place else "", "bold $warning"),
        "\n  ",
        literal(short_text(entry.text, 120), "" if live else "$text-muted strike"),
    )


def ledger_note(memory: MemoryView) -> Content:
    """What of the live ledger the prompt leaves out, in one line ("" when nothing)."""
    out = [e.label for e in memory.ledger if e.id in memory.ledger_left_out]
    if not out:
        return Content("")
    return Content.styled(
        f"{len(out)} not in the prompt, {LeftOut.OVER_SHARE} of "
        f"{tokens(memory.budgets.ledger)} (newest first, your facts and rules last; "
        f"kept here and in the store): {', '.join(out)}",
        "italic $warning",
    )


class LedgerItem(ListItem):
    def __init__(
        self, entry: StoredLedgerEntry, memory: MemoryView, line: Content | None = None
    ) -> None:
        """`line`: the entry's `ledger_line`, when the caller has it already."""
        super().__init__(Label(line if line is not None else ledger_line(entry, memory)))
        self.entry = entry


class ChapterItem(ListItem):
    def __init__(self, view: ChapterView, memory: MemoryView, now: datetime) -> None:
        super().__init__(Label(chapter_line(view, memory, now)))
        self.chapter_view = view


class InspectorPane(VerticalScroll):
    """The pane beside the chat."""

    DEFAULT_CSS = """
    InspectorPane {
        width: 45%; min-width: 30; max-width: 56;
        border-left: tall $panel-lighten-2; padding: 0 1; background: $surface;
    }
    InspectorPane > .section {
        color: $text-accent; text-style: bold; margin-top: 1; height: 1;
    }
    InspectorPane > Static { height: auto; }
    InspectorPane > #chapters { height: auto; max-height: 12; background: $surface; }
    InspectorPane > #chapters > ListItem { padding: 0 0; }
    InspectorPane > #ledger { height: auto; max-height: 12; background: $surface; }
    InspectorPane > #ledger > ListItem { padding: 0 0; }
    InspectorPane > #synopsis-versions { width: auto; min-width: 20; height: 1; }
    InspectorPane > #by-speaker { width: auto; min-width: 20; height: 1; }
    """

    class OpenChapter(TextualMessage):
        def __init__(self, chapter_id: int) -> None:
            super().__init__()
            self.chapter_id = chapter_id

    class OpenSynopsisVersions(TextualMessage):
        pass

    class OpenCastMemory(TextualMessage):
        """The memory by speaker (each cast member and the player)."""

    class OpenLedgerEntry(TextualMessage):
        def __init__(self, entry: StoredLedgerEntry) -> None:
            super().__init__()
            self.entry = entry

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: MemoryView | None = None
        self._chapter_key: tuple[object, ...] = ()
        self._ledger_key: tuple[object, ...] = ()
        self.border_title = "Memory"

    def compose(self) -> ComposeResult:
        yield Static("Next prompt", classes="section")
        yield Static(id="budget")
        yield Static(id="room")
        yield Static(
            Content.styled(
                "T: past it, a fold is queued (older messages become a chapter). "
                "C: past it with no chapter ready, the oldest messages leave the prompt "
                "(they stay stored).",
                "italic $text-muted",
            ),
            id="budget-legend",
        )
        yield Static("Last turn", classes="section")
        yield Static(id="metrics")
        yield Static("Verbatim window", classes="section")
        yield Static(id="verbatim")
        yield Static("Fold queue", classes="section")
        yield Static(id="folds")
        yield Static("Chapters", classes="section")
        yield Static(id="chapters-empty")
        yield ListView(id="chapters")
        yield Static("Synopsis", classes="section")
        yield Static(id="synopsis")
        yield Button("Earlier versions", id="synopsis-versions", variant="default", compact=True)
        yield Static("Ledger", classes="section")
        yield Static(id="ledger-empty")
        yield ListView(id="ledger")
        yield Button("By speaker (Alt+W)", id="by-speaker", variant="default", compact=True)
        yield Static("Lorebook (last turn)", classes="section")
        yield Static(id="lore")
        yield Static("Settings (F9)", classes="section")
        yield Static(id="generation")
        yield Static("Recalled (last turn)", classes="section")
        yield Static(id="recall")

    def on_resize(self) -> None:
        if self.view is not None:
            self._paint_budget(self.view)

    # ---- updates ----------------------------------------------------------------------------

    def show(self, view: MemoryView, now: datetime | None = None) -> None:
        now = now or datetime.now(UTC)
        self.view = view
        self.query_one("#by-speaker", Button).display = True
        self._paint_budget(view)
        self._paint_metrics(view)
        self.query_one("#generation", Static).update(settings_content(view))
        self.query_one("#lore", Static).update(lore_content(view))
        self.query_one("#recall", Static).update(recall_content(view))
        self._paint_verbatim(view)
        self._paint_folds(view, view.running)
        self._paint_ledger(view)
        self._paint_chapters(view, now)
        self._paint_synopsis(view)

    def show_unavailable(self, reason: str) -> None:
        """No model, so no memory figures: say so where the budget bar would be."""
        self.view = None
        self.query_one("#budget", Static).update(literal(reason, "italic $warning"))
        for section in (
            "#room",
            "#metrics",
            "#generation",
            "#lore",
            "#recall",
            "#verbatim",
            "#folds",
            "#synopsis",
            "#chapters-empty",
            "#ledger-empty",
        ):
            self.query_one(section, Static).update(Content(""))
        self.query_one("#chapters", ListView).display = False
        self.query_one("#ledger", ListView).display = False
        self.query_one("#synopsis-versions", Button).display = False
        self.query_one("#by-speaker", Button).display = False

    def tick(self, running: RunningFold | None) -> None:
        """The running fold's elapsed time, without re-reading the memory."""
        if self.view is not None:
            self._paint_folds(self.view, running)

    def _paint_budget(self, view: MemoryView) -> None:
        width = max(20, self.size.width - 4)
        self.query_one("#budget", Static).update(budget_bar_content(view.budget, width))
        room = self.query_one("#room", Static)
        room.update(literal(view.room_note, "$warning") if view.room_note else Content(""))
        room.display = bool(view.room_note)

    def _paint_metrics(self, view: MemoryView) -> None:
        m = view.last_metrics
        target = self.query_one("#metrics", Static)
        if m is None:
            target.update(Content.styled("no turn yet in this conversation", "italic $text-muted"))
            return
        share = (m.reused / m.prompt_positions * 100) if m.prompt_positions else 0.0
        target.update(
            Content.assemble(
                ("prompt positions ", "$text-muted"),
                (f"{m.prompt_positions:,}", "bold"),
                ("   reused ", "$text-muted"),
                (f"{m.reused:,}", "bold $success"),
                (f" ({share:.0f}%)", "$text-muted"),
                (f"\n{m.restored:,} of them loaded from the saved state", "$text-muted")
                if m.restored
                else ("", ""),
                ("\nevaluated ", "$text-muted"),
                (f"{m.evaluated:,}", "bold $warning"),
                ("   prompt ", "$text-muted"),
                (f"{m.prompt_ms:,.0f} ms", "bold"),
                ("\ngenerated ", "$text-muted"),
                (f"{m.generated:,}", "bold"),
                ("   ", ""),
                (f"{m.tokens_per_s:,.1f} tokens/s", "bold"),
                (f"   {m.finish_reason}" if m.finish_reason else "", "$text-muted"),
            )
        )

    def _paint_verbatim(self, view: MemoryView) -> None:
        first = view.verbatim_first
        lines: list[Content] = []
        if first is None:
            lines.append(Content.styled("empty", "italic $text-muted"))
        else:
            speaker = "system note" if first.role is Role.SYSTEM else first.speaker
            lines.append(
                Content.assemble(
                    ("starts at ", "$text-muted"),
                    (view.number(first.id), "bold"),
                    literal(f" ({speaker}: {short_text(first.text, 30)})", "$text-muted"),
                )
            )
            lines.append(
                Content.assemble(
                    (f"{view.verbatim_messages:,}", "bold"),
                    (
                        " message · " if view.verbatim_messages == 1 else " messages · ",
                        "$text-muted",
                    ),
                    (f"{view.verbatim_tokens:,}", "bold"),
                    (" tokens", "$text-muted"),
                )
            )
        if view.forced_cuts:
            times = "once" if view.forced_cuts == 1 else f"{view.forced_cuts:,} times"
            lines.append(
                Content.styled(f"forced cuts in this conversation: {times}", "$text-muted")
            )
        if view.forced_cut_through_id is not None:
            lines.append(
                Content.styled(
                    f"past the ceiling: messages up to {view.number(view.forced_cut_through_id)}"
                    " left the prompt (stored, waiting to be folded)",
                    "$warning",
                )
            )
        self.query_one("#verbatim", Static).update(Content("\n").join(lines))

    def _paint_folds(self, view: MemoryView, running: RunningFold | None) -> None:
        # Called every second while a fold runs: no screen layout unless the lines change.
        update_static(
            self.query_one("#folds", Static), fold_queue(view, running, datetime.now(UTC))
        )

    def _paint_chapters(self, view: MemoryView, now: datetime) -> None:
        chapters = [c for c in view.chapters if c.chapter.superseded_by is None]
        key = tuple(
            (
                c.chapter.id,
                view.chapter_span(c.chapter.id),  # a deletion before it renumbers it
                c.applied,
                c.chapter.stale,
                c.chapter.in_synopsis,
                age(c.chapter.created_at, now),
            )
            for c in chapters
        )
        empty = self.query_one("#chapters-empty", Static)
        if view.synopsis is not None:
            # A major fold took every live chapter into the synopsis (below).
            note = "none since the synopsis: the older chapters were folded into it (below)"
        else:
            note = "none yet: a chapter lands when the history passes the fold trigger (T)"
        empty.update(Content.styled(note, "italic $text-muted"))
        empty.display = not chapters
        listing = self.query_one("#chapters", ListView)
        listing.display = bool(chapters)
        if key == self._chapter_key:
            return
        self._chapter_key = key
        index = listing.index
        listing.clear()
        listing.extend(ChapterItem(c, view, now) for c in reversed(chapters))
        if chapters:
            # A highlighted row from the start: Tab into the list, then Enter opens a chapter
            # (with no row highlighted, Enter did nothing and the text could not be reached).
            listing.index = min(index or 0, len(chapters) - 1)

    def _paint_ledger(self, view: MemoryView) -> None:
        # Live entries first (what the prompt carries), then the ended ones, newest first.
        entries = sorted(view.ledger, key=lambda e: (e.ended_by_chapter_id is not None, -e.id))
        lines = [ledger_line(e, view) for e in entries]
        # Repainted when anything shown changes: the whole line as read (every evidence
        # number, or the words for one deleted, the chapters' ranges, where it stands, its
        # numbered text: a deletion renumbers any of them), and the texts its page shows in
        # full (the item keeps them).
        key = tuple(
            (e.id, line.plain, e.text, e.end_note) for e, line in zip(entries, lines, strict=True)
        )
        note = self.query_one("#ledger-empty", Static)
        if entries:
            note.update(ledger_note(view))
        else:
            note.update(
                Content.styled(
                    "none yet: chapters add your facts, rules, decisions, promises, open threads",
                    "italic $text-muted",
                )
            )
        note.display = not entries or bool(view.ledger_left_out)
        listing = self.query_one("#ledger", ListView)
        listing.display = bool(entries)
        if key == self._ledger_key:
            return
        self._ledger_key = key
        index = listing.index
        listing.clear()
        listing.extend(LedgerItem(e, view, line) for e, line in zip(entries, lines, strict=True))
        if entries:
            listing.index = min(index or 0, len(entries) - 1)  # as the chapters' list

    def _paint_synopsis(self, view: MemoryView) -> None:
        synopsis = view.synopsis
        target = self.query_one("#synopsis", Static)
        button = self.query_one("#synopsis-versions", Button)
        if synopsis is None:
            target.update(
                Content.styled(
                    f"none yet: when the chapters together pass {view.budgets.major_gc:,} tokens"
                    f" and at least {view.budgets.major_gc_min_chapters + 1} have landed, the"
                    " older ones are folded into a synopsis of about "
                    f"{view.budgets.synopsis_target:,} tokens",
                    "italic $text-muted",
                )
            )
        else:
            target.update(
                Content.assemble(
                    (f"v{synopsis.version}", "bold"),
                    (
                        f" · through {view.number(synopsis.through_message_id)}"
                        f" · {tokens(synopsis.tokens)}"
                        + (
                            f" (target {synopsis.target_tokens:,})"
                            if synopsis.target_tokens
                            else ""
                        )
                        + "\n",
                        "$text-muted",
                    ),
                    literal(short_text(synopsis.text, 600)),
                    (
                        f"\n{plural(len(synopsis.dropped), 'sentence')} of the draft left out:"
                        " resting on nothing it folds"
                        if synopsis.dropped
                        else "",
                        "italic $text-muted",
                    ),
                )
            )
        earlier = max(0, len(view.synopsis_versions) - 1)
        left_out = len(synopsis.dropped) if synopsis is not None else 0
        # The versions page is also where the current version's left-out sentences are read.
        label = f"Earlier versions ({earlier})" if earlier else f"Left out ({left_out})"
        button.label = literal_line(label)
        button.display = earlier > 0 or left_out > 0

    # ---- events ------------------------------------------------------------------------------

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        event.stop()
        item = event.item
        if isinstance(item, ChapterItem) and item.chapter_view.chapter.id is not None:
            self.post_message(self.OpenChapter(item.chapter_view.chapter.id))
        elif isinstance(item, LedgerItem):
            self.post_message(self.OpenLedgerEntry(item.entry))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "synopsis-versions":
            event.stop()
            self.post_message(self.OpenSynopsisVersions())
        elif event.button.id == "by-speaker":
            event.stop()
            self.post_message(self.OpenCastMemory())
