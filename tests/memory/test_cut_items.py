"""A chronicler's string that its grammar ended at its length limit is finished from the message
it copies, or marked as cut; a string under its limit is stored as written."""

from __future__ import annotations

import json

from kotonia_tui.config import ModelProfile
from kotonia_tui.domain import Message, Role
from kotonia_tui.memory.chapter_schema import (
    ChapterSource,
    Shape,
    filled,
    pattern_chars,
    schema_for,
    shapes,
    string_patterns,
    text_schema,
)
from kotonia_tui.memory.chronicler import Cast, ChronicleRequest, chronicler_prompt, read_reply
from kotonia_tui.memory.cut_items import finished, time_cut
from kotonia_tui.memory.structured import Dropped, DropReason, parse_answer
from kotonia_tui.sentences import CUT_MARK

VEIL = "I'll send you a photograph of Ilse in our mother's veil. I promise."
SOURCE = [
    Message(id=325, role=Role.CHARACTER, speaker="Corwin", text="Will you write to me?"),
    Message(id=326, role=Role.USER, speaker="Mara", text=VEIL),
    Message(
        id=327,
        role=Role.CHARACTER,
        speaker="Corwin",
        text="Do you ever go over to Pellmouth? It can't be more than four miles, they say.",
    ),
]
CAST = Cast(char="Corwin", user="Mara")


def _source() -> ChapterSource:
    return ChapterSource.of(SOURCE, ())


def test_a_string_is_filled_only_at_the_most_its_pattern_allows():
    # `pattern_chars` counts the one space a string may start with.
    plain = text_schema(20)["pattern"]
    assert pattern_chars(plain) == 20
    assert filled(plain, " " + "a" * 19) and filled(plain, "a" * 19)
    assert not filled(plain, "a" * 18)
    named = text_schema(30, names=("Mara", "Corwin"))["pattern"]
    rest = pattern_chars(named) - len(" Corwin ")  # what may follow the longest name
    assert filled(named, "Corwin " + "x" * rest)
    # A shorter name reaches its limit at fewer characters: what follows it is counted.
    assert filled(named, "Mara " + "x" * rest)
    assert not filled(named, "Mara " + "x" * (rest - 1))


def test_a_cut_copy_goes_on_with_its_messages_words_to_the_end_of_the_sentence():
    texts = [m.text for m in SOURCE]
    assert finished("Mara says: I'll send you a photograph of Ilse in our mother's", texts, 64) == (
        "Mara says: I'll send you a photograph of Ilse in our mother's veil."
    )
    # Inside a word, with a comma the grammar left at the end, and in another case.
    assert finished("Mara asks: do you ever go over to Pellmouth? It can'", texts, 64) == (
        "Mara asks: do you ever go over to Pellmouth? It can't be more than four miles, they say."
    )
    assert finished("She said it can't be more than four miles,", texts, 64) == (
        "She said it can't be more than four miles, they say."
    )
    # Typographic quote marks for the source's straight ones.
    assert finished("Mara: I’ll send you a photograph of Ilse", texts, 64).endswith(
        "of Ilse in our mother's veil."
    )


def test_a_cut_string_that_copies_nothing_is_marked_and_a_long_rest_is_cut_at_a_word():
    texts = [m.text for m in SOURCE]
    assert finished("Corwin was in the oil store, and the kitten was", texts, 64) == (
        f"Corwin was in the oil store, and the kitten was{CUT_MARK}"
    )
    # Two common words are not a copy: found by chance in the wrong message.
    assert finished("Mara has a sister and she", ["and she went home early."], 64).endswith(
        CUT_MARK
    )
    long = "The lamp burns every night of the year from dusk until the sun is up again."
    assert finished("Corwin: the lamp burns every night", [long], 20) == (
        f"Corwin: the lamp burns every night of the year from{CUT_MARK}"
    )


def test_a_chapter_whose_item_reached_its_limit_is_stored_whole():
    request = ChronicleRequest.chapter(SOURCE, CAST, ())
    prompt = chronicler_prompt(request, ModelProfile())
    schema = schema_for(
        _source(), Shape({**_source().first_shape().counts, "events": 2}, text=64, short=32)
    )
    pattern = string_patterns(schema)[("events", "event")]
    # What may follow a name: the pattern's most characters less the longest name and its space
    # and the space a string may start with.
    rest = pattern_chars(pattern) - len("Corwin") - 2
    event = "Mara " + "says: I'll send you a photograph of Ilse in our mother's veil"[:rest]
    assert filled(pattern, event) and event.endswith("our mother's")
    short = "Corwin asks Mara to write to him."
    answer = {"events": [{"event": event, "ids": [326]}, {"event": short, "ids": [325]}]}
    schema_text = json.dumps(schema)
    reply = read_reply(request, prompt, json.dumps(answer), cut=False, schema=schema_text)
    assert reply.ok
    lines = reply.text.splitlines()
    assert any(line.endswith("in our mother's veil. (#326)") for line in lines), lines
    assert any(short in line for line in lines), lines
    # Without the schema (a server that ignored it) nothing can say what was cut.
    plain = read_reply(request, prompt, json.dumps(answer), cut=False)
    assert not any("veil." in line for line in plain.text.splitlines())


def test_a_finished_string_stops_at_a_line_break_and_a_match_starts_a_word():
    letter = "*Mara folds the letter and tucks it into her coat*\nI will write to you every week."
    assert finished("Mara folds the letter and tucks it into her", [letter], 64) == (
        "Mara folds the letter and tucks it into her coat*"
    )
    listed = "Things to bring for the wedding on Sunday\nbread\nlamp oil"
    assert finished("Ann will bring things for the wedding on", [listed], 64) == (
        "Ann will bring things for the wedding on Sunday"
    )
    # "the art of the sea" is not a copy of "heart of the sea".
    assert finished("Wren paints the art of the sea and", ["My heart of the sea and sky."], 64) == (
        f"Wren paints the art of the sea and{CUT_MARK}"
    )


def test_a_whole_sentence_or_a_heading_at_the_limit_is_not_marked():
    assert finished("Ann lit the tall lamps.", [], 24) == "Ann lit the tall lamps."
    assert finished("Ann says: “Go home.”", [], 24) == "Ann says: “Go home.”"
    # Ends where its content should begin: left for the chapter's checks to drop.
    assert finished("Corwin says to Mara and Piet:", [], 32) == "Corwin says to Mara and Piet:"


def test_of_names_that_start_one_another_the_longer_decides_the_limit():
    named = text_schema(40, names=("Mara", "Mara Lee"))["pattern"]
    rest = pattern_chars(named) - len(" Mara Lee ")
    assert filled(named, "Mara Lee " + "x" * rest)
    # Read as "Mara Lee" and its words, the grammar could go on: not cut.
    assert not filled(named, "Mara Lee " + "x" * (rest - 4))
    assert filled(named, "Mara " + "x" * rest)


def test_a_users_fact_is_finished_from_the_users_own_lines_only():
    source = [
        Message(
            id=1,
            role=Role.USER,
            speaker="Mara",
            text="I'm Mara Lind, I run the bakery on Harbour Street.",
        ),
        Message(
            id=2,
            role=Role.CHARACTER,
            speaker="Corwin",
            text="So Mara Lind runs the bakery on Harbour Street and owes the mill forty crowns.",
        ),
    ]
    request = ChronicleRequest.chapter(source, CAST, ())
    prompt = chronicler_prompt(request, ModelProfile())
    chapter_source = ChapterSource.of(source, ())
    counts = {**chapter_source.first_shape().counts, "events": 1, "user_facts": 1}
    schema = schema_for(chapter_source, Shape(counts, text=48, short=24))
    pattern = string_patterns(schema)[("user_facts", "fact")]
    rest = pattern_chars(pattern) - len(" Mara ")
    fact = "Mara " + "runs the bakery on Harbour Street and owes the mill forty crowns"[:rest]
    assert filled(pattern, fact)
    answer = {
        "events": [{"event": "Corwin asks Mara about the bakery.", "ids": [2]}],
        "user_facts": [{"fact": fact, "ids": [1], "replaces": ""}],
    }
    reply = read_reply(request, prompt, json.dumps(answer), cut=False, schema=json.dumps(schema))
    assert reply.ok and reply.structure is not None
    (kept,) = [item for item in reply.structure.ledger]
    # Not finished with Corwin's words: the fact rests on Mara's line, and stays in the ledger.
    assert "forty crowns" not in kept.text and kept.evidence == (1,)
    assert kept.text.endswith(CUT_MARK)


def test_a_story_time_at_its_limit_is_no_time_and_is_left_as_written():
    """A "When:" the grammar ended at its limit is what the chronicler was writing, cut: shown,
    it headed recalled excerpts with half a phrase ("She was here in the spring of '…"). It is
    left out, as written (not finished or marked), whatever its words (it writes no date to
    keep); one character shorter, the chronicler ended it and it is the chapter's time
    (D-51)."""
    request = ChronicleRequest.chapter(SOURCE, CAST, ())
    prompt = chronicler_prompt(request, ModelProfile())
    schema = schema_for(_source(), Shape(_source().first_shape().counts, text=64, short=32))
    pattern = string_patterns(schema)[("time", "time")]
    written = "Am nächsten Abend, nachdem Corwin endlich nach Pellmouth ruderte"
    at_limit = written[: pattern_chars(pattern) - 1]
    shorter = at_limit[:-1]
    assert filled(pattern, at_limit) and not filled(pattern, shorter)
    assert at_limit[-1].isalpha() and shorter[-1].isalpha()
    event = {"event": "Corwin asks Mara to write to him.", "ids": [325]}
    for written, shown in ((at_limit, None), (f" {at_limit}", None), (shorter, shorter)):
        answer = json.dumps({"events": [event], "time": written})
        reply = read_reply(request, prompt, answer, cut=False, schema=json.dumps(schema))
        assert reply.ok and reply.structure is not None
        assert reply.story_time == shown
        cut = [d for d in reply.structure.dropped if d.field == "time"]
        assert cut == ([] if shown else [Dropped("time", at_limit, DropReason.CUT_TIME)])
    assert time_cut(parse_answer(json.dumps({"events": [event], "time": at_limit})), schema)


def test_a_date_the_grammar_cut_a_time_after_is_kept_at_every_limit_the_schema_has():
    """At every length the schema gives the story time, a full date with a part of the day is
    kept whole, or the grammar cut it after the date and the date is kept (the time is
    recorded as cut). Only where the shape a budget holds leaves no room for a date (the time
    then as long as before D-51) is less of it kept: its weekday, which is whole before a
    month the cut ran into (D-51)."""
    request = ChronicleRequest.chapter(SOURCE, CAST, ())
    prompt = chronicler_prompt(request, ModelProfile())
    event = {"event": "Corwin asks Mara to write to him.", "ids": [325]}
    written, date = "Friday, 19 October 2018, evening", "Friday, 19 October 2018"
    seen: dict[int, str | None] = {}
    for shape in shapes(_source()):
        schema = schema_for(_source(), shape)
        pattern = string_patterns(schema)[("time", "time")]
        if (limit := pattern_chars(pattern)) in seen:
            continue
        for lead in ("", " "):
            said = lead + written[: limit - 1]  # what the grammar lets through
            answer = json.dumps({"events": [event], "time": said})
            reply = read_reply(request, prompt, answer, cut=False, schema=json.dumps(schema))
            assert reply.ok and reply.structure is not None
            seen[limit] = reply.story_time
            cut = filled(pattern, said)
            assert cut is (said.strip() != written)
            recorded = [d for d in reply.structure.dropped if d.field == "time"]
            assert recorded == ([Dropped("time", said.strip(), DropReason.CUT_TIME)] if cut else [])
    whole = {60: written, 50: written, 40: written, 37: written, 32: date, 24: date}
    assert seen == {**whole, 18: "Friday", 13: "Friday", 12: "Friday"}


def test_a_speakers_line_the_grammar_cut_keeps_no_date_it_names():
    """A speaker's line is read before the cut: a date someone mentions is not the day of the
    scene, even where the grammar cut the line after it (D-51)."""
    request = ChronicleRequest.chapter(SOURCE, CAST, ())
    prompt = chronicler_prompt(request, ModelProfile())
    schema = schema_for(_source(), _source().first_shape())
    pattern = string_patterns(schema)[("time", "time")]
    line = "Mara says: Ilse marries on 3 May 1887, in our mother's veil, at the chapel"
    said = line[: pattern_chars(pattern) - 1]
    assert filled(pattern, said) and "3 May 1887," in said
    event = {"event": "Corwin asks Mara to write to him.", "ids": [325]}
    answer = json.dumps({"events": [event], "time": said})
    reply = read_reply(request, prompt, answer, cut=False, schema=json.dumps(schema))
    assert reply.ok and reply.structure is not None
    assert reply.story_time is None
    assert [d for d in reply.structure.dropped if d.field == "time"] == [
        Dropped("time", said, DropReason.SPEAKERS_LINE)
    ]
