"""The ledger as the prompt carries it: the live entries, grouped by kind, in a fixed order.

The ledger is append-only: a chapter adds entries and ends earlier ones (a thread resolved, a
fact or rule superseded); ended entries leave the prompt but stay in the store. It is rendered at
the head of the memory block, before the synopsis, and a major fold never rewrites it, so the
facts the user stated survive every synopsis. Rendered from stored rows in id order: the same
entries give the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from kotonia_tui.domain import LedgerKind, StoredLedgerEntry

LEDGER_HEADING = (
    "## Ledger\nWhat holds until a later chapter changes it; each line names its messages."
)
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
