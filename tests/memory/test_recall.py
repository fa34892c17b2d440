"""Recall's choice (memory/recall.py): what is dropped, grouped, kept within the budget, and how
the excerpts read in the prompt."""

from __future__ import annotations

from dataclasses import replace

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
        "In-story time: day 2, dusk\n"
        "Messages #5-#6:\n"
        "Ann: My sister's name is Ilse and she keeps bees in Bergen.\n"
        "Wren: Ilse. I will remember the bees."
    ) in text
    assert excerpt.marker() == "Messages #5-#6 (in-story time: day 2, dusk):"


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


def test_excerpts_of_one_in_story_time_share_its_line_and_it_is_counted_once():
    first = line(3, Role.USER, "The key hangs in the lamp room.")
    second = line(9, Role.USER, "The spare key is under the mat.")
    third = line(20, Role.USER, "I lost the key at the market.")
    candidates = [
        Candidate(first, None, "day 1"),
        Candidate(second, None, "day 1"),
        Candidate(third, None, "day 2"),
    ]
    text = choose(candidates, "key").render()
    assert text.count("In-story time: day 1") == 1
    assert text.endswith(
        "In-story time: day 1\nMessage #3:\nAnn: The key hangs in the lamp room.\n\n"
        "Message #9:\nAnn: The spare key is under the mat.\n\n"
        "In-story time: day 2\nMessage #20:\nAnn: I lost the key at the market."
    )

    # The budget counts the header, each line, a label per excerpt and a time line per
    # change of time: 20 + 3 * 10 + 3 * 5 + 2 * 4 = 73 fits all three, 72 leaves one out.
    def fitting(budget: int) -> list[int]:
        return select(
            candidates,
            terms("key"),
            memory_text="",
            budget=budget,
            header_tokens=20,
            marker_tokens=5,
            time_tokens=4,
        ).message_ids

    assert fitting(73) == [103, 109, 120]
    assert len(fitting(72)) == 2


def test_a_strong_hit_is_quoted_with_the_sentence_beside_it_before_a_weak_hit_comes_in():
    """The answer often sits in the sentence after the one holding the question's words: the
    hits that hold the query's weightiest words are quoted wide first; one that holds only a
    light word of the query comes after, if the budget has room."""
    scar = ArchivedLine(
        123,
        23,
        Role.CHARACTER,
        "Wren",
        "He flexes the scarred hand. A shark took a bite. He grins at the sea.",
        30,
        short="He flexes the scarred hand. …",
        short_tokens=12,
        least="He flexes the scarred hand. …",
        least_tokens=12,
        wide="He flexes the scarred hand. A shark took a bite. …",
        wide_tokens=18,
    )
    weak = line(40, Role.USER, "My hand is cold.", 10)
    candidates = [Candidate(scar, None, None, weight=4.0), Candidate(weak, None, None, weight=1.0)]
    # 20 header + 18 wide + 5 label: the strong hit wide, no room for the weak one.
    recall = choose(candidates, "scar hand", budget=45)
    assert "A shark took a bite." in recall.render()
    assert recall.message_ids == [123]
    # With room for both, both.
    assert choose(candidates, "scar hand", budget=100).message_ids == [123, 140]


RESCUE_QUERY = "What is the name of the fisherman rescued from the sandbar?"
CAREFUL = line(200, Role.USER, "Twice means haul. Be careful, please.")
RESCUED = line(201, Role.CHARACTER, "Got him. A young fisherman. His boat broke up on the sandbar.")
ASKED = line(202, Role.USER, "Bring him in by the stove. What's his name?")
ANSWER = ArchivedLine(
    303,
    203,
    Role.CHARACTER,
    "Wren",
    "Says he's Piet Vos, from Dunmore. His boat was the Little Hen. He was alone aboard.",
    30,
    short="Says he's Piet Vos, from Dunmore. …",
    short_tokens=12,
    least="Says he's Piet Vos, from Dunmore. …",
    least_tokens=12,
    wide="Says he's Piet Vos, from Dunmore. His boat was the Little Hen. …",
    wide_tokens=20,
)
# The hit, the line it answered, the question the other speaker asked after it, the reply.
RESCUE = Candidate(RESCUED, CAREFUL, None, following=ASKED, answer=ANSWER)


def test_an_excerpt_that_ends_on_a_question_goes_on_to_the_reply_it_got():
    """Lighthouse #201-#203: the hit tells of the rescue, the next line asks the fisherman's
    name, the reply after it gives it. The excerpt goes on to the reply (whole with room, in a
    compact form with less), taken before the lesser neighbours, never cut."""
    recall = choose([RESCUE], RESCUE_QUERY)
    assert recall.message_ids == [300, 301, 302, 303]
    assert recall.render().endswith(f"Ann: {ASKED.text}\nWren: {ANSWER.text}")
    # 20 header + 5 label + 10 hit + 10 question = 45: the reply's whole 30 does not fit in 60,
    # its short 12 does; the line the hit answered (10) then does not.
    text = choose([RESCUE], RESCUE_QUERY, budget=60).render()
    assert text.endswith(f"Ann: {ASKED.text}\nWren: Says he's Piet Vos, from Dunmore. …")
    assert CAREFUL.text not in text


def test_a_reply_the_budget_has_no_room_for_is_left_out_and_changes_nothing_else():
    # 45 chosen, 57 with the reply's least form: in 56 it is left out, and the choice is what
    # it would be with no reply to quote (the line the hit answered still comes).
    recall = choose([RESCUE], RESCUE_QUERY, budget=56)
    assert "Piet Vos" not in recall.render()
    assert recall == choose([replace(RESCUE, answer=None)], RESCUE_QUERY, budget=56)
    assert recall.message_ids == [300, 301, 302]


def test_a_lesser_hit_brings_the_reply_to_the_question_after_it_at_its_least():
    """Pass 3: the hits after the best bring their neighbours at their least form, and the
    reply to the question after them too."""
    best = Candidate(SISTER, SISTER_REPLY, None, weight=4.0)
    rescue = replace(RESCUE, weight=4.0)
    # 20 header + 2 * 5 labels + 2 * 10 sister lines + 2 * 10 hit and question + 10 the line
    # the hit answered = 80; the reply's least form, 12 more, fits in 95, its wide one not.
    text = choose([best, rescue], "sister fisherman", budget=95).render()
    assert text.endswith(f"Ann: {ASKED.text}\nWren: Says he's Piet Vos, from Dunmore. …")
