"""Recall at turn time: the archive of one conversation asked about the latest lines.

The store answers the query (its FTS5 index, BM25, newest first among equals; the speakers'
names left out of it) and gives the neighbours, message numbers and in-story times;
memory/recall_forms.py cuts each message into its compact forms and memory/recall.py chooses
what fits. Here they meet, with exact token counts from the engine for every form. The chat
turn and the evaluation's recall arms both use it, so they quote the same excerpts for the
same question.

With semantic recall active (chat/semantic.py), the query's vector also finds the archived
messages nearest in meaning, and the two rankings are fused (memory/recall.py, `fuse`);
everything after that (stated, neighbours, budget) is the same.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from kotonia_tui.chat.semantic import SemanticRecall
from kotonia_tui.domain import Role, StoredMessage
from kotonia_tui.engine import Engine
from kotonia_tui.memory.assembly import PromptLine, line_cost_text
from kotonia_tui.memory.recall import (
    RECALL_HEADER,
    RECALL_HEADER_SEMANTIC,
    ArchivedLine,
    Candidate,
    Recall,
    RecalledExcerpt,
    fuse,
    matching_words,
    select,
    time_heading,
)
from kotonia_tui.memory.recall_forms import asks, compact, term_weight
from kotonia_tui.store import SearchHit, SimilarHit, Store, StoreError
from kotonia_tui.terms import Term, name_words

log = logging.getLogger(__name__)

# Messages the query returns, best first: more than a budget of a few hundred tokens holds
# whole, so that its compact forms can carry many, and some left out (stated in the memory,
# too long) still leave others to quote. Measured on the shipped conversations (issue 28):
# BM25 top-10 held an evidence message for 87% of the questions, top-5 for 82%.
RECALL_CANDIDATES = 24
MAX_FITTING_ROUNDS = 3


class Recaller:
    """Recall for one store and one engine (token counts are the engine's)."""

    def __init__(
        self, store: Store, engine: Engine, semantic: SemanticRecall | None = None
    ) -> None:
        self.store = store
        self.engine = engine
        self.semantic = semantic
        self._header_tokens: dict[bool, int] = {}

    async def recall(
        self,
        conv_id: int,
        query: str,
        *,
        older_than: int | None,
        memory_text: str,
        budget: int,
        names: Sequence[str] = (),
    ) -> Recall:
        """What the archive of `conv_id` older than message `older_than` has to say about
        `query`, within `budget` tokens (0: nothing is looked up). `names`: the speakers'
        (the character's and the persona's), not looked for: every message has one."""
        if budget <= 0 or older_than is None or not query.strip():
            return Recall(budget=max(budget, 0))
        names = [name for name in names if name.strip()]
        hits: list[SearchHit] = self.store.recall(
            conv_id, query, older_than, RECALL_CANDIDATES, ignore=names
        )
        terms = self.store.recall_terms(query, ignore=names)
        heavy = name_words(query) - name_words(" ".join(names), known=names)
        rarity = self.store.recall_rarity(terms)
        # The store ranks by the rarity of the words held; a name or a number of the query
        # weighs more (what a question is about): the same weight the pieces are chosen by.
        weight = {
            h.message_id: term_weight(matching_words(h.text, terms), heavy, rarity) for h in hits
        }
        hits.sort(key=lambda h: -weight[h.message_id])
        similar = await self._similar(conv_id, query, older_than)
        semantic = self.semantic is not None and self.semantic.active
        scores: dict[int, float] = {}
        if similar:
            found = {hit.message_id: hit for hit in [*similar, *hits]}
            # The best hit by words leads when no other holds as much of the query's weight.
            lead = None
            if hits and (len(hits) == 1 or weight[hits[0].message_id] > weight[hits[1].message_id]):
                lead = hits[0].message_id
            fused = fuse([h.message_id for h in hits], [h.message_id for h in similar], lead=lead)
            hits = [found[message_id] for message_id, _score in fused[:RECALL_CANDIDATES]]
            scores = dict(fused)
        if not hits:
            return Recall(budget=budget, semantic=semantic)
        similarity = {h.message_id: h.similarity for h in similar}
        candidates = await self._candidates(conv_id, hits, older_than, terms, heavy, rarity, weight)
        if semantic:
            candidates = [
                replace(
                    c,
                    similarity=similarity.get(c.line.message_id),
                    score=scores.get(c.line.message_id),
                )
                for c in candidates
            ]
        if semantic not in self._header_tokens:
            header = RECALL_HEADER_SEMANTIC if semantic else RECALL_HEADER
            (self._header_tokens[semantic],) = await self.engine.count_tokens_many([header])
        # An excerpt's label names its first and last message ("Messages #5-#6:"), and a
        # blank line parts it from the one before; where the in-story time changes, a line
        # gives it. All are counted, or a budget filled with many excerpts overflows by more
        # than the fitting rounds take back.
        labels = [
            "\n\n" + RecalledExcerpt(_span(c), (), (), None).label() + ":" for c in candidates
        ]
        marker_tokens = max(await self.engine.count_tokens_many(labels), default=0)
        headings = [time_heading(c.story_time) + "\n" for c in candidates if c.story_time]
        time_tokens = max(await self.engine.count_tokens_many(headings), default=0)
        limit = budget
        chosen, used = Recall(budget=budget), 0
        for _round in range(MAX_FITTING_ROUNDS):
            chosen = select(
                candidates,
                terms,
                memory_text=memory_text,
                budget=limit,
                header_tokens=self._header_tokens[semantic],
                marker_tokens=marker_tokens,
                time_tokens=time_tokens,
                semantic=semantic,
            )
            (used,) = await self.engine.count_tokens_many([chosen.render()])
            if used <= budget:
                break
            # Lines counted apart tokenize a little differently joined: ask for less, by what
            # the choice's own count missed (asking for only the overshoot less can choose the
            # same lines again, and then the turn recalled nothing: seen, issue 28).
            limit = min(limit - (used - budget), budget - (used - chosen.tokens))
            chosen, used = Recall(budget=budget, semantic=semantic), 0
        return Recall(
            chosen.excerpts,
            chosen.left_out,
            budget,
            used if chosen.excerpts else 0,
            semantic,
            tuple(hit.message_id for hit in hits),
        )

    async def _similar(self, conv_id: int, query: str, older_than: int) -> list[SimilarHit]:
        """The archived messages nearest in meaning to `query` (none without semantic
        recall)."""
        if self.semantic is None or not self.semantic.active:
            return []
        vector = await self.semantic.query_vector(query)
        if vector is None:
            return []
        try:
            # Off the event loop: an exact scan of a long conversation's vectors takes a
            # few hundred ms at 100,000 (benchmark 8c), and the UI must not stall for it.
            return await asyncio.to_thread(
                self.store.similar,
                conv_id,
                self.semantic.model_key,
                vector,
                older_than,
                RECALL_CANDIDATES,
            )
        except StoreError as exc:  # the turn goes on with recall by words
            log.warning("semantic recall skipped this turn: %s", exc)
            return []

    async def _candidates(
        self,
        conv_id: int,
        hits: Sequence[SearchHit],
        older_than: int,
        terms: Sequence[Term],
        heavy: Collection[str],
        rarity: Mapping[str, float],
        weight: Mapping[int, float],
    ) -> list[Candidate]:
        """The hits with their neighbours (and the reply to the message after each, when it
        asks), every line in its forms with their token counts."""
        ids = [hit.message_id for hit in hits]
        around = self.store.neighbours(conv_id, ids, older_than)
        neighbour: dict[int, StoredMessage | None] = {}
        following: dict[int, StoredMessage | None] = {}
        # Said just before each line (a line that replies to a question keeps its opening: the
        # answer comes first).
        previous: dict[int, StoredMessage | SearchHit | None] = {}
        for hit in hits:
            before, after = around.get(hit.message_id, (None, None))
            following[hit.message_id] = after
            previous[hit.message_id] = before
            if after is not None:
                previous.setdefault(after.id, hit)
            if hit.role is Role.USER:
                neighbour[hit.message_id] = after  # the reply it got
            elif hit.role is Role.CHARACTER and before is not None and before.role is Role.USER:
                neighbour[hit.message_id] = before  # the line it answered
            else:
                neighbour[hit.message_id] = None
        # Where the message after a hit asks ("What's his name?"), the reply it got, older
        # than the window like every line here: a question states nothing, its reply does.
        # One read each (the message after it only), and none when no line asks.
        asking = [m.id for m in following.values() if m is not None and asks(m.text)]
        replies = self.store.next_messages(conv_id, dict.fromkeys(asking), older_than)
        answer: dict[int, StoredMessage] = {}
        for hit in hits:
            after = following[hit.message_id]
            reply = replies.get(after.id) if after is not None else None
            if reply is not None and after is not None and _answers(reply.speaker, after):
                answer[hit.message_id] = reply
                previous.setdefault(reply.id, after)  # it answers: short and wide keep its opening
        messages: dict[int, tuple[Role, str, str]] = {
            h.message_id: (h.role, h.speaker, h.text) for h in hits
        }
        for m in [*neighbour.values(), *following.values()]:
            if m is not None:
                messages.setdefault(m.id, (m.role, m.speaker, m.text))
        numbers = self.store.message_numbers(conv_id, messages)
        for hit_id, reply in answer.items():
            # The message right after the question: numbered next, with no count to read.
            question = following[hit_id]
            assert question is not None  # a reply is only read for a question that follows
            messages.setdefault(reply.id, (reply.role, reply.speaker, reply.text))
            numbers.setdefault(reply.id, numbers[question.id] + 1)
        times = self.store.story_times(conv_id, ids)
        forms = {
            i: compact(text, terms, heavy, rarity, answers=_answers(speaker, previous.get(i)))
            for i, (_r, speaker, text) in messages.items()
        }
        # Every form of every line, each distinct text counted once.
        shown = {
            i: [line_cost_text(PromptLine(role, speaker, form)) for form in (text, *forms[i])]
            for i, (role, speaker, text) in messages.items()
        }
        texts = list(dict.fromkeys(t for forms_of in shown.values() for t in forms_of))
        tokens = dict(zip(texts, await self.engine.count_tokens_many(texts), strict=True))
        lines = {
            i: ArchivedLine(
                i,
                numbers[i],
                role,
                speaker,
                text,
                tokens[shown[i][0]],
                short=forms[i].short,
                short_tokens=tokens[shown[i][1]],
                least=forms[i].least,
                least_tokens=tokens[shown[i][2]],
                wide=forms[i].wide,
                wide_tokens=tokens[shown[i][3]],
            )
            for i, (role, speaker, text) in messages.items()
        }

        def line_of(message: StoredMessage | None) -> ArchivedLine | None:
            return lines[message.id] if message is not None else None

        return [
            Candidate(
                lines[hit.message_id],
                line_of(neighbour[hit.message_id]),
                times.get(hit.message_id),
                following=line_of(following[hit.message_id]),
                answer=line_of(answer.get(hit.message_id)),
                weight=weight.get(hit.message_id, 0.0),
            )
            for hit in hits
        ]


def _answers(speaker: str, before: StoredMessage | SearchHit | None) -> bool:
    """Whether a line `speaker` said replies to a question: the message before it, said by
    someone else, ends by asking (memory/recall_forms.py `asks`)."""
    return before is not None and before.speaker != speaker and asks(before.text)


def _span(candidate: Candidate) -> tuple[ArchivedLine, ...]:
    """The lines a candidate's excerpt holds, in story order."""
    lines = [candidate.line] + ([candidate.neighbour] if candidate.neighbour is not None else [])
    return tuple(sorted(lines, key=lambda line: line.number))
