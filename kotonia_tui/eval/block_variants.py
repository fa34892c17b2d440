"""Other memory blocks rendered from the same replay: what the block should hold, phase-matched.

Which items the memory block holds (the ledger's quotes of the user, a synopsis quoted because
the chronicler's could not be used, the chapters) cannot be compared by running the evaluation
again with another setting: the block's size moves the fold points, so each run ends at
another point of its fold cycle, and the figures move with that phase more than with the block
(issue 28: `ledger_budget_ratio=0` beside recall). Here each variant is rendered from the
final store of the one replay, at the same history size: the tokens a variant's block does not
use go to the verbatim window, which reaches back over the oldest folded messages, as a
smaller block lets the window grow before the next fold (a larger one takes its tokens from
the window's oldest end, never its newest message). So a variant and the generational arm
differ only in what their shared history tokens hold, and the truncation arm is the variant
with no block at all.

A variant is a filter of the memory's rows; the ledger is fitted to its share after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kotonia_tui.chat.numbering import numbered
from kotonia_tui.chat.prompting import memory_tokens
from kotonia_tui.domain import Message, StoredChapter, StoredLedgerEntry, StoredSynopsis
from kotonia_tui.engine import Engine
from kotonia_tui.eval.replay import Replay
from kotonia_tui.memory.assembly import MemoryBlock


@dataclass(frozen=True)
class Rows:
    """The memory's live rows, as a variant keeps them."""

    synopsis: StoredSynopsis | None
    chapters: tuple[StoredChapter, ...]
    ledger: tuple[StoredLedgerEntry, ...]  # live entries, before the fit


def _unquoted_synopsis(rows: Rows) -> StoredSynopsis | None:
    return rows.synopsis if rows.synopsis and not rows.synopsis.quoted else None


def _unquoted_chapters(rows: Rows) -> tuple[StoredChapter, ...]:
    return tuple(c for c in rows.chapters if not c.quoted)


def _chronicler_entries(rows: Rows) -> tuple[StoredLedgerEntry, ...]:
    return tuple(e for e in rows.ledger if not e.quotes_user)


def _no_ledger(rows: Rows) -> Rows:
    return Rows(rows.synopsis, rows.chapters, ())


def _no_ledger_quotes(rows: Rows) -> Rows:
    return Rows(rows.synopsis, rows.chapters, _chronicler_entries(rows))


def _no_quotes(rows: Rows) -> Rows:
    """Only what the chronicler wrote: no quoted synopsis, chapter or ledger entry (recall
    reaches the archive those quote)."""
    return Rows(_unquoted_synopsis(rows), _unquoted_chapters(rows), _chronicler_entries(rows))


def _no_quoted_story(rows: Rows) -> Rows:
    """No quoted synopsis or chapter; the ledger's quotes of the user stay."""
    return Rows(_unquoted_synopsis(rows), _unquoted_chapters(rows), rows.ledger)


def _no_quoted_chapters(rows: Rows) -> Rows:
    """No quoted chapter (the lines a fold quoted from its range's messages); a quoted synopsis
    stays: it quotes the earlier synopsis and the chapters' items too, which recall does not
    search."""
    return Rows(rows.synopsis, _unquoted_chapters(rows), rows.ledger)


def _no_synopsis(rows: Rows) -> Rows:
    return Rows(None, rows.chapters, rows.ledger)


def _no_chapters(rows: Rows) -> Rows:
    return Rows(rows.synopsis, (), rows.ledger)


VARIANTS: dict[str, Callable[[Rows], Rows]] = {
    "no-ledger": _no_ledger,
    "no-ledger-quotes": _no_ledger_quotes,
    "no-quotes": _no_quotes,
    "no-quoted-story": _no_quoted_story,
    "no-quoted-chapters": _no_quoted_chapters,
    "no-synopsis": _no_synopsis,
    "no-chapters": _no_chapters,
}


def variant_arm_name(base: str, variant: str) -> str:
    """ "generational/no-quotes", "generational/no-quotes+recall": the base arm's name with the
    variant before any recall suffix."""
    head, plus, tail = base.partition("+")
    return f"{head}/{variant}{plus}{tail}"


@dataclass(frozen=True)
class VariantPrompt:
    """A variant's memory block and the verbatim window its history tokens leave."""

    memory_text: str  # as stored (store ids)
    shown_memory: str  # as the reader reads it (numbered)
    memory_tokens: int
    window: tuple[Message, ...]
    verbatim_tokens: int


def render_variant(
    replay: Replay, engine: Engine, variant: str, history_tokens: int
) -> VariantPrompt:
    """The variant's block from the replay's final rows, and the newest messages that fit the
    `history_tokens` the block leaves: the final window, then older messages (folded ones too)
    as long as they fit whole; a block larger than the base's shortens the window from its
    oldest end instead (never below the newest message)."""
    prompter = replay.service.prompter
    stored = replay.store.memory_rows(replay.conv_id)
    rows = VARIANTS[variant](Rows(stored.synopsis, tuple(stored.chapters), tuple(stored.live)))
    fit = prompter.fit_ledger(rows.ledger) if rows.ledger else None
    block = MemoryBlock(
        rows.synopsis.text if rows.synopsis else None, rows.chapters, fit.shown if fit else ()
    )
    text = block.render()
    shown = numbered(replay.store, replay.conv_id, text) if text else ""
    cost = memory_tokens(engine, shown) if shown else 0
    final = list(replay.final.window)
    prices = [prompter.message_tokens(m) for m in final]
    used = sum(prices)
    start = final[0].id if final else None
    # A block larger than the base's (a ledger refitted without some entries may take more)
    # costs the window its oldest messages; the newest always stays, as in a turn.
    while len(final) > 1 and cost + used > history_tokens:
        final.pop(0)
        used -= prices.pop(0)
    kept: list[Message] = []
    if len(final) == len(replay.final.window):  # nothing cut: the window may reach back
        older = [m for m in replay.all_messages() if start is None or (m.id or 0) < start]
        for message in reversed(older):
            price = prompter.message_tokens(message)
            if cost + used + price > history_tokens:
                break
            kept.append(message)
            used += price
    window = tuple([*reversed(kept), *final])
    return VariantPrompt(text, shown, cost, window, used)


def unknown(names: Sequence[str]) -> list[str]:
    """The names of `names` that are not variants (for the error)."""
    return [n for n in names if n not in VARIANTS]
