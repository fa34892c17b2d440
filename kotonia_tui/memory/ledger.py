"""The ledger as the prompt carries it: the live entries, grouped by kind, in a fixed order.

The ledger is append-only: a chapter adds entries and ends earlier ones (a thread resolved, a
fact or rule superseded); ended entries leave the prompt but stay in the store. It is rendered at
the head of the memory block, before the synopsis, and a major fold never rewrites it, so the
facts the user stated survive every synopsis. Rendered from stored rows in id order: the same
entries give the same bytes.

The prompt carries the live ledger up to its share of the window (`fit_ledger`). Past it, the
decisions, promises and threads leave first, then the questions the user asked, then the user's
facts and rules (the facts memory lost first and the rules users notice broken); within a tier
the newest entries leave first: each kind keeps its oldest entries longest, and at one depth an
entry that quotes the user's own sentence stays longer than one the chronicler wrote. An old
entry's messages are in the synopsis at best, so the ledger is what still carries it word for
word; a new one's are in the live chapters or the verbatim history. The user's name and the
first rules they set hold for the whole conversation. Entries a later chapter superseded or
resolved are not live, so they are out already. The fit depends on the stored ledger alone, so
the block stays byte-stable until a fold changes the ledger. Entries left out stay in the store,
and the inspector and `kotonia memory` name them with the reason (`LeftOut`); a later fold that
ends other entries can bring them back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from kotonia_tui.domain import LedgerKind, StoredLedgerEntry
from kotonia_tui.memory.readback import asks

# Only the heading: what the ledger is needs no explanation in the prompt, where every token
# of it is one the verbatim window or the ledger's own entries lose (memory/assembly.py).
LEDGER_HEADING = "## Ledger"
KIND_HEADINGS = {
    LedgerKind.USER_FACT: "Facts the user stated about themselves:",
    LedgerKind.CONSTRAINT: "Rules the user set:",
    LedgerKind.DECISION: "Decisions:",
    LedgerKind.PROMISE: "Promises:",
    LedgerKind.THREAD: "Open threads:",
}


def entry_line(entry: StoredLedgerEntry) -> str:
    who = f" ({entry.subject})" if entry.subject else ""
    cite = " ".join(f"#{i}" for i in entry.evidence)
    return f"- {entry.label}{who}: {entry.text}" + (f" ({cite})" if cite else "")


def render_ledger(entries: Sequence[StoredLedgerEntry]) -> str:
    """The live entries under their kinds' headings ("" when there are none)."""
    live = [e for e in entries if e.ended_by_chapter_id is None]
    if not live:
        return ""
    parts = [LEDGER_HEADING]
    for kind, heading in KIND_HEADINGS.items():
        lines = [entry_line(e) for e in sorted(live, key=lambda e: e.id) if e.kind is kind]
        if lines:
            parts.append("\n".join([heading, *lines]))
    return "\n\n".join(parts)


# The tiers in which live entries leave the prompt when the ledger is over its share: the lowest
# tier first. Within a tier, `leave_order` takes the newest entries first. A question the user
# asked, quoted for its names and numbers, has a tier of its own between them (`_tier`).
LEAVE_RANK = {
    LedgerKind.DECISION: 0,
    LedgerKind.PROMISE: 0,
    LedgerKind.THREAD: 0,
    LedgerKind.USER_FACT: 2,
    LedgerKind.CONSTRAINT: 2,
}
QUESTION_RANK = 1


class LeftOut(StrEnum):
    """Why a live entry is not in the prompt (the inspector and `kotonia memory` say it)."""

    OVER_SHARE = "over the ledger's share"
    NEXT_TURN = "landed: the next turn applies it"


def _tier(entry: StoredLedgerEntry) -> int:
    return QUESTION_RANK if asks(entry) else LEAVE_RANK[entry.kind]


def leave_order(live: Sequence[StoredLedgerEntry]) -> list[StoredLedgerEntry]:
    """The live entries in the order they leave the prompt: the lower tier (`LEAVE_RANK`)
    first; within a tier, the entries deepest in their group's history first (a group's n-th
    oldest goes before any group's (n-1)-th oldest), so every group keeps its oldest entries
    longest and a long run of one cannot push another's oldest out; at one depth, what the
    chronicler wrote before what quotes the user, then the newer entry first.

    A group is a kind, split in two: the entries the chronicler wrote and those that quote the
    user's own sentence (`quotes_user`: the readback's misses). A quote is the user's words, so it
    cannot be wrong; the chronicler's entry is a paraphrase a small model may have got wrong.
    But readback quotes pile up (every user line with a number the chapter missed), so they
    get their own depth and cannot push the chronicler's first facts out either.

    A quoted question ("Were you really the navigator of the Grey Heron?") is the user's own
    words but states nothing they hold: it leaves after what the chronicler decided or promised
    and before the user's facts and rules, in a group of its own: else an early question holds
    its place while a later promise leaves (docs/decisions.md D-7)."""
    depth: dict[int, int] = {}
    seen: dict[tuple[LedgerKind, bool, bool], int] = {}
    for e in sorted(live, key=lambda e: e.id):
        group = (e.kind, e.quotes_user, asks(e))
        depth[e.id] = seen.get(group, 0)
        seen[group] = depth[e.id] + 1
    return sorted(live, key=lambda e: (_tier(e), -depth[e.id], e.quotes_user, -e.id))


@dataclass(frozen=True)
class LedgerFit:
    """The live entries the prompt carries, and those left out for the ledger's share."""

    shown: tuple[StoredLedgerEntry, ...]
    left_out: tuple[StoredLedgerEntry, ...]


def fit_ledger(
    entries: Sequence[StoredLedgerEntry], budget: int, count: Callable[[str], int]
) -> LedgerFit:
    """The live entries whose rendering takes at most `budget` tokens (`count` counts a text
    as the prompt carries it): the whole ledger when it fits, else without the fewest entries,
    in the order they leave (`leave_order`), that make it fit. Found by bisection: a handful of
    counts of the rendered ledger, however long it is."""
    live = sorted((e for e in entries if e.ended_by_chapter_id is None), key=lambda e: e.id)
    leaving = leave_order(live)

    def without(k: int) -> list[StoredLedgerEntry]:
        gone = {e.id for e in leaving[:k]}
        return [e for e in live if e.id not in gone]

    if count(render_ledger(live)) <= budget:  # the usual case: one count
        return LedgerFit(tuple(live), ())
    low, high = 1, len(live)  # the answer is in [low, high]; with every entry gone, "" fits
    while low < high:
        middle = (low + high) // 2
        if count(render_ledger(without(middle))) <= budget:
            high = middle
        else:
            low = middle + 1
    return LedgerFit(tuple(without(low)), tuple(sorted(leaving[:low], key=lambda e: e.id)))


def carried(entries: Sequence[StoredLedgerEntry], memory_text: str) -> frozenset[int]:
    """The ids of the entries a memory block's text carries (each entry's line holds its
    unique label, so its presence is exact)."""
    lines = set(memory_text.splitlines())
    return frozenset(e.id for e in entries if entry_line(e) in lines)
