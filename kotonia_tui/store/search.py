"""Full-text search over the messages: the query a user types, or the words recall looks for.

The indexes (FTS5, the search schema step) are kept in step with `messages.text` by triggers, so a
search sees exactly the messages stored now, each with its chosen version's text. A query is
plain text, never FTS syntax: it is split into terms (terms.split_terms, the rules the indexes
are built on) and each term becomes one or more index lookups:

- a term in a spaced script (English, ...) matches words it begins ("light" -> "lighthouse")
  in `message_words`; from three characters on it also matches inside Japanese or Chinese
  text ("iPhone" in "東京でiPhoneを買った"), through `message_trigrams`;
- a term of a script written without spaces (Japanese, Chinese, Thai, Khmer, ...) of three
  characters or more matches as a substring, a phrase of its trigrams in `message_trigrams`;
- one of one or two characters (common: 猫, 東京) cannot be a trigram. Every character of the
  indexed text begins a trigram (the text is padded), so the trigrams that begin with the term
  are exactly its occurrences: they are read from the index's vocabulary (a range read) and
  looked up together. Past `SHORT_TERM_EXPANSION` of them (a very common character), the term
  is found by a substring scan of the text instead, bounded like the rest of the query.

`SearchMode.ALL` (the search screen, `kotonia search`) wants every term; `SearchMode.ANY`
(recall) any of them, ranked by BM25, with words too common to tell messages apart left out.
Recall looks for a query's content words (terms.recall_terms: no question words, no speakers'
names) in their other forms too: the words of the index's vocabulary that are forms of a term
(terms.same_stem: "walked" finds "walk", "walks", "walking", not "walkabout") are read from the
vocabulary (a range read on the term's start) and looked up with it, `STEM_EXPANSION` at most.
"""

from __future__ import annotations

import math
import sqlite3
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from kotonia_tui.domain import Role
from kotonia_tui.store.codec import ts_from_db
from kotonia_tui.store.connection import Db
from kotonia_tui.store.errors import StoreError
from kotonia_tui.terms import (
    CONTENT_LETTERS,
    STEM,
    Term,
    fold,
    letters,
    recall_terms,
    same_stem,
    split_terms,
    stem_forms,
)

SHORT_TERM_EXPANSION = 64  # trigrams a one- or two-character term is looked up by, at most
# The forms of one recall word looked up, at most (the nearest in length first): a word's
# forms in one language are a handful; only a vocabulary of many languages could hold more.
STEM_EXPANSION = 64
# How much a recall term's weight (its rarity) outranks BM25 (a few units a term): a message
# holding rarer query words comes first, whatever its length.
COVERAGE = 1000.0
# Vocabulary rows one range read of a word's start may give: bounds the read on a huge
# vocabulary; forms past it are not looked up.
VOCABULARY_READ = 4 * STEM_EXPANSION
# A word in tens of thousands of messages would be ranked by reading every one of them: the
# ranking looks at the newest RANKED_MATCHES matches of a query (all of them are still found
# newest first), which keeps a query for "the" fast at any size.
RANKED_MATCHES = 10_000
# Recall skips a word found in more than this share of the messages ("the", "you"): it matches
# nearly everything, ranks almost nothing, and costs the most to read.
COMMON_WORD_SHARE = 0.2
COMMON_WORD_MIN_DOCS = 200  # below this many messages every word counts
_LAST_CHAR = "\U0010ffff"


class SearchMode(StrEnum):
    ALL = "all"  # every term (the search screen, `kotonia search`)
    ANY = "any"  # any term, more terms ranking higher (recall)


class SearchOrder(StrEnum):
    RANK = "rank"  # best match first (BM25), then newest
    NEWEST = "newest"


class SearchHit(BaseModel):
    """One message found, with what a result list shows."""

    message_id: int
    conversation_id: int
    role: Role
    speaker: str
    text: str
    created_at: datetime
    # BM25 summed over the terms (recall: after the rarity of the terms it holds, times
    # COVERAGE): lower is better (0 for a scanned term)
    score: float


@dataclass(frozen=True)
class _Fts:
    """A lookup in one FTS5 index."""

    table: str
    match: str


@dataclass(frozen=True)
class _Scan:
    """A substring scan of the text (a one-character term followed by too many others)."""

    needle: str


_Source = _Fts | _Scan


@dataclass(frozen=True)
class _Bounds:
    """The messages searched: one conversation's (or all), older than a message (or all)."""

    conversation_id: int | None
    low: int | None  # the conversation's first message id (lets FTS5 skip the rest)
    before_id: int | None

    def sql(self, column: str) -> tuple[str, list[object]]:
        clauses: list[str] = []
        params: list[object] = []
        if self.low is not None:
            clauses.append(f"{column} >= ?")
            params.append(self.low)
        if self.before_id is not None:
            clauses.append(f"{column} < ?")
            params.append(self.before_id)
        return "".join(f" AND {c}" for c in clauses), params

    def conversation_sql(self) -> tuple[str, list[object]]:
        """The check that a found id is in the conversation, through the (conversation_id, id)
        index (no message row is read). Outside the FTS5 lookup: inside it, SQLite ran the
        lookup once per id of the conversation."""
        if self.conversation_id is None:
            return "", []
        return (
            "WHERE id IN (SELECT id FROM messages WHERE conversation_id = ?)",
            [self.conversation_id],
        )


def search_messages(
    db: Db,
    query: str,
    *,
    conversation_id: int | None = None,
    before_id: int | None = None,
    limit: int = 50,
    mode: SearchMode = SearchMode.ALL,
    order: SearchOrder = SearchOrder.RANK,
    ignore: Iterable[str] = (),
) -> list[SearchHit]:
    """Messages matching `query` (plain text), at most `limit`; `conversation_id` and
    `before_id` bound the search to one conversation and to messages older than one.
    `ignore`: names whose words recall (`SearchMode.ANY`) does not look for."""
    if limit < 0:
        raise StoreError(f"limit must be 0 or more, got {limit}")
    terms = recall_terms(query, ignore) if mode is SearchMode.ANY else split_terms(query)
    if not terms or limit == 0:
        return []
    with db.read():
        low = None
        if conversation_id is not None:
            row = db.select_one(
                "SELECT min(id) AS low FROM messages WHERE conversation_id = ?", (conversation_id,)
            )
            low = row["low"] if row is not None else None
            if low is None:
                return []
        bounds = _Bounds(conversation_id, low, before_id)
        weights: list[float] = []
        if mode is SearchMode.ALL:
            groups = _every_term(db, terms)
        else:
            groups, weights = _any_term(db, terms)
        if not groups:
            return []
        return _run(db, groups, bounds, limit, mode, order, weights)


def recall_terms_used(db: Db, query: str, ignore: Iterable[str] = ()) -> list[Term]:
    """The terms `SearchMode.ANY` looks for in `query`: recall's terms without the words too
    common to tell messages apart (what a recalled message is shown to have matched)."""
    terms = recall_terms(query, ignore)
    if not terms:
        return []
    with db.read():
        total = _messages_indexed(db)
        return _without_common_words(terms, _forms_of(db, terms), total)


def recall_term_rarity(db: Db, terms: Sequence[Term]) -> dict[str, float]:
    """Each spaced term's rarity (folded): the inverse document frequency of its forms
    together, as recall ranks messages by it. Unspaced terms are left out."""
    with db.read():
        total = _messages_indexed(db)
        forms = _forms_of(db, terms)
    return {key: _rarity(sum(doc for _w, doc in found), total) for key, found in forms.items()}


def _every_term(db: Db, terms: Sequence[Term]) -> list[list[_Source]]:
    """Groups of lookups, all of which a message must match. Terms that each need one lookup
    in the same index become one lookup (FTS5 intersects them itself)."""
    together: dict[str, list[str]] = {}
    groups: list[list[_Source]] = []
    for term in terms:
        sources = _sources(db, term, recall_limit=None)
        if not sources:
            return []  # a term found nowhere: no message has every term
        first = sources[0]
        if len(sources) == 1 and isinstance(first, _Fts):
            together.setdefault(first.table, []).append(first.match)
        else:
            groups.append(sources)
    combined: list[list[_Source]] = [
        [_Fts(table, " AND ".join(f"({m})" for m in matches))]
        for table, matches in together.items()
    ]
    return combined + groups


def _any_term(db: Db, terms: list[Term]) -> tuple[list[list[_Source]], list[float]]:
    """Recall's lookups: a group per spaced term (any of its lookups finds it) and one for
    the pairs of characters of unspaced text, each with its weight: how rare the term is
    (its inverse document frequency; the unspaced pairs as rare as a word can be). A message
    ranks by the weights of the terms it holds, then by BM25: a message that holds the rare
    "sister" comes before ones that hold only the commoner "grey", however long it is."""
    total = _messages_indexed(db)
    forms = _forms_of(db, terms)
    terms = _without_common_words(terms, forms, total)
    recall_limit = total * COMMON_WORD_SHARE if total >= COMMON_WORD_MIN_DOCS else None
    groups: list[list[_Source]] = []
    weights: list[float] = []
    unspaced: dict[str, list[str]] = {}
    for term in terms:
        key = fold(term.text)
        words = [word for word, _docs in forms.get(key, ())]
        sources = _sources(db, term, recall_limit=recall_limit, recall=True, forms=words)
        fts = [source for source in sources if isinstance(source, _Fts)]
        if term.unspaced:
            for source in fts:
                unspaced.setdefault(source.table, []).append(source.match)
        elif fts:
            groups.append(list(fts))
            docs = sum(doc for _word, doc in forms.get(key, ()))
            weights.append(_rarity(docs, total))
    if unspaced:
        groups.append(
            [_Fts(table, " OR ".join(f"({m})" for m in ms)) for table, ms in unspaced.items()]
        )
        weights.append(_rarity(0, total))
    return groups, weights


def _rarity(docs: int, total: int) -> float:
    """A term's inverse document frequency (BM25's, never below zero)."""
    return math.log(1 + (max(total, docs) - docs + 0.5) / (docs + 0.5))


def _messages_indexed(db: Db) -> int:
    row = db.select_one("SELECT total(message_count) AS n FROM conversations")
    return int(row["n"]) if row is not None else 0


def _forms_of(db: Db, terms: Sequence[Term]) -> dict[str, list[tuple[str, int]]]:
    """Each spaced term's forms in the vocabulary (folded), with how many messages hold each."""
    return {fold(t.text): _word_forms(db, fold(t.text)) for t in terms if not t.unspaced}


def _word_forms(db: Db, word: str) -> list[tuple[str, int]]:
    """The indexed words that are forms of `word` (terms.same_stem), with their message counts:
    the word itself first, then the nearest in length, STEM_EXPANSION at most. A number, or a
    word too short to have a stem, is only itself."""
    if not word.isalpha() or letters(word) < CONTENT_LETTERS:
        rows = db.select("SELECT term, doc FROM message_word_terms WHERE term = ?", (word,))
        return [(row["term"], int(row["doc"])) for row in rows]
    # Each vocabulary row costs a read of its doclist (for its count): one range per distinct
    # start, none inside another's ("walk" holds "walke"), exact reads outside every range.
    ranges: set[str] = set()
    exact: set[str] = set()
    for form in stem_forms(word):
        prefix, shorter = _vocabulary_reads(form)
        ranges.add(prefix)
        exact.update(shorter)
    ranges = {r for r in ranges if not any(r != o and r.startswith(o) for o in ranges)}
    exact = {e for e in exact if not any(e.startswith(r) for r in ranges)}
    rows = []
    for prefix in sorted(ranges):
        rows += db.select(
            "SELECT term, doc FROM message_word_terms WHERE term >= ? AND term < ? LIMIT ?",
            (prefix, prefix + _LAST_CHAR, VOCABULARY_READ),
        )
    if exact:
        marks = ",".join("?" * len(exact))
        rows += db.select(
            f"SELECT term, doc FROM message_word_terms WHERE term IN ({marks})", sorted(exact)
        )
    found: dict[str, int] = {}
    for row in rows:
        if same_stem(row["term"], word):
            found[row["term"]] = int(row["doc"])
    nearest = sorted(found, key=lambda t: (t != word, abs(len(t) - len(word)), t))
    return [(term, found[term]) for term in nearest[:STEM_EXPANSION]]


def _vocabulary_reads(form: str) -> tuple[str, list[str]]:
    """Where the words `same_word` as `form` are in the vocabulary (sorted by code point): the
    range of words that begin with its first STEM letters (decomposed; the whole form if
    shorter), and the shorter starts of it, of CONTENT_LETTERS letters or more, that are words
    of their own ("walk" for "walked")."""
    cut = 1
    for k in range(1, len(form) + 1):
        if len(unicodedata.normalize("NFD", form[:k])) <= STEM:
            cut = k
    shorter = [
        form[:k]
        for k in range(1, cut)
        if len(unicodedata.normalize("NFD", form[:k])) >= CONTENT_LETTERS
    ]
    return form[:cut], shorter


def _without_common_words(
    terms: list[Term], forms: dict[str, list[tuple[str, int]]], total: int
) -> list[Term]:
    """Recall's terms without the spaced words that appear (in any of their forms) in too many
    messages to matter; the two least common stay if all are common."""
    spaced = [fold(t.text) for t in terms if not t.unspaced]
    if not spaced or total < COMMON_WORD_MIN_DOCS:
        return terms
    docs = {w: sum(doc for _form, doc in forms.get(w, ())) for w in spaced}
    common = {w for w in spaced if docs[w] > total * COMMON_WORD_SHARE}
    if len(common) == len(spaced):
        common -= set(sorted(spaced, key=lambda w: docs[w])[:2])
    return [t for t in terms if t.unspaced or fold(t.text) not in common]


def _in_trigrams(db: Db, trigram: str) -> bool:
    """Whether any Japanese or Chinese message holds `trigram` (a word written inside such
    text); a store with none skips that lookup."""
    row = db.select_one(
        "SELECT 1 AS found FROM message_trigram_terms WHERE term = ?", (trigram.lower(),)
    )
    return row is not None


def _phrase(text: str) -> str:
    """A string as an FTS5 phrase: quoted, so nothing in it is query syntax."""
    return '"' + text.replace('"', '""') + '"'


def _sources(
    db: Db,
    term: Term,
    *,
    recall_limit: float | None,
    recall: bool = False,
    forms: Sequence[str] = (),
) -> list[_Source]:
    """The lookups that find `term`; a message matches it when any of them finds it.
    `recall`: whole words only, in any of their `forms` (indexed words), and a short Japanese
    or Chinese term in more than `recall_limit` messages is left out like a common word."""
    text = term.text
    if not term.unspaced:
        if recall:
            words = " OR ".join(_phrase(word) for word in dict.fromkeys([text, *forms]))
        else:
            words = _phrase(text) + "*"
        sources: list[_Source] = [_Fts("message_words", words)]
        if len(text) >= 3 and _in_trigrams(db, text[:3]):
            sources.append(_Fts("message_trigrams", _phrase(text)))
        return sources
    if len(text) >= 3:
        return [_Fts("message_trigrams", _phrase(text))]
    prefix = text.lower()
    rows = db.select(
        "SELECT term, doc FROM message_trigram_terms WHERE term >= ? AND term < ? LIMIT ?",
        (prefix, prefix + _LAST_CHAR, SHORT_TERM_EXPANSION + 1),
    )
    if not rows:
        return []
    if len(rows) <= SHORT_TERM_EXPANSION:
        if recall_limit is not None and sum(int(row["doc"]) for row in rows) > recall_limit:
            return []
        return [_Fts("message_trigrams", " OR ".join(_phrase(row["term"]) for row in rows))]
    if recall:
        return []  # followed by so many characters that it is as common as a word can be
    return [_Scan(text)]


def _lookup(source: _Source, bounds: _Bounds, cap: int | None) -> tuple[str, list[object]]:
    """One source as SQL giving (id, r): r its BM25 score (0 for a scan). `cap`: only the
    newest `cap` matches."""
    tail = f" ORDER BY id DESC LIMIT {int(cap)}" if cap is not None else ""
    if isinstance(source, _Fts):
        where, params = bounds.sql("rowid")
        table = source.table
        sql = (
            f"SELECT rowid AS id, bm25({table}) AS r FROM {table} "
            f"WHERE {table} MATCH ?{where}{tail.replace('id DESC', 'rowid DESC')}"
        )
        return sql, [source.match, *params]
    where, params = bounds.sql("id")
    if bounds.conversation_id is not None:
        where += " AND conversation_id = ?"
        params.append(bounds.conversation_id)
    # Lower case only when the term has any: Japanese and Chinese have none to fold.
    text = "lower(text)" if source.needle.lower() != source.needle.upper() else "text"
    sql = f"SELECT id, 0.0 AS r FROM messages WHERE instr({text}, ?) > 0{where}{tail}"
    return sql, [source.needle.lower(), *params]


def _run(
    db: Db,
    groups: list[list[_Source]],
    bounds: _Bounds,
    limit: int,
    mode: SearchMode,
    order: SearchOrder,
    weights: Sequence[float] = (),
) -> list[SearchHit]:
    """The `limit` best messages the lookups find; `weights`: each group's (recall), which
    rank a message before its BM25 score does."""
    ordering = "score, id DESC" if order is SearchOrder.RANK else "id DESC"
    params: list[object] = []
    # Conversations deleted in the app stay stored until the session ends (undo): their
    # messages are never found. Left out after the lookups, so these must not stop early.
    hidden = [
        row["id"] for row in db.select("SELECT id FROM conversations WHERE deleted_at IS NOT NULL")
    ]
    if len(groups) == 1 and len(groups[0]) == 1:
        # One lookup (the usual query): newest first, it stops after `limit`; ranked, after
        # the newest RANKED_MATCHES. In one conversation its id range bounds the lookup, and
        # other conversations' messages inside that range are left out only afterwards.
        cap: int | None = limit if order is SearchOrder.NEWEST else RANKED_MATCHES
        if hidden or (bounds.conversation_id is not None and isinstance(groups[0][0], _Fts)):
            cap = None
        sql, params = _lookup(groups[0][0], bounds, cap)
        scored = f"SELECT id, r AS score FROM ({sql})"
    else:
        # Recall (any term) looks at the newest matches of each index; a search for every
        # term must not, or older messages with all the terms would be missed.
        cap = RANKED_MATCHES if mode is SearchMode.ANY and not hidden else None
        lookups = []
        for k, group in enumerate(groups):
            weight = float(weights[k]) if k < len(weights) else 0.0
            for source in group:
                sql, source_params = _lookup(source, bounds, cap)
                lookups.append(f"SELECT id, {k} AS k, {weight!r} AS w, r FROM ({sql})")
                params += source_params
        having = f"HAVING count(*) = {len(groups)}" if mode is SearchMode.ALL else ""
        # A message's score: the best of each group's lookups, summed over the groups, after
        # the weights of the groups it is in (BM25 scores are a few units: the weights rank
        # first, BM25 among equals).
        scored = f"""SELECT id, sum(r) - {COVERAGE!r} * sum(w) AS score FROM (
                SELECT id, k, min(r) AS r, max(w) AS w FROM ({" UNION ALL ".join(lookups)})
                GROUP BY id, k
            ) GROUP BY id {having}"""
    in_conversation, conversation_params = bounds.conversation_sql()
    if hidden:
        marks = ", ".join("?" * len(hidden))
        in_conversation += (
            f"{' AND' if in_conversation else 'WHERE'} id NOT IN "
            f"(SELECT id FROM messages WHERE conversation_id IN ({marks}))"
        )
        conversation_params = [*conversation_params, *hidden]
    # MATERIALIZED: flattened into the outer query, bm25() would leave its FTS5 cursor's
    # context. Only the `limit` best are joined with their messages.
    sql = f"""
        WITH scored(id, score) AS MATERIALIZED ({scored})
        SELECT m.id, m.conversation_id, m.role, m.speaker, m.text, m.created_at, h.score
        FROM (
            SELECT id, score FROM scored {in_conversation} ORDER BY {ordering} LIMIT {int(limit)}
        ) AS h
        JOIN messages AS m ON m.id = h.id
        ORDER BY {ordering.replace("id", "h.id").replace("score", "h.score")}"""
    rows = db.select(sql, [*params, *conversation_params])
    hits = []
    for row in rows:
        with db.decoding(f"message {row['id']}"):
            hits.append(SearchHit(**hit_fields(row), score=float(row["score"])))
    return hits


def hit_fields(row: sqlite3.Row) -> dict[str, Any]:
    """A found message's fields from its `messages` row (id, conversation_id, role, speaker,
    text, created_at), for a SearchHit or a SimilarHit."""
    return {
        "message_id": row["id"],
        "conversation_id": row["conversation_id"],
        "role": Role(row["role"]),
        "speaker": row["speaker"],
        "text": row["text"],
        "created_at": ts_from_db(row["created_at"]),
    }
