"""`kotonia memory ID`: the memory the next turn of a conversation carries, headless.

Read from the store: the ledger (every entry, with the chapters it is valid from and to, by store
id and, as the text names them, by their ranges in message numbers), the current synopsis, the live
chapters with their message ranges, text, structure, readback misses and note, the open threads
(messages by id and by their place in the conversation, as the app numbers them; the texts number
the messages they cite so too, as the prompt carries them), the fold jobs counted by status with
the failed attempts by reason, and the memory block the next turn carries (chat/memory_snapshot.py,
the builder the turn uses): the one the prompt carries now, or, when a fold has landed, the landed
one with its ledger fitted to the ledger's share of the window, counted by the model as the turn
counts it (the only case that opens the model's vocabulary). `in_prompt` says which entries the
prompt carries now, and `left_out` why a live entry is not in it: over the ledger's share, or
landed for the next turn.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from kotonia_tui.chat.memory_snapshot import LedgerFitter, snapshot_of
from kotonia_tui.chat.numbering import (
    chapter_numbers,
    chapter_span,
    evidence_said,
    numbering,
    range_ends,
    row_texts,
)
from kotonia_tui.domain import FoldStatus, LedgerEnd, LedgerKind, StoredLedgerEntry
from kotonia_tui.store import Store


def _entry(entry: StoredLedgerEntry) -> dict[str, Any]:
    return {
        "label": entry.label,
        "kind": entry.kind.value,
        "text": entry.text,
        "subject": entry.subject,
        "evidence": entry.evidence,
        "valid_from_chapter": entry.chapter_id,
        "valid_to_chapter": entry.ended_by_chapter_id,
        "end": entry.end.value if entry.end else None,
        "end_note": entry.end_note,
        "source": entry.source.value,
    }


def memory_report(store: Store, conv_id: int, fit: LedgerFitter) -> dict[str, Any]:
    """The memory of conversation `conv_id` as plain data (the `--json` output); `fit` fits a
    landed ledger to its share as the next turn will (chat/memory_snapshot.py)."""
    store.get_conversation(conv_id)  # a clear error for an unknown id
    # The fold jobs are read with the memory (one transaction): a fold the app lands meanwhile
    # is reported whole (its chapter, its ledger, its job done) or not yet.
    rows = store.memory_rows(conv_id, jobs=tuple(FoldStatus))
    snapshot = snapshot_of(rows, fit)
    synopsis, chapters, ledger = snapshot.synopsis, snapshot.chapters, snapshot.ledger
    live_ids, live = snapshot.live_ids, snapshot.live
    jobs = rows.jobs
    # The texts are shown as the app shows them: the messages they cite numbered per
    # conversation (chat/numbering.py); the fields named `..._id` and `evidence` stay ids.
    # The ledger's evidence is numbered with them, only the messages still stored (a deleted
    # one's number is null, said in words: `evidence_said`).
    next_text = snapshot.next_text
    shown = numbering(
        store,
        conv_id,
        [*row_texts([synopsis] if synopsis else [], chapters, ledger, jobs), next_text],
        {i for e in (*ledger, *live) for i in e.evidence},
    )
    if synopsis is not None:
        synopsis = shown.synopsis(synopsis)
    chapters = tuple(shown.chapter(c) for c in chapters)
    ledger = tuple(shown.entry(e) for e in ledger)
    live = [shown.entry(e) for e in live]
    jobs = [shown.job(j) for j in jobs]
    failed_attempts: Counter[str] = Counter()
    for job in jobs:
        if job.last_error and job.status is not FoldStatus.DONE:
            failed_attempts[job.last_error] += job.attempts
    landed = snapshot.pending
    in_prompt = snapshot.in_prompt
    left_out = snapshot.left_out()
    # Messages are shown by their place in the conversation, as the app numbers them (ids
    # differ from places once a message is deleted): the same count, `Store.message_numbers`.
    # A chapter too, by its range (the ledger's: refolded or in the synopsis since, as well).
    ranges = {c.id: (c.first_message_id, c.last_message_id) for c in chapters}
    named = {i for e in ledger for i in (e.chapter_id, e.ended_by_chapter_id) if i is not None}
    ranges |= store.chapter_ranges(conv_id, named - ranges.keys())
    # A range is numbered from the message before its first (chat/numbering.py `range_ends`:
    # its first may have been deleted since).
    mentioned = [i for span in ranges.values() for i in range_ends(*span)]
    if synopsis is not None:
        mentioned.append(synopsis.through_message_id)
    numbers = store.message_numbers(conv_id, mentioned)
    spans = chapter_numbers(ranges, numbers)

    def span(chapter_id: int | None) -> list[int] | None:
        found = spans.get(chapter_id) if chapter_id is not None else None
        return list(found) if found is not None else None

    def ends(chapter_id: int | None) -> tuple[int | None, int | None]:
        found = span(chapter_id)
        return (found[0], found[1]) if found else (None, None)

    return {
        "conversation": conv_id,
        "applies_on_next_turn": landed,
        "ledger": [
            _entry(e)
            | {
                # Null for a message deleted since.
                "evidence_numbers": shown.evidence(e.evidence),
                # The chapters' ranges in message numbers (null: no such chapter stored; []:
                # none of its messages is left).
                "valid_from_numbers": span(e.chapter_id),
                "valid_to_numbers": span(e.ended_by_chapter_id),
                "live": e.id in live_ids,
                "in_prompt": e.id in in_prompt,
                "left_out": left_out.get(e.id),
            }
            for e in ledger
        ],
        "synopsis": None
        if synopsis is None
        else {
            "version": synopsis.version,
            "through_message_id": synopsis.through_message_id,
            "through_message_number": numbers[synopsis.through_message_id],
            "tokens": synopsis.tokens,
            "text": synopsis.text,
            "quoted": synopsis.quoted,
            "origin": synopsis.origin.value,
            # The draft's sentences left out: none rests on what it folds (D-44).
            "dropped": list(synopsis.dropped),
        },
        "chapters": [
            {
                "id": c.id,
                "first_message_id": c.first_message_id,
                "last_message_id": c.last_message_id,
                # Null both when none of its messages is left.
                "first_message_number": ends(c.id)[0],
                "last_message_number": ends(c.id)[1],
                "story_time": c.story_time,
                "tokens": c.tokens,
                "text": c.text,
                "structure": json.loads(c.structure) if c.structure else None,
                "readback_misses": c.readback_misses,
                "note": c.note,
                "quoted": c.quoted,
                "origin": c.origin.value,
            }
            for c in chapters
        ],
        "open_threads": [
            {
                "label": e.label,
                "text": e.text,
                "evidence": e.evidence,
                "evidence_numbers": shown.evidence(e.evidence),
            }
            for e in live
            if e.kind is LedgerKind.THREAD
        ],
        "fold_jobs": {
            **{status.value: sum(1 for j in jobs if j.status is status) for status in FoldStatus},
            "failed_attempts": dict(failed_attempts),
        },
        "memory_text": shown.text(next_text),
    }


def memory_lines(report: dict[str, Any]) -> list[str]:
    """The report as text, section by section (untrusted text is made visible by the caller)."""
    lines = [f"conversation {report['conversation']}"]
    if report["applies_on_next_turn"]:
        lines.append("(landed memory: the next turn applies it)")
    lines.append("")
    lines.append(f"ledger: {len(report['ledger'])} entries")
    for e in report["ledger"]:
        valid = f"from {chapter_span(e['valid_from_numbers'])}"
        if e["end"] == LedgerEnd.RETIRED:  # with its chapter: no later chapter ended it
            valid += f" ({e['end']})"
        elif e["valid_to_chapter"] is not None:
            valid += f" to {chapter_span(e['valid_to_numbers'])} ({e['end'] or 'ended'})"
        ids = evidence_said(e["evidence_numbers"])
        out = f"  (not in the prompt: {e['left_out']})" if e["left_out"] else ""
        kind = LedgerKind(e["kind"]).label
        lines.append(f"  {e['label']}  {kind}  {e['text']}  {ids}  {valid}{out}")
    synopsis = report["synopsis"]
    lines.append("")
    if synopsis is None:
        lines.append("synopsis: none")
    else:
        quoted = " (quoted)" if synopsis["quoted"] else ""
        lines.append(
            f"synopsis: version {synopsis['version']} through "
            f"#{synopsis['through_message_number']}{quoted}"
        )
        lines.extend(f"  {line}" for line in synopsis["text"].splitlines())
        lines.extend(
            f"  (left out of the draft: it rests on nothing it folds) {sentence}"
            for sentence in synopsis["dropped"]
        )
    lines.append("")
    lines.append(f"chapters: {len(report['chapters'])}")
    for c in report["chapters"]:
        told = "structured" if c["structure"] is not None else "prose"
        kind = "quoted" if c["quoted"] else told
        first, last = c["first_message_number"], c["last_message_number"]
        span = chapter_span((first, last) if first is not None else ())
        # Its in-story time, as the memory block heads it.
        when = f", in-story time: {c['story_time']}" if c["story_time"] else ""
        lines.append(f"  chapter {span} ({kind}){when}")
        if c["quoted"] and c["note"]:
            lines.append(f"    ({c['note']})")
        lines.extend(f"    {line}" for line in c["text"].splitlines())
        if c["readback_misses"]:
            lines.append(f"    readback misses: {', '.join(c['readback_misses'])}")
    lines.append("")
    lines.append(f"open threads: {len(report['open_threads'])}")
    lines.extend(f"  {t['label']}: {t['text']}" for t in report["open_threads"])
    jobs = report["fold_jobs"]
    lines.append("")
    counts = ", ".join(f"{k} {v}" for k, v in jobs.items() if k != "failed_attempts")
    lines.append(f"fold jobs: {counts}")
    for reason, attempts in jobs["failed_attempts"].items():
        lines.append(f"  {attempts} failed attempts: {reason}")
    return lines
