"""Recall's choice (memory/recall.py): what is dropped, grouped, kept within the budget, and how
the excerpts read in the prompt."""

from __future__ import annotations

from kotonia_tui.domain import Message, Role
from kotonia_tui.memory.recall import (
    RECALL_HEADER,
    ArchivedLine,
    Candidate,
    LeftOutReason,
    already_stated,
    matching_words,
    recall_query,
    select,
)
from kotonia_tui.terms import recall_terms


def line(number: int, role: Role, text: str, tokens: int = 10) -> ArchivedLine:
    speaker = "Ann" if role is Role.USER else "Wren"
    return ArchivedLine(100 + number, number, role, speaker, text, tokens)


def terms(query: str):
    return recall_terms(query)


def choose(candidates, query, *, memory="", budget=1000):
    return select(
        candidates,
        terms(query),
        memory_text=memory,
        budget=budget,
        header_tokens=20,
        marker_tokens=5,
    )


SISTER = line(5, Role.USER, "My sister's name is Ilse and she keeps bees in Bergen.")
SISTER_REPLY = line(6, Role.CHARACTER, "Ilse. I will remember the bees.")


def test_a_hit_brings_its_reply_marked_with_number_and_story_time_under_the_record_header():
    recall = choose([Candidate(SISTER, SISTER_REPLY, "day 2, dusk")], "her sister's name?")
    assert recall.message_ids == [105, 106]
    (excerpt,) = recall.excerpts
    assert excerpt.hits == (105,)
    assert excerpt.words == ("sister", "name")
    text = recall.render()
    assert text.startswith(RECALL_HEADER)
    assert "not instructions" in RECALL_HEADER
    assert (
        "Messages #5-#6 (in-story time: day 2, dusk):\n"
        "Ann: My sister's name is Ilse and she keeps bees in Bergen.\n"
        "Wren: Ilse. I will remember the bees."
    ) in text


def test_what_the_memory_already_states_is_left_out_and_said_why():
    memory = "## Chapter 1\nAnn's sister Ilse keeps bees in Bergen; her name is Ilse."
    recall = choose([Candidate(SISTER, SISTER_REPLY, None)], "sister name", memory=memory)
    assert recall.excerpts == ()
    (left,) = recall.left_out
    assert (left.message_id, left.reason) == (105, LeftOutReason.STATED)
    # A memory that only paraphrases (the place and the bees lost) keeps the excerpt.
    assert not already_stated(SISTER.text, "Ann has a sister called Ilse.")


def test_the_budget_leaves_a_group_out_whole_and_a_smaller_one_after_it_still_fits():
    long_hit = line(40, Role.USER, "The lamp oil came on the Margery, forty gallons.", 300)
    small_hit = line(80, Role.CHARACTER, "The Margery is late again.", 12)
    recall = choose(
        [Candidate(long_hit, None, None), Candidate(small_hit, None, None)],
        "When does the Margery come?",
        budget=100,
    )
    assert recall.message_ids == [180]
    assert [(x.message_id, x.reason) for x in recall.left_out] == [(140, LeftOutReason.BUDGET)]
    # Nothing is cut: a line is quoted whole or not at all.
    assert small_hit.text in recall.render()
    assert long_hit.text not in recall.render()


def test_zero_budget_recalls_nothing():
    recall = choose([Candidate(SISTER, SISTER_REPLY, None)], "sister", budget=0)
    assert recall.excerpts == () and recall.render() == ""


def test_touching_groups_become_one_excerpt_in_story_order():
    a = line(7, Role.USER, "Where is the key to the lamp room?")
    a_reply = line(8, Role.CHARACTER, "Under the brass bell.")
    b = line(9, Role.USER, "And the key to the cellar?")
    b_reply = line(10, Role.CHARACTER, "On the hook by the door.")
    recall = choose([Candidate(b, b_reply, None), Candidate(a, a_reply, "day 1")], "key")
    (excerpt,) = recall.excerpts
    assert [x.number for x in excerpt.lines] == [7, 8, 9, 10]
    assert excerpt.hits == (107, 109)
    assert excerpt.marker() == "Messages #7-#10 (in-story time: day 1):"


def test_a_neighbour_found_by_the_query_too_is_quoted_once():
    recall = choose(
        [Candidate(SISTER, SISTER_REPLY, None), Candidate(SISTER_REPLY, SISTER, None)],
        "Ilse bees",
    )
    assert recall.message_ids == [105, 106]
    assert recall.excerpts[0].hits == (105, 106)


def test_the_query_is_the_new_message_and_the_reply_before_it():
    window = [
        Message(role=Role.USER, speaker="Ann", text="old line"),
        Message(role=Role.CHARACTER, speaker="Wren", text="the last reply"),
        Message(role=Role.USER, speaker="Ann", text="the new message"),
    ]
    assert recall_query(window) == "the new message\nthe last reply"
    assert recall_query(window[:1]) == "old line"
    assert recall_query([]) == ""


def test_matching_words_are_whole_words_and_japanese_pairs():
    assert matching_words("The lighthouse keeper", terms("light keeper")) == ("keeper",)
    found = matching_words("妹の名前はイルゼです", terms("妹の名前は?"))
    assert found == ("妹の", "の名", "名前", "前は")
