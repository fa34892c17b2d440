"""Grading maths: normalisation (EN/JA/ZH), exact match, token F1, verdicts, question parsing,
question-to-range assignment and the recall curve."""

from __future__ import annotations

import pytest

from kotonia_tui.eval.dataset import EvalQuestion
from kotonia_tui.eval.examiner import clean_answer, parse_questions
from kotonia_tui.eval.grading import (
    answer_tokens,
    exact_match,
    is_short,
    lexical_grade,
    parse_verdict,
    says_unknown,
    token_f1,
)
from kotonia_tui.eval.harness import Graded, assign, recall_curve
from kotonia_tui.eval.replay import Range
from kotonia_tui.eval.results import Spread


def test_english_normalisation_drops_case_punctuation_and_articles():
    assert answer_tokens("The  Albatross!") == ["albatross"]
    assert answer_tokens("Ninety-one steps.") == ["91", "steps"]
    assert exact_match("the Albatross", "Albatross")
    assert exact_match("It was Tomas, his brother.", "Tomas")
    assert not exact_match("Thomas", "Tomas")


def test_cjk_is_compared_character_by_character():
    assert answer_tokens("灯台守") == ["灯", "台", "守"]
    assert answer_tokens("林晚舟的猫") == ["林", "晚", "舟", "的", "猫"]
    # Full-width forms fold to ASCII (NFKC), and Latin words stay whole beside kana.
    assert answer_tokens("ＯＫ、Soot ちゃん") == ["ok", "soot", "ち", "ゃ", "ん"]
    assert token_f1("灯台守", "灯台") == pytest.approx(0.8)
    assert token_f1("猫です", "犬です") == pytest.approx(2 / 3)
    assert exact_match("答えは十四フィート", "十四フィート")


def test_token_f1_values():
    assert token_f1("fourteen feet", "fourteen feet") == 1.0
    assert token_f1("twenty feet", "fourteen feet") == pytest.approx(0.5)
    assert token_f1("", "anything") == 0.0
    assert token_f1("completely different", "fourteen feet") == 0.0
    # Repeated tokens count once per occurrence on both sides.
    assert token_f1("no no no", "no") == pytest.approx(0.5)


def test_lexical_grade_only_for_short_references():
    assert is_short("the Margery")
    long_ref = "the sandbar moves after every storm and only a keeper on the spot can see it"
    assert not is_short(long_ref)
    assert lexical_grade("Margery", "the Margery").exact is True
    grade = lexical_grade("anything", long_ref)
    assert grade.exact is None and grade.f1 is None


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("yes", True),
        ("Yes.", True),
        (" correct", True),
        ("no", False),
        ("No, it is not", False),
        ("incorrect", False),
        ("not correct", False),
        ("はい", True),
        ("いいえ", False),
        ("是", True),
        ("否", False),
        ("maybe", None),
        ("", None),
    ],
)
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) is verdict


def test_unknown_answers_need_no_judge():
    for text in (
        "unknown",
        "Unknown.",
        "I don't know",
        "",
        "  ",
        "[missing]",
        "わかりません",
        "不知道",
    ):
        assert says_unknown(text), text
    assert not says_unknown("the unknown sailor")


def test_parse_questions_pairs_and_limits():
    text = (
        "Q: Who keeps the light?\nA: Corwin\n"
        "1. Q: What is the cat called?\nA: Soot\n"
        "Q: A question with no answer\n"
        "Question 3: How many steps?\nAnswer: ninety-one\n"
        "Q: Who keeps the light?\nA: Corwin again\n"
    )
    pairs = parse_questions(text, limit=10)
    assert [(p.question, p.answer) for p in pairs] == [
        ("Who keeps the light?", "Corwin"),
        ("What is the cat called?", "Soot"),
        ("How many steps?", "ninety-one"),
    ]
    assert len(parse_questions(text, limit=2)) == 2
    assert parse_questions("nothing useful", limit=3) == []
    assert clean_answer("  Soot\nAnd then the story goes on") == "Soot"


def _range(index, first, last, folded=True):
    return Range(index, first, last, first, last, last - first + 1, 10, folded)


def test_questions_go_to_the_range_of_their_newest_evidence():
    ranges = [_range(0, 1, 10), _range(1, 11, 20), _range(2, 21, 25, folded=False)]
    questions = [
        EvalQuestion(id="a", question="a?", answer="a", evidence=[3]),
        EvalQuestion(id="b", question="b?", answer="b", evidence=[3, 15]),  # resolved later
        EvalQuestion(id="c", question="c?", answer="c", evidence=[12]),
        EvalQuestion(id="d", question="d?", answer="d", evidence=[25]),
        EvalQuestion(id="e", question="e?", answer="e", evidence=[99]),  # outside: dropped
    ]
    assigned = assign(questions, ranges, per_range=5)
    assert [(q.id, r) for q, r in assigned] == [("a", 0), ("b", 1), ("c", 1), ("d", 2)]
    capped = assign(questions, ranges, per_range=1)
    assert [(q.id, r) for q, r in capped] == [("a", 0), ("b", 1), ("d", 2)]


def test_recall_curve_and_spread():
    q = EvalQuestion(id="x", question="x", answer="x", evidence=[1])
    graded = [
        Graded(q, 0, correct=True),
        Graded(q, 0, correct=False),
        Graded(q, 2, correct=True),
    ]
    assert recall_curve(graded, 3) == [0.5, None, 1.0]
    assert Spread.of([0.2, 0.4, 0.9]) == Spread(min=0.2, mean=0.5, max=0.9)
    assert Spread.of([]) is None


def test_english_number_words_match_digits():
    assert answer_tokens("ninety-one steps") == ["91", "steps"]
    assert exact_match("40 yards.", "forty yards")
    assert exact_match("Fourteen feet loaded", "14 feet")
    assert token_f1("twenty", "20") == 1.0
    assert not exact_match("14.", "twenty")


def test_combined_grade_overrules_a_yes_with_nothing_in_common():
    from kotonia_tui.eval.grading import LexicalGrade
    from kotonia_tui.eval.harness import combine

    assert combine(None, lexical_grade("It was the Margery", "the Margery"))  # exact: no judge
    assert not combine(True, lexical_grade("14.", "twenty"))  # a yes for nothing in common
    assert combine(True, lexical_grade("a cook", "the cook on the steamer"))  # shares a token
    assert not combine(False, lexical_grade("a cook", "the cook on the steamer"))
    # A word like "is" or "of" in common is nothing in common: a yes needs a content word.
    assert not combine(True, lexical_grade("Mara is a good woman.", "she is afraid of heights"))
    assert not combine(True, lexical_grade("in the 1890s.", "in the boathouse under the net"))
    assert combine(True, lexical_grade("Heights scare her.", "she is afraid of heights"))
    assert combine(True, lexical_grade("Fourteen, loaded.", "14 feet"))  # a number word
    # A reference without a content word: any token in common lets the yes stand.
    assert lexical_grade("It went to her.", "to her").shares_content is None
    assert combine(True, lexical_grade("It went to her.", "to her"))
    assert not combine(True, lexical_grade("no", "to her"))
    assert combine(True, LexicalGrade(None, None))  # a long reference: the judge decides
    assert not combine(None, LexicalGrade(None, None))


def test_judge_prompt_has_worked_examples():
    from kotonia_tui.eval.examiner import JUDGE, JUDGE_EXAMPLES, judge_request

    request = judge_request("Q?", "ref", "ans")
    verdicts = [m.content for m in request.messages if m.name == JUDGE]
    assert verdicts == [example[3] for example in JUDGE_EXAMPLES]
    assert request.messages[-1].content.endswith("Answer to grade: ans")
