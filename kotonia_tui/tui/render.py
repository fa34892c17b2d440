"""Pure rendering helpers: message bodies, statuses, the budget bar, ages and sizes as `Content`.

Nothing here touches the chat service; widgets call these with domain objects, so the look of a
message or of the budget bar can be tested without a terminal.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from textual.content import Content

from kotonia_tui.chat.inspection import BudgetBar
from kotonia_tui.domain import Message, MessageStatus, Role
from kotonia_tui.terminal_text import visible

CUT_MARK = "✂"


# Runs of whitespace fold to one space in a preview; control characters that count as
# whitespace (a lone CR, VT, FF, the separators) are not folded away but shown, by `visible`.
_FOLDED_SPACE = re.compile(r"(?:\r\n|[^\S\r\x0b\x0c\x1c-\x1f\x85\u2028\u2029])+")


def short_text(text: str, limit: int) -> str:
    """One line of at most `limit` characters (an ellipsis marks the cut)."""
    flat = _FOLDED_SPACE.sub(" ", text).strip(" ")
    if len(flat) <= limit:
        return flat
    return flat[: max(0, limit - 1)].rstrip() + "…"


def fill_macros(text: str, char: str, user: str) -> str:
    """The two card macros a reader meets in descriptions and greetings."""
    for macro, value in (("{{char}}", char), ("{{user}}", user), ("<BOT>", char), ("<USER>", user)):
        text = text.replace(macro, value)
        text = text.replace(macro.lower(), value).replace(macro.upper(), value)
    return text


DAYS_A_YEAR = 365.25
DAYS_A_MONTH = DAYS_A_YEAR / 12


def age(when: datetime, now: datetime | None = None) -> str:
    """A coarse age: "just now", "5 min ago", "3 h ago", "2 d ago", "5 mo ago", "3 y ago"
    (an imported chat's last message can be years old: "730 d ago" reads as a puzzle)."""
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
    days = seconds / 86400
    if days < 60:
        return f"{round(days)} d ago"
    if days < 730:  # months up to two years: "18 mo ago" says more than "2 y ago"
        return f"{round(days / DAYS_A_MONTH)} mo ago"
    return f"{round(days / DAYS_A_YEAR)} y ago"


def plural(n: int, noun: str) -> str:
    """ "1 greeting", "2 greetings", "1 lorebook entry", "3 lorebook entries"."""
    if n == 1:
        return f"1 {noun}"
    if noun.endswith("y") and not noun.endswith(("ay", "ey", "oy", "uy")):
        return f"{n:,} {noun[:-1]}ies"
    return f"{n:,} {noun}s"


def tokens(n: int) -> str:
    return f"{n:,} tok"


# Role-play text is written Markdown-ish: *actions*, **emphasis**, `thoughts`, "speech". It is
# shown as written (line breaks kept, nothing split or reordered); the asterisks and backticks
# are markup and are hidden, as a Markdown reader would, and quotes stay (they are punctuation).
# A marker needs text right after it opens and right before it closes, so `5 * 3 * 2` stays as
# it is. The segments (narration, dialogue, thoughts) are for the chronicler, not for display.
_EMPHASIS = re.compile(
    r"\*\*(?P<bold>(?!\s)[^*]+?(?<!\s))\*\*"
    r"|\*(?P<action>(?!\s)[^*]+?(?<!\s))\*"
    r"|`(?P<thought>(?!\s)[^`]+?(?<!\s))`"
)
_SPEECH = re.compile(r'"[^"]+"|“[^”]+”|「[^」]+」|『[^』]+』')
ACTION_STYLE = "italic $text-muted"
THOUGHT_STYLE = "italic $secondary"
BOLD_STYLE = "bold"


def speech_style(role: Role) -> str:
    return "$text-accent" if role is Role.CHARACTER else "$text-primary"


def message_body(text: str, role: Role, *, streaming: bool = False) -> Content:
    """A message as written, styled in place; a cursor at the end while it streams."""
    shown = visible(text.strip("\n"))
    parts: list[tuple[str, str]] = []
    position = 0
    for match in _EMPHASIS.finditer(shown):
        parts.append((shown[position : match.start()], ""))
        if match.group("bold") is not None:
            parts.append((match.group("bold"), BOLD_STYLE))
        elif match.group("action") is not None:
            parts.append((match.group("action"), ACTION_STYLE))
        else:
            parts.append((match.group("thought"), THOUGHT_STYLE))
        position = match.end()
    parts.append((shown[position:], ""))
    body = Content.assemble(*parts)
    style = speech_style(role)
    for match in _SPEECH.finditer(body.plain):
        body = body.stylize(style, match.start(), match.end())
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
    return Content.assemble(
        (f"{CUT_MARK} {label}: ", "bold $warning"), (visible(reason), "$warning")
    )


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
