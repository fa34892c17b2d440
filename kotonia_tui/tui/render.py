"""Pure rendering helpers: segments, statuses, the budget bar, ages and sizes as `Content`.

Nothing here touches the chat service; widgets call these with domain objects, so the look of a
message or of the budget bar can be tested without a terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from textual.content import Content

from kotonia_tui.chat.inspection import BudgetBar
from kotonia_tui.domain import Message, MessageStatus, Role, Segment, SegmentKind

THOUGHT_BAR = "┃ "
CUT_MARK = "✂"


def short_text(text: str, limit: int) -> str:
    """One line of at most `limit` characters (an ellipsis marks the cut)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[: max(0, limit - 1)].rstrip() + "…"


def fill_macros(text: str, char: str, user: str) -> str:
    """The two card macros a reader meets in descriptions and greetings."""
    for macro, value in (("{{char}}", char), ("{{user}}", user), ("<BOT>", char), ("<USER>", user)):
        text = text.replace(macro, value)
        text = text.replace(macro.lower(), value).replace(macro.upper(), value)
    return text


def age(when: datetime, now: datetime | None = None) -> str:
    """A coarse age: "just now", "5 min ago", "3 h ago", "2 d ago"."""
    now = now or datetime.now(UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = max(0.0, (now - when).total_seconds())
    if seconds < 45:
        return "just now"
    if seconds < 3600:
        return f"{round(seconds / 60)} min ago"
    if seconds < 86400:
        return f"{round(seconds / 3600)} h ago"
    return f"{round(seconds / 86400)} d ago"


def tokens(n: int) -> str:
    return f"{n:,} tok"


def segment_content(segment: Segment, role: Role) -> Content:
    """One segment: narration in italics, dialogue under its speaker's name, thoughts apart."""
    if segment.kind is SegmentKind.NARRATION:
        return Content.styled(segment.text, "italic $text-muted")
    if segment.kind is SegmentKind.THOUGHT:
        return Content.assemble(
            (THOUGHT_BAR, "$secondary"),
            ("thinks ", "dim $secondary"),
            (segment.text, "italic $secondary"),
        )
    name_style = "bold $accent" if role is Role.CHARACTER else "bold $primary"
    speaker = segment.speaker or ""
    return Content.assemble(
        (f"{speaker}: " if speaker else "", name_style),
        (segment.text, "$text"),
    )


def segments_content(
    segments: Sequence[Segment], role: Role, *, streaming: bool = False
) -> Content:
    """A message body, each segment on its own line so the three kinds never run together."""
    lines = [segment_content(segment, role) for segment in segments]
    body = Content("\n").join(lines) if lines else Content("")
    if streaming:
        body = body.append(Content.styled(" ▍", "$accent"))
    return body


def status_content(message: Message) -> Content | None:
    """The line under a reply that did not end whole, saying why."""
    if message.status is MessageStatus.COMPLETE:
        return None
    reason = message.status_reason or {
        MessageStatus.CANCELLED: "stopped by the user",
        MessageStatus.CUT: "cut before its end",
        MessageStatus.ERROR: "the model call failed part way",
    }.get(message.status, message.status.value)
    label = {
        MessageStatus.CANCELLED: "stopped",
        MessageStatus.CUT: "cut",
        MessageStatus.ERROR: "error",
    }.get(message.status, message.status.value)
    if reason.lower().startswith(f"{label}:"):
        reason = reason[len(label) + 1 :].strip()
    return Content.assemble((f"{CUT_MARK} {label}: ", "bold $warning"), (reason, "$warning"))


BAR_PARTS: tuple[tuple[str, str], ...] = (
    ("setup", "$primary"),
    ("memory", "$secondary"),
    ("verbatim", "$accent"),
    ("reply reserve", "$warning"),
)


def budget_bar_content(bar: BudgetBar, width: int) -> Content:
    """Three lines: the trigger/ceiling marks, the bar, and the legend with the figures.

    The marks sit where the history (memory + verbatim) would reach them: after the setup.
    """
    width = max(10, width)
    n_ctx = max(1, bar.n_ctx)

    def cells(n: int) -> int:
        return round(n * width / n_ctx)

    values = (bar.setup, bar.memory, bar.verbatim, bar.reply_reserve)
    pieces: list[tuple[str, str]] = []
    used = 0
    for (_name, style), value in zip(BAR_PARTS, values, strict=True):
        n = min(cells(value), width - used)
        if value > 0 and n == 0 and used < width:
            n = 1
        pieces.append(("█" * n, style))
        used += n
    pieces.append(("░" * max(0, width - used), "$text-disabled"))

    marks = [" "] * (width + 1)
    trigger_at = min(width, cells(bar.setup + bar.trigger))
    ceiling_at = min(width, cells(bar.setup + bar.ceiling))
    marks[trigger_at] = "T"
    marks[ceiling_at] = "C" if ceiling_at != trigger_at else "X"
    mark_line = Content.styled("".join(marks).rstrip(), "bold $warning")

    legend_parts: list[tuple[str, str]] = []
    for (name, style), value in zip(BAR_PARTS, values, strict=True):
        legend_parts.extend((("■ ", style), (f"{name} {value:,}  ", "")))
    free = max(0, n_ctx - bar.used)
    legend_parts.append((f"free {free:,} of {bar.n_ctx:,}", "$text-muted"))
    history = Content.assemble(
        ("history ", "$text-muted"),
        (f"{bar.history:,}", "bold"),
        ("  T", "bold $warning"),
        (f" trigger {bar.trigger:,}", "$text-muted"),
        ("  C", "bold $warning"),
        (f" ceiling {bar.ceiling:,}", "$text-muted"),
    )
    return Content("\n").join(
        [mark_line, Content.assemble(*pieces), Content.assemble(*legend_parts), history]
    )
