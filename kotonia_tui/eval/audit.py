"""The audit of the chronicler: what the memory turned into facts, left open, or refused.

Seed 002 ("In its memory, a liar becomes an honest character"; "Recounting in production")
counts, over chapters and synopses checked against their source ranges:

1. claims by in-story characters written as facts. Three checks, from blunt to targeted:
   - the stock phrase ("as an established fact" and its Japanese/Chinese forms);
   - lexical: a memory sentence without attribution ("said", "told", "claimed", "On the
     surface", ...) whose closest source segment (token F1 >= 0.5) is a *character's* spoken
     line, with no narration or thought matching it as well. The user's own lines are facts by
     design and never count;
   - targeted (datasets that list their lies): a sentence that contains a known lie's keywords
     and no attribution.
   Limits: lexical overlap misses paraphrase (undercounts) and can flag a harmless restatement
   of small talk (overcounts); the targeted check only knows the lies the dataset lists.
2. topics left unresolved that were resolved: an "Open:" line naming a dataset thread whose
   resolving message lies inside what that chapter (or synopsis) covers. Without threads only
   the "Resolved:"/"Open:" markers are counted.
3. refusals: chronicler outputs that `memory.refusal.is_refusal` flags. Production retries
   and never stores them, so they are counted on the model calls, not on the stored memory.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kotonia_tui.domain import (
    Chapter,
    FoldJob,
    FoldStatus,
    LedgerKind,
    Message,
    Role,
    SegmentKind,
    StoredLedgerEntry,
    Synopsis,
)
from kotonia_tui.eval.dataset import EvalConversation
from kotonia_tui.eval.grading import answer_tokens, token_f1
from kotonia_tui.eval.meter import CallRecord
from kotonia_tui.eval.results import (
    Attribution,
    AuditResult,
    ClaimExample,
    ClaimsAsFacts,
    LedgerAudit,
    LeftOpen,
    MemoryText,
    Refusals,
    Topics,
)
from kotonia_tui.memory.chronicler import CHRONICLER
from kotonia_tui.memory.refusal import is_refusal
from kotonia_tui.memory.segments import parse_segments
from kotonia_tui.memory.structured import dropped_of
from kotonia_tui.sentences import sentences as split_sentences

ESTABLISHED = re.compile(
    r"established fact|as an? (?:established |known )?fact|it is a fact that|"
    r"確定した事実|確立された事実|既成事実|事実として|既定事实|作为事实|确定的事实",
    re.IGNORECASE,
)
ATTRIBUTION = re.compile(
    r"\b(?:said|says|say|told|tells|tell|claimed|claims|claim|insisted|insists|stated|states|"
    r"according to|asked|asks|promised|promises|admitted|admits|lied|lies|boasted|boasts|"
    r"mentioned|mentions|explained|explains|described|describes|replied|replies|answered|"
    r"suggested|suggests|recalled|recalls|swore|swears|on the surface|in fact)\b"
    r"|言った|言う|と話し|と述べ|と語っ|と主張|と答え|と説明|表向き|実際には|实际上|表面上|"
    r"说|声称|表示|告诉",
    re.IGNORECASE,
)
# "Open: ...", also as Markdown writes it: "- **Open:** ...", "**Open**: ...", "__Open__: ...".
_EMPHASIS = r"(?:\*\*|__|\*|_)?"
_OPEN = re.compile(
    rf"^\s*[-*•]?\s*{_EMPHASIS}(?:Open|未解決|未解决|未完){_EMPHASIS}\s*[:：]\s*{_EMPHASIS}"
    r"\s*(?P<item>.+)$",
    re.I | re.M,
)
_RESOLVED = re.compile(rf"(?:^|\s|[-*•]){_EMPHASIS}(?:Resolved|解決|解决){_EMPHASIS}\s*[:：]", re.I)
MATCH_F1 = 0.5
LIMITS = [
    "lexical claim check: token overlap misses paraphrase and may flag harmless "
    "restatements of a character's small talk",
    "known-lie check: only the lies the dataset lists, by keywords",
    "resolved-left-open: only the threads the dataset lists; without them, markers only",
]
MAX_EXAMPLES = 5


@dataclass(frozen=True)
class MemoryPiece:
    """A chapter or a synopsis version with the source messages it covers."""

    label: str
    text: str
    first_source: int  # input message ids
    last_source: int
    source: Sequence[Message]


def sentences(text: str) -> list[str]:
    """The memory text's sentences (kotonia_tui/sentences.py) that can be judged: without a
    list item's bullet, longer than three characters."""
    return [s.strip(" -*•\t") for s in split_sentences(text) if len(s.strip()) > 3]


def _segments(message: Message, user: str, char: str) -> list[tuple[SegmentKind, str, Role]]:
    listener = char if message.role is Role.USER else user
    segments = message.segments or parse_segments(
        message.text, speaker=message.speaker, listener=listener
    )
    return [(s.kind, s.text, message.role) for s in segments]


def claims_as_facts(piece: MemoryPiece, *, user: str, char: str) -> list[ClaimExample]:
    """Unattributed memory sentences whose best source is a character's spoken line."""
    segments = [
        (kind, text, role, message.id)
        for message in piece.source
        for kind, text, role in _segments(message, user, char)
    ]
    found = []
    for sentence in sentences(piece.text):
        if ATTRIBUTION.search(sentence) or len(answer_tokens(sentence)) < 4:
            continue
        scored = sorted(
            (
                (token_f1(sentence, text), kind, text, role, mid)
                for kind, text, role, mid in segments
            ),
            key=lambda row: row[0],
            reverse=True,
        )
        if not scored or scored[0][0] < MATCH_F1:
            continue
        best, kind, text, role, mid = scored[0]
        if kind is not SegmentKind.DIALOGUE or role is not Role.CHARACTER:
            continue
        # Narration or a thought that matches as well backs the sentence up: not a bare claim.
        backed = any(
            f1 >= best - 0.1 and k is not SegmentKind.DIALOGUE for f1, k, _t, _r, _m in scored
        )
        if not backed:
            found.append(
                ClaimExample(
                    in_=piece.label, memory=sentence, source=text, message=mid, f1=round(best, 2)
                )
            )
    return found


def audit(
    pieces: Sequence[MemoryPiece],
    *,
    conv: EvalConversation,
    chronicler_calls: Sequence[CallRecord],
    to_source: dict[int, int],
) -> AuditResult:
    user, char = conv.user.name, conv.character.name
    established: list[ClaimExample] = []
    lexical: list[ClaimExample] = []
    lies: list[ClaimExample] = []
    attributed_pieces = 0
    surface_pairs = 0
    resolved_markers = 0
    open_items = 0
    left_open: list[LeftOpen] = []
    for piece in pieces:
        for sentence in sentences(piece.text):
            if ESTABLISHED.search(sentence):
                established.append(ClaimExample(in_=piece.label, memory=sentence))
        if ATTRIBUTION.search(piece.text):
            attributed_pieces += 1
        if re.search(r"on the surface", piece.text, re.I) and re.search(
            r"in fact", piece.text, re.I
        ):
            surface_pairs += 1
        lexical.extend(claims_as_facts(piece, user=user, char=char))
        for lie in conv.lies:
            for sentence in sentences(piece.text):
                low = sentence.casefold()
                stated = all(k.casefold() in low for k in lie.keywords)
                corrected = any(k.casefold() in low for k in lie.except_keywords)
                if stated and not corrected and not ATTRIBUTION.search(sentence):
                    lies.append(ClaimExample(in_=piece.label, memory=sentence, lie=lie.id))
        resolved_markers += len(_RESOLVED.findall(piece.text))
        for match in _OPEN.finditer(piece.text):
            open_items += 1
            item = match.group("item").casefold()
            for thread in conv.threads:
                if thread.resolved is None or thread.resolved > piece.last_source:
                    continue
                if any(k.casefold() in item for k in thread.keywords):
                    left_open.append(
                        LeftOpen(
                            in_=piece.label,
                            thread=thread.id,
                            open_line=match.group("item").strip(),
                            resolved_at_message=thread.resolved,
                        )
                    )
    refusals = [c for c in chronicler_calls if c.reply_name == CHRONICLER and is_refusal(c.text)]
    stored_refusals = [p.label for p in pieces if is_refusal(p.text)]
    return AuditResult(
        pieces=len(pieces),
        claims_as_facts=ClaimsAsFacts(
            established_fact_phrase=len(established),
            lexical=len(lexical),
            known_lies_as_fact=len(lies),
            examples=(established + lies + lexical)[:MAX_EXAMPLES],
        ),
        attribution=Attribution(
            pieces_with_attribution=attributed_pieces,
            on_the_surface_in_fact_pairs=surface_pairs,
        ),
        topics=Topics(
            resolved_markers=resolved_markers,
            open_items=open_items,
            resolved_left_open=len(left_open),
            threads_known=len(conv.threads),
            examples=left_open[:MAX_EXAMPLES],
        ),
        refusals=Refusals(
            chronicler_calls=sum(1 for c in chronicler_calls if c.reply_name == CHRONICLER),
            refused=len(refusals),
            stored=len(stored_refusals),
            examples=[c.text[:200] for c in refusals[:MAX_EXAMPLES]],
        ),
        limits=LIMITS,
        chapters=[MemoryText(in_=p.label, text=p.text) for p in pieces],
    )


def memory_pieces(
    chapters: Sequence[Chapter],
    synopses: Sequence[Synopsis],
    messages: Sequence[Message],
    to_source: dict[int, int],
    ledger: Sequence[StoredLedgerEntry] = (),
) -> list[MemoryPiece]:
    """Chapters (including those folded into the synopsis), every synopsis version, and the
    live ledger (its open threads as "Open:" lines, so a thread left open after the message
    that resolved it counts as resolved-left-open, as an "Open:" line in prose does)."""

    def between(first: int, last: int) -> list[Message]:
        return [m for m in messages if m.id is not None and first <= m.id <= last]

    pieces = [
        MemoryPiece(
            label=f"chapter #{to_source.get(c.first_message_id, c.first_message_id)}-"
            f"#{to_source.get(c.last_message_id, c.last_message_id)}",
            text=c.text,
            first_source=to_source.get(c.first_message_id, c.first_message_id),
            last_source=to_source.get(c.last_message_id, c.last_message_id),
            source=between(c.first_message_id, c.last_message_id),
        )
        for c in chapters
    ]
    first_id = messages[0].id if messages and messages[0].id is not None else 1
    for synopsis in synopses:
        pieces.append(
            MemoryPiece(
                label=f"synopsis v{synopsis.version}",
                text=synopsis.text,
                first_source=to_source.get(first_id, first_id),
                last_source=to_source.get(synopsis.through_message_id, synopsis.through_message_id),
                source=between(first_id, synopsis.through_message_id),
            )
        )
    live = [e for e in ledger if e.ended_by_chapter_id is None]
    if live and chapters:
        through = max(c.last_message_id for c in chapters)
        lines = [f"Open: {e.text}" if e.kind is LedgerKind.THREAD else f"- {e.text}" for e in live]
        pieces.append(
            MemoryPiece(
                label="ledger",
                text="\n".join(lines),
                first_source=to_source.get(first_id, first_id),
                last_source=to_source.get(through, through),
                source=between(first_id, through),
            )
        )
    return pieces


def ledger_audit(
    ledger: Sequence[StoredLedgerEntry], chapters: Sequence[Chapter], jobs: Sequence[FoldJob]
) -> LedgerAudit:
    live: Counter[str] = Counter()
    ended: Counter[str] = Counter()
    for entry in ledger:
        (live if entry.ended_by_chapter_id is None else ended)[entry.kind.value] += 1
    failed: Counter[str] = Counter()
    for job in jobs:
        if job.last_error and job.status is not FoldStatus.DONE:
            failed[job.last_error] += job.attempts
    dropped: Counter[str] = Counter(
        item.reason.value for chapter in chapters for item in dropped_of(chapter.structure)
    )
    return LedgerAudit(
        dropped=dict(dropped),
        live=dict(live),
        ended=dict(ended),
        readback_misses=sum(len(c.readback_misses) for c in chapters),
        fold_attempts=sum(j.attempts for j in jobs),
        failed_attempts=dict(failed),
    )
