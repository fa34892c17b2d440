"""Who answers in a group (chat/speakers.py): pure functions, seeded draws."""

from __future__ import annotations

import random

from kotonia_tui.chat.speakers import (
    Speaker,
    named_in,
    natural_order,
    next_auto_speaker,
    reply_plan,
    talkativeness,
)
from kotonia_tui.domain import ReplyOrder

ROWAN = Speaker("rowan", "Rowan Ashby", 0.5)
LIN = Speaker("lin", "林晚舟", 0.5)
MIRA = Speaker("mira", "Mira", 0.5)


def test_a_member_named_in_the_last_message_answers_first_in_the_order_named() -> None:
    cast = [ROWAN, LIN, MIRA]
    text = "Mira, pour the tea. 林晚舟さん、こちらへ。"
    silent = [Speaker(s.key, s.name, 0.0) for s in cast]
    assert natural_order(silent, text, None, random.Random(1)) == ["mira", "lin"]
    # A first name alone names the member ("Rowan" for Rowan Ashby), in any case.
    assert [s.key for s in named_in("where is ROWAN?", cast)] == ["rowan"]
    assert named_in("Rowanberry jam", cast) == []  # not the word Rowan


def test_then_by_talkativeness_the_most_talkative_first() -> None:
    chatty = Speaker("chatty", "Chatty", 1.0)
    quiet = Speaker("quiet", "Quiet", 0.0)
    middle = Speaker("middle", "Middle", 0.99)
    # Cast order quiet, middle, chatty; nobody named: chatty then middle (always draws under
    # 0.99 with this seed), quiet never.
    order = natural_order([quiet, middle, chatty], "Hello, all.", None, random.Random(3))
    assert order == ["chatty", "middle"]
    # Named members first, then the talkative ones.
    assert natural_order([quiet, middle, chatty], "Quiet?", None, random.Random(3)) == [
        "quiet",
        "chatty",
        "middle",
    ]


def test_natural_order_never_falls_silent_and_never_answers_its_own_line() -> None:
    cast = [Speaker("a", "Ann", 0.0), Speaker("b", "Bea", 0.0)]
    for seed in range(20):
        picks = natural_order(cast, "Ann speaks of herself.", "a", random.Random(seed))
        assert picks == ["b"]  # named itself, but it spoke last: the other one is drawn


def test_muted_members_never_answer_in_any_order() -> None:
    muted = Speaker("mira", "Mira", 1.0, muted=True)
    cast = [ROWAN, muted, LIN]
    for order in ReplyOrder:
        assert "mira" not in reply_plan(order, cast, "Mira!", None, random.Random(0))
    assert reply_plan(ReplyOrder.LIST, cast, "", None, random.Random(0)) == ["rowan", "lin"]
    assert reply_plan(ReplyOrder.MANUAL, cast, "Mira!", None, random.Random(0)) == []


def test_auto_goes_round_the_list_after_the_last_speaker() -> None:
    cast = [ROWAN, LIN, MIRA]
    rng = random.Random(0)
    assert next_auto_speaker(ReplyOrder.LIST, cast, "", "lin", rng) == "mira"
    assert next_auto_speaker(ReplyOrder.LIST, cast, "", "mira", rng) == "rowan"
    assert next_auto_speaker(ReplyOrder.MANUAL, cast, "", None, rng) == "rowan"
    only = [ROWAN, Speaker("lin", "林晚舟", muted=True)]
    assert next_auto_speaker(ReplyOrder.LIST, only, "", "rowan", rng) is None
    # Natural: the member the last line calls on.
    assert next_auto_speaker(ReplyOrder.NATURAL, cast, "Mira?", "rowan", rng) == "mira"


def test_talkativeness_reads_numbers_and_strings_within_0_and_1() -> None:
    assert talkativeness({"talkativeness": "0.8"}) == 0.8
    assert talkativeness({"talkativeness": 3}) == 1.0
    assert talkativeness({"talkativeness": "loud"}) == 0.5
    assert talkativeness({}) == 0.5
