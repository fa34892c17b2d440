"""Where a sentence ends (kotonia_tui/sentences.py), and that the readback, the extract and the
memory audit, which all cut text into sentences, cut it at the same places."""

from __future__ import annotations

import pytest

from kotonia_tui import terms
from kotonia_tui.domain import Message, Role
from kotonia_tui.eval.audit import sentences as audit_sentences
from kotonia_tui.memory.extract import ELISION, Passage, extract_passages
from kotonia_tui.memory.readback import quoted_lines
from kotonia_tui.sentences import sentences

# Each text with its sentences. Every sentence holds a number of its own, so the readback,
# which quotes the user's sentences that hold a number, shows where it cut.
HARD_CASES = [
    pytest.param(
        "Dr. Mara Lind met Mr. J. R. Rowan at 14:30. He paid 3.50 on shop.example.com for 2 maps.",
        [
            "Dr. Mara Lind met Mr. J. R. Rowan at 14:30.",
            "He paid 3.50 on shop.example.com for 2 maps.",
        ],
        id="abbreviations, initials, decimals and a domain",
    ),
    pytest.param(
        '*She nods 2 times.* "Welcome to room 12." He said "No 3!" and left at 9.',
        ["*She nods 2 times.*", '"Welcome to room 12."', 'He said "No 3!" and left at 9.'],
        id="quotes and action marks",
    ),
    pytest.param(
        "Wait... what, 5? I waited 10 minutes... Then 7 came. Well… no, 4.",
        ["Wait... what, 5?", "I waited 10 minutes...", "Then 7 came.", "Well… no, 4."],
        id="ellipses",
    ),
    pytest.param(
        "「東京へ3日に行きます。」彼は5時に言った。本当に6回？うん、7回！",
        ["「東京へ3日に行きます。」", "彼は5時に言った。", "本当に6回？", "うん、7回！"],
        id="CJK full stops with no spaces",
    ),
    pytest.param(
        "I live at 42 Elm Road.\nMy sister is 9\n\n- and 3 cats.",
        ["I live at 42 Elm Road.", "My sister is 9", "- and 3 cats."],
        id="line breaks",
    ),
]


@pytest.mark.parametrize(("text", "expected"), HARD_CASES)
def test_the_splitter_cuts_the_hard_cases_where_a_reader_would(text: str, expected: list[str]):
    assert sentences(text) == expected


def _whole_sentences(quoted: str, expected: list[str]) -> bool:
    """Whether an extract's quoted line is whole sentences of `expected`, in order, joined by
    a space (neighbours) or " … " (some left out between), with "… " and " …" at its ends
    where it leaves out the first or the last."""
    rest = quoted.removeprefix("… ")
    taken = 0
    for sentence in expected:
        if not rest.startswith(sentence):
            continue
        taken += 1
        rest = rest[len(sentence) :]
        for joint in (" … ", " …", " "):
            if rest.startswith(joint):
                rest = rest[len(joint) :]
                break
    return taken > 0 and rest == ""


@pytest.mark.parametrize(("text", "expected"), HARD_CASES)
def test_readback_extract_and_audit_cut_the_same_sentences(text: str, expected: list[str]):
    """Each user cuts the hard cases into the splitter's sentences: the readback quotes the
    sentence that holds each missing number, whole; the extract quotes whole sentences only;
    the audit judges the same sentences (less a list item's bullet)."""
    message = Message(id=1, role=Role.USER, speaker="Ann", text=text)
    firsts = [terms.numbers(sentence)[0] for sentence in expected]
    assert [quoted for _message, quoted in quoted_lines([message], firsts)] == expected

    # At the longest sentence's size the extract must leave some out, and quotes the rest whole.
    limit = max(len(sentence) for sentence in expected) + len(ELISION)
    label, _, quoted = extract_passages([Passage("#1 Ann", text)], limit).partition(": ")
    assert label == "#1 Ann"
    assert _whole_sentences(quoted, expected), quoted

    assert audit_sentences(text) == [sentence.strip(" -*•\t") for sentence in expected]
