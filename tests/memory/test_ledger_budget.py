"""The live ledger in the prompt stays within its share of the window, counted by a real model's
tokenizer: past it the decisions, promises and threads leave before the user's facts and rules,
the newest first (each kind keeps its oldest entries longest), and every entry stays in what the
caller keeps (nothing is dropped without being named)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kotonia_tui.domain import LedgerEnd, LedgerEntry, LedgerKind, LedgerSource, StoredLedgerEntry
from kotonia_tui.engine import LlamaEngine
from kotonia_tui.memory.ledger import carried, fit_ledger, render_ledger
from kotonia_tui.memory.readback import asks, quote
from tests.engine.test_engine import profile


@pytest.fixture(scope="module")
def engine(
    tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaEngine]:
    with LlamaEngine.open(
        profile(tiny_model_path), cache_dir=tmp_path_factory.mktemp("cache")
    ) as opened:
        yield opened


def entry(i: int, kind: LedgerKind, text: str, *, ended_by: int | None = None) -> StoredLedgerEntry:
    return StoredLedgerEntry(
        id=i,
        conversation_id=1,
        kind=kind,
        text=text,
        evidence=[i],
        chapter_id=1,
        ended_by_chapter_id=ended_by,
        end=LedgerEnd.RESOLVED if ended_by else None,
    )


def said(i: int, sentence: str) -> StoredLedgerEntry:
    """A fact the readback quoted from the user's line."""
    quoted = entry(i, LedgerKind.USER_FACT, quote(sentence))
    return quoted.model_copy(update={"source": LedgerSource.READBACK})


LEDGER = [
    entry(1, LedgerKind.USER_FACT, "Ann is allergic to walnuts"),
    entry(2, LedgerKind.DECISION, "They take the coast road, not the pass"),
    entry(3, LedgerKind.THREAD, "Who left the compass at the lighthouse"),
    entry(4, LedgerKind.CONSTRAINT, "Never call Ann by her old nickname"),
    entry(5, LedgerKind.PROMISE, "Wren promised to light the lamp every night"),
    entry(6, LedgerKind.THREAD, "Why the Grey Heron never came back"),
    entry(7, LedgerKind.USER_FACT, "Ann's brother sailed on the Grey Heron in 1911"),
    entry(8, LedgerKind.THREAD, "Where the spare key is", ended_by=2),
]


def test_a_ledger_within_its_share_is_carried_whole(engine: LlamaEngine) -> None:
    whole = engine.count_tokens(render_ledger(LEDGER))
    fit = fit_ledger(LEDGER, whole, engine.count_tokens)
    assert [e.id for e in fit.shown] == [1, 2, 3, 4, 5, 6, 7]  # the resolved thread is not live
    assert fit.left_out == ()


def test_over_its_share_the_newest_leave_first_and_the_users_facts_and_rules_last(
    engine: LlamaEngine,
) -> None:
    whole = engine.count_tokens(render_ledger(LEDGER))
    budget = whole * 2 // 3
    fit = fit_ledger(LEDGER, budget, engine.count_tokens)
    shown_text = render_ledger(fit.shown)
    assert engine.count_tokens(shown_text) <= budget
    out = [e.id for e in fit.left_out]
    # Decisions, promises and threads leave first: the second thread (6), then each kind's
    # oldest, newest first; the user's facts and rules only after them.
    assert sorted(out) == sorted([6, 5, 3, 2][: len(out)]) and out
    assert {1, 4, 7} <= {e.id for e in fit.shown}
    # Nothing vanishes: what the prompt carries and what it leaves out are the live ledger.
    assert sorted(e.id for e in (*fit.shown, *fit.left_out)) == [1, 2, 3, 4, 5, 6, 7]
    # What a memory block carries is read back from its text, exactly.
    assert carried(LEDGER, shown_text) == {e.id for e in fit.shown}

    # Room for about one entry: the user's first statement is the last to go.
    room = engine.count_tokens(render_ledger([LEDGER[0]]))
    tight = fit_ledger(LEDGER, room, engine.count_tokens)
    assert [e.id for e in tight.shown] == [1]
    assert [e.id for e in tight.left_out] == [2, 3, 4, 5, 6, 7]


def test_a_long_run_of_the_users_facts_keeps_their_first_fact_and_their_first_rule(
    engine: LlamaEngine,
) -> None:
    # The user's name first, one rule, then many facts (a chapter's readback quotes are facts),
    # and a few decisions: the name and the rule hold, whatever came after them.
    ledger = [
        entry(1, LedgerKind.USER_FACT, "The user's name is Mara Ostrowski"),
        entry(2, LedgerKind.CONSTRAINT, "Never describe violence in detail"),
        *(
            entry(i, LedgerKind.USER_FACT, f"Mara said the ferry leaves at {i} past the hour")
            for i in range(3, 23)
        ),
        *(entry(i, LedgerKind.DECISION, f"They repair bridge {i} first") for i in range(23, 26)),
    ]
    room = engine.count_tokens(render_ledger(ledger[:6]))
    fit = fit_ledger(ledger, room, engine.count_tokens)
    shown = [e.id for e in fit.shown]
    assert 1 in shown and 2 in shown
    # The facts the prompt keeps are the oldest; every decision left before any of them.
    facts = [i for i in shown if 3 <= i < 23]
    assert facts == list(range(3, 3 + len(facts)))
    assert not {23, 24, 25} & set(shown)
    assert sorted(shown + [e.id for e in fit.left_out]) == list(range(1, 26))


def test_a_zero_share_carries_no_ledger(engine: LlamaEngine) -> None:
    fit = fit_ledger(LEDGER, 0, engine.count_tokens)
    assert fit.shown == () and len(fit.left_out) == 7
    assert render_ledger(fit.shown) == ""


def test_at_one_depth_the_users_own_words_outlast_what_the_chronicler_wrote(
    engine: LlamaEngine,
) -> None:
    # A small chronicler's fact may be wrong; the readback's quotes are the user's sentences.
    # The chronicler's facts and the quotes each keep their oldest longest (neither pile pushes
    # the other's first out), and at one depth the chronicler's entry leaves first.
    ledger = [
        entry(1, LedgerKind.USER_FACT, "The user is going to the shop to buy a new umbrella"),
        said(2, "My name is Mara and I was born in 1987."),
        entry(3, LedgerKind.USER_FACT, "The user plans to buy a second umbrella"),
        said(4, "My sister Ilse marries on the 14th of May."),
        said(5, "The room costs 300 crowns."),
        entry(6, LedgerKind.DECISION, "They take the coast road"),
    ]

    def fit_for(ids: list[int]) -> tuple[list[int], list[int]]:
        room = engine.count_tokens(render_ledger([e for e in ledger if e.id in ids]))
        fit = fit_ledger(ledger, room, engine.count_tokens)
        assert engine.count_tokens(render_ledger(fit.shown)) <= room
        assert sorted(e.id for e in (*fit.shown, *fit.left_out)) == [1, 2, 3, 4, 5, 6]
        return [e.id for e in fit.shown], [e.id for e in fit.left_out]

    # Room for one entry: of the two oldest, the user's own sentence stays.
    assert fit_for([2]) == ([2], [1, 3, 4, 5, 6])
    # Room for two: each group's oldest.
    assert fit_for([1, 2]) == ([1, 2], [3, 4, 5, 6])
    # Room for three: at depth 1 the quote outlasts the chronicler's second fact.
    assert fit_for([1, 2, 4]) == ([1, 2, 4], [3, 5, 6])


def test_a_question_the_user_asked_leaves_before_the_facts_they_stated(
    engine: LlamaEngine,
) -> None:
    # The readback quotes any user sentence with a name or a number, questions too. A question
    # states nothing the user holds: it leaves before their facts, after the chronicler's
    # decisions, whatever its age.
    ledger = [
        said(1, "My name is Mara Quill."),
        said(2, "Were you really the navigator of the Grey Heron?"),
        said(3, "My sister Ines is a nurse in Portcallow."),
        said(4, "I promise to come back on Friday."),
        entry(5, LedgerKind.DECISION, "They open the case on Friday"),
    ]
    room = engine.count_tokens(render_ledger([ledger[0], ledger[2], ledger[3]]))
    fit = fit_ledger(ledger, room, engine.count_tokens)
    assert [e.id for e in fit.shown] == [1, 3, 4]
    assert [e.id for e in fit.left_out] == [2, 5]
    # With room for one more, the question comes back before the decision.
    room = engine.count_tokens(render_ledger(ledger[:4]))
    assert [e.id for e in fit_ledger(ledger, room, engine.count_tokens).shown] == [1, 2, 3, 4]


def _entry(sentence: str, source: LedgerSource = LedgerSource.READBACK) -> LedgerEntry:
    text = quote(sentence) if source is LedgerSource.READBACK else sentence
    return LedgerEntry(conversation_id=1, kind=LedgerKind.USER_FACT, text=text, source=source)


def test_what_counts_as_a_question_the_user_asked() -> None:
    assert asks(_entry("Were you really the navigator of the Grey Heron?"))
    assert asks(_entry('*I lean closer.* "Why did you come to Saltmere in 1911?"'))
    assert asks(_entry("你什么时候去杭州？"))
    assert asks(_entry("¿Dónde está el faro de 1887?"))
    # Statements, an indirect question, and a question the chronicler wrote (not a quote).
    assert not asks(_entry("My name is Mara Quill."))
    assert not asks(_entry("I ask if the log on the shelf is from the Grey Heron."))
    assert not asks(_entry("What a storm! The bell fell in 1887."))
    assert not asks(_entry("Who left the compass at the lighthouse?", LedgerSource.CHRONICLER))
    # The source decides, not the text: a chronicler's line written like a quote is not one.
    assert not asks(_entry('said "Who left the compass?"', LedgerSource.CHRONICLER))
