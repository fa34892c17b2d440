"""Grounding: an item of a chapter rests on the messages it cites, or it is not memory.

The invention is the one the embedded 270M base model wrote into every chapter of a ten-turn
chat ("User says: I'm going to the shop to buy a new umbrella,"); the paraphrases are what a
capable model writes for the same lines."""

from __future__ import annotations

import json
from collections.abc import Mapping

from kotonia_tui.domain import LedgerKind, Message, Role
from kotonia_tui.memory.grounding import GroundedProse, ground_prose, grounded, says_again
from kotonia_tui.memory.structured import (
    Dropped,
    DropReason,
    StructuredChapter,
    dropped_of,
    parse_answer,
    read_chapter,
)

CAST = ("Piet", "Mara")
SISTER = "My sister Ilse marries on the 14th, and I still have no dress."
INVENTED = "User says: I'm going to the shop to buy a new umbrella,"


def test_a_paraphrase_is_grounded_and_an_invention_is_not() -> None:
    assert grounded("Mara's sister Ilse is getting married", [SISTER], CAST)
    assert grounded("Mara tells Piet her sister Ilse marries on the 14th", [SISTER], CAST)
    assert not grounded(INVENTED, [SISTER], CAST)
    assert not grounded("Mara is allergic to peanuts", [SISTER], CAST)


def test_inflections_count_and_numbers_must_match_whole() -> None:
    source = ["I can't eat peanuts, it's an allergy. The room costs 40 a night."]
    assert grounded("Mara is allergic to peanuts", source, CAST)
    assert grounded("The room costs 40 a night", source, CAST)
    assert not grounded("The room costs 75 a night", source, CAST)


def test_the_cast_names_alone_ground_nothing() -> None:
    # The names are in the source, but the content is not: still an invention.
    assert not grounded("Piet and Mara went sailing to Harwick", ["Piet? Mara is here."], CAST)


def test_japanese_by_bigrams() -> None:
    source = ["妹のイルセが14日に結婚します。まだドレスがありません。"]
    cast = ("ピート", "マラ")
    assert grounded("マラの妹イルセが結婚する", source, cast)
    assert not grounded("マラは新しい傘を買いに店へ行く", source, cast)


def test_chinese_by_bigrams() -> None:
    source = ["我妹妹伊尔莎14号结婚，我还没有裙子。"]
    cast = ("皮特", "玛拉")
    assert grounded("玛拉的妹妹伊尔莎要结婚了", source, cast)
    assert not grounded("玛拉要去商店买一把新雨伞", source, cast)


MESSAGES = [
    Message(id=1, role=Role.USER, speaker="Mara", text=SISTER),
    Message(
        id=2,
        role=Role.CHARACTER,
        speaker="Piet",
        text='"I was a sailor once," Piet says. He has never left the village.',
    ),
]


def _chapter(answer: Mapping[str, object]) -> StructuredChapter:
    return read_chapter(
        parse_answer(json.dumps(answer)),
        MESSAGES,
        char="Piet",
        user="Mara",
        open_threads=[],
        replaceable=[],
    )


def _claims(answer: Mapping[str, object]) -> list[str]:
    return [x.text for x in _chapter(answer).claims]


def test_read_chapter_drops_the_invention_in_every_list_it_wrote() -> None:
    answer = {
        "events": [
            {"event": INVENTED, "ids": [1]},
            {"event": "Ilse marries on the 14th", "ids": [1]},
        ],
        "user_facts": [
            {"fact": INVENTED, "ids": [1]},
            {"fact": "Mara's sister Ilse is getting married", "ids": [1]},
        ],
        "rules": [{"rule": INVENTED, "ids": [1]}],
        "open_threads": [{"thread": INVENTED, "ids": [1]}],
        "promises": [{"promise": INVENTED, "ids": [2]}],
        "decisions": [{"decision": INVENTED, "because": "", "rejected": "", "ids": [2]}],
    }
    chapter = _chapter(answer)
    assert [x.text for x in chapter.events] == ["Ilse marries on the 14th"]
    assert [(x.kind, x.text) for x in chapter.ledger] == [
        (LedgerKind.USER_FACT, "Mara's sister Ilse is getting married")
    ]
    # Each item left out is kept with its reason, as the chapter stores it.
    expected = [
        Dropped(name, INVENTED, DropReason.NOT_GROUNDED)
        for name in ("events", "user_facts", "rules", "decisions", "promises", "open_threads")
    ]
    assert list(chapter.dropped) == expected
    assert dropped_of(chapter.to_json()) == expected


def test_each_check_says_why_it_drops_an_item() -> None:
    chapter = _chapter(
        {
            "events": [
                {"event": "Ilse marries on the 14th", "ids": [1]},
                {"event": "Ilse marries on the 14th!", "ids": [1]},  # the same terms again
                {"event": "", "ids": [1]},
            ],
            "claims": [{"said": "Ilse marries on the 14th", "in_fact": "", "ids": [1]}],
            "resolved": [{"thread": "T9", "how": "", "ids": [1]}],
        }
    )
    assert [(d.field, d.reason) for d in chapter.dropped] == [
        ("events", DropReason.REPEATED),
        ("events", DropReason.NO_TEXT),
        ("claims", DropReason.EVENT_AGAIN),
        ("resolved", DropReason.NOT_OPEN),
    ]


def test_a_claims_in_fact_may_rest_on_another_message_of_the_range() -> None:
    # "said" rests on the cited line; what is in fact true is in the narration (here of the
    # same message; any message of the range would do). An "in fact" that no message holds is
    # left out, and its claim kept as a plain statement.
    claims = _claims(
        {
            "claims": [
                {
                    "said": "he was a sailor once",
                    "in_fact": "He never left the village",
                    "ids": [2],
                },
                {
                    "said": "he never left the village",
                    "in_fact": "He sold umbrellas at the market",
                    "ids": [2],
                },
            ]
        }
    )
    assert claims == [
        "On the surface: Piet told Mara: he was a sailor once In fact: He never left the village",
        "Piet told Mara: he never left the village",
    ]


def test_an_item_cited_to_the_wrong_message_is_told_by_the_one_that_holds_it() -> None:
    # The words are in the range (Mara's message 1), but the claim cites Piet's message 2: the
    # 270M cites the wrong lines. The claim is Mara's, and cites her message.
    chapter = _chapter({"claims": [{"said": "her sister Ilse marries", "in_fact": "", "ids": [2]}]})
    assert [(x.text, x.evidence) for x in chapter.claims] == [
        ("Mara told Piet: her sister Ilse marries", (1,))
    ]
    # A user fact is looked for in the user's lines only: Piet's sailing is not Mara's fact.
    chapter = _chapter(
        {
            "user_facts": [
                {"fact": "Mara's sister Ilse is getting married", "ids": [2]},
                {"fact": "Mara was a sailor once", "ids": [2]},
            ]
        }
    )
    assert [(x.text, x.evidence) for x in chapter.ledger] == [
        ("Mara's sister Ilse is getting married", (1,))
    ]
    # What no message holds stays out, whatever it cites.
    assert _claims({"claims": [{"said": INVENTED, "in_fact": "", "ids": [1, 2]}]}) == []


def test_one_line_copied_into_every_list_is_ledgered_once() -> None:
    # The 270M wrote the user's line as a fact, a rule, a promise and an open thread, framed
    # or not ("User says: ..."): four entries of the ledger's share for one sentence. The first
    # kind keeps it.
    line = "Mara says her sister Ilse marries on the 14th."
    answer = {
        "user_facts": [{"fact": line, "ids": [1]}],
        "rules": [{"rule": line.rstrip("."), "ids": [1]}],
        "promises": [{"promise": f"User says: {line.upper()}", "ids": [1]}],
        "open_threads": [
            {"thread": line, "ids": [1]},
            {"thread": "Whether Piet ever left the village", "ids": [2]},
        ],
    }
    assert [(x.kind, x.text) for x in _chapter(answer).ledger] == [
        (LedgerKind.USER_FACT, line),
        (LedgerKind.THREAD, "Whether Piet ever left the village"),
    ]


def test_an_in_fact_that_only_says_the_claim_again_is_no_contradiction() -> None:
    claims = _claims(
        {
            "claims": [
                {
                    "said": "my sister Ilse marries on the 14th",
                    "in_fact": "Mara says Ilse marries on the 14th",
                    "ids": [1],
                }
            ]
        }
    )
    assert claims == ["Mara told Piet: my sister Ilse marries on the 14th"]


def test_a_claim_that_says_an_event_again_is_not_kept_twice_unless_it_is_a_lie() -> None:
    chapter = _chapter(
        {
            "events": [
                {"event": "User says: my sister Ilse marries on the 14th", "ids": [1]},
                {"event": "Piet says he was a sailor once", "ids": [2]},
            ],
            "claims": [
                {"said": "my sister Ilse marries on the 14th", "in_fact": "", "ids": [1]},
                {
                    "said": "he was a sailor once",
                    "in_fact": "He never left the village",
                    "ids": [2],
                },
            ],
        }
    )
    assert len(chapter.events) == 2
    assert [x.text for x in chapter.claims] == [
        "On the surface: Piet told Mara: he was a sailor once In fact: He never left the village"
    ]


def test_a_text_that_says_nothing_its_base_did_not() -> None:
    base = "Ann came to the lighthouse in a storm to find her brother Tom. (#3 #4)"
    assert says_again(base, base)
    assert says_again("Ann came to the lighthouse. (#9)", base)  # a part; ids aside
    assert says_again("Ann finds lighthouses in storms.", base)  # inflections
    assert says_again("Ann and Tom.", base, ["Ann", "Tom"])  # names only: nothing
    assert not says_again("Ann sold the compass for 40 crowns.", base)
    assert not says_again("Ann came to the lighthouse in 1911.", base)  # a number
    zh = "安在暴风雨夜来到灯塔找哥哥。"
    assert says_again("来到灯塔。", zh)
    assert not says_again("任给她看了罗盘。", zh)


def test_an_item_that_holds_a_number_and_nothing_said_about_it_is_dropped() -> None:
    # The embedded 270M wrote "User says: 300," for the user's "I can pay 300 crowns for the
    # lantern, not more.": the readback found 300 in the chapter and quoted nothing.
    chapter = _chapter(
        {
            "events": [
                {"event": "User says: 14,", "ids": [1]},
                {"event": "Piet says he was a sailor once", "ids": [2]},
            ],
            "user_facts": [{"fact": "Mara: 14th", "ids": [1]}],
        }
    )
    assert [e.text for e in chapter.events] == ["Piet says he was a sailor once"]
    assert chapter.ledger == ()


# What a major fold folds (the earlier synopsis, then chapters under their ranges), as the
# synopsis draft is checked against it.
FOLDED = [
    "Mara Lind came to Gull's Reach to survey the light for the Board. (#2 #8)",
    "- Mara calls her theodolite Old Brass and lets nobody else touch it (#12)",
    "- Corwin's cat Soot has one white paw (#26)",
    "#300 Mara: I'm going to go to Pellmouth on Jory's ferry.",
]
SYNOPSIS_CAST = ("Mara", "Corwin")


def test_a_synopsis_draft_keeps_only_the_sentences_that_rest_on_what_it_folds() -> None:
    """Seen on the embedded 270M chronicler (issue 28): a draft's self-talk beside a line that
    keeps names passed every check of the draft as a whole and took 43 of its 81 tokens."""
    draft = (
        "So far in the story, I have not found a single word of this story. Mara surveys "
        "Gull's Reach for the Board.\n"
        "Mara: ... I'm going to go to Pellmouth on Jory's ferry (#300)\n"
        "The chronicler will write more about the story later."
    )
    assert ground_prose(draft, FOLDED, SYNOPSIS_CAST) == GroundedProse(
        "Mara surveys Gull's Reach for the Board.\n"
        "Mara: ... I'm going to go to Pellmouth on Jory's ferry (#300)",
        (
            "So far in the story, I have not found a single word of this story.",
            "The chronicler will write more about the story later.",
        ),
    )


def test_a_grounded_draft_is_kept_as_written_and_an_invented_number_is_not() -> None:
    draft = "Mara calls her theodolite Old Brass.\n\nCorwin's cat Soot has one white paw.\n"
    assert ground_prose(draft, FOLDED, SYNOPSIS_CAST) == GroundedProse(draft.strip())
    invented = "Mara calls her theodolite Old Brass. Soot has 3 white paws."
    assert ground_prose(invented, FOLDED, SYNOPSIS_CAST) == GroundedProse(
        "Mara calls her theodolite Old Brass.", ("Soot has 3 white paws.",)
    )
    # Nothing rests on what it folds: nothing is kept (the fold quotes its chapters instead).
    assert ground_prose("I will now summarize.", FOLDED, SYNOPSIS_CAST).text == ""


def test_a_synopsis_in_a_script_without_spaces_is_grounded_by_its_pairs() -> None:
    folded = ["- 美羽は灯台で猫のスートに会った (#4)", "- 美羽は測量を終えた (#9)"]
    draft = "美羽は灯台で猫のスートに会った。美羽は測量を終えた。"
    assert ground_prose(draft, folded, ("美羽",)) == GroundedProse(draft)
    assert ground_prose(draft + "私は何も見つけられなかった。", folded, ("美羽",)).dropped == (
        "私は何も見つけられなかった。",
    )
