"""The chronicler audit on hand-written chapters: claims as facts, topics left open, refusals."""

from __future__ import annotations

from kotonia_tui.domain import Chapter, Message, Role, Synopsis
from kotonia_tui.eval.audit import audit, claims_as_facts, memory_pieces, sentences
from kotonia_tui.eval.dataset import (
    EvalCharacter,
    EvalConversation,
    EvalLie,
    EvalMessage,
    EvalThread,
    EvalUser,
)
from kotonia_tui.eval.meter import CallRecord
from kotonia_tui.memory.chronicler import CHRONICLER

SOURCE = [
    (
        Role.CHARACTER,
        "Corwin",
        '"I was master of the steamer Albatross for twelve years." '
        "`I was the cook on the Albatross.`",
    ),
    (Role.USER, "Mara", "I grew up in Harwick and my father was a clockmaker."),
    (
        Role.CHARACTER,
        "Corwin",
        '*He lights the lamp at sunset.* "The lamp burns a barrel every '
        'five nights in the winter months."',
    ),
    (Role.USER, "Mara", "Where is the 1887 logbook?"),
    (Role.CHARACTER, "Corwin", '"Found it! The logbook was under the nets in the boathouse."'),
]


def _conv() -> EvalConversation:
    return EvalConversation(
        character=EvalCharacter(name="Corwin"),
        user=EvalUser(name="Mara"),
        messages=[
            EvalMessage(id=i, role=r, speaker=s, text=t)
            for i, (r, s, t) in enumerate(SOURCE, start=1)
        ],
        threads=[
            EvalThread(id="t_log", topic="logbook", keywords=["logbook"], opened=4, resolved=5),
            EvalThread(id="t_late", topic="later", keywords=["boat"], opened=4, resolved=None),
        ],
        lies=[
            EvalLie(
                id="captain",
                claim="captain",
                truth="cook",
                keywords=["corwin", "master"],
                except_keywords=["cook"],
                message=1,
            ),
        ],
    )


def _messages() -> list[Message]:
    return [Message(id=i, role=r, speaker=s, text=t) for i, (r, s, t) in enumerate(SOURCE, 1)]


def test_sentences_split_on_stops_and_lines():
    assert sentences("Corwin lit the lamp. Mara watched!\nOpen: the logbook") == [
        "Corwin lit the lamp.",
        "Mara watched!",
        "Open: the logbook",
    ]


def test_lexical_claims_flag_a_characters_line_written_as_fact():
    messages = _messages()
    pieces = memory_pieces(
        [
            Chapter(
                conversation_id=1,
                first_message_id=1,
                last_message_id=5,
                text=(
                    "Corwin was master of the steamer Albatross for twelve years.\n"
                    "Corwin told Mara that he was master of the steamer Albatross.\n"
                    "Mara grew up in Harwick and her father was a clockmaker.\n"
                    "The lamp burns a barrel every five nights in the winter months."
                ),
            )
        ],
        [],
        messages,
        {i: i for i in range(1, 6)},
    )
    found = claims_as_facts(pieces[0], user="Mara", char="Corwin")
    flagged = [f.memory for f in found]
    # The bare claim counts; the attributed one, the user's own fact and narration do not.
    assert "Corwin was master of the steamer Albatross for twelve years." in flagged
    assert not any("told" in f for f in flagged)
    assert not any("Harwick" in f for f in flagged)
    assert found[0].message == 1


def test_audit_counts_phrases_lies_open_topics_and_refusals():
    conv = _conv()
    messages = _messages()
    chapters = [
        Chapter(
            conversation_id=1,
            first_message_id=1,
            last_message_id=3,
            text="As an established fact, Corwin was master of the Albatross.\n"
            "On the surface: Corwin was a captain. In fact: Corwin was the cook.",
        ),
        Chapter(
            conversation_id=1,
            first_message_id=4,
            last_message_id=5,
            text="Mara asked about the logbook.\nOpen: where the 1887 logbook is\n"
            "Open: when the boat comes",
        ),
    ]
    synopsis = Synopsis(
        conversation_id=1,
        version=1,
        through_message_id=5,
        text="Corwin said he was master of the Albatross.\nResolved: the logbook was found.",
    )
    pieces = memory_pieces(chapters, [synopsis], messages, {i: i for i in range(1, 6)})
    calls = [
        CallRecord(CHRONICLER, "fold", 1.0, 10, 10, 5, "stop", "I can't help with that."),
        CallRecord(CHRONICLER, "fold", 1.0, 10, 10, 50, "stop", "A long real chapter " * 30),
        CallRecord("Judge", "fold", 0.1, 10, 10, 1, "stop", "I can't"),  # not the chronicler
    ]
    result = audit(pieces, conv=conv, chronicler_calls=calls, to_source={})
    claims = result.claims_as_facts
    assert claims.established_fact_phrase == 1
    assert claims.known_lies_as_fact == 1  # "As an established fact, Corwin was master..."
    assert result.attribution.on_the_surface_in_fact_pairs == 1
    topics = result.topics
    assert topics.open_items == 2
    assert topics.resolved_markers == 1
    # The logbook was resolved in message 5, inside chapter 2's range: left open wrongly.
    # The boat thread was never resolved, so listing it open is right.
    assert topics.resolved_left_open == 1
    assert topics.examples[0].thread == "t_log"
    refusals = result.refusals
    assert (refusals.chronicler_calls, refusals.refused, refusals.stored) == (2, 1, 0)
    assert refusals.examples == ["I can't help with that."]
    assert [p.label for p in pieces] == ["chapter #1-#3", "chapter #4-#5", "synopsis v1"]


def test_open_and_resolved_markers_are_counted_in_markdown_too():
    """A chronicler that writes Markdown marks its topics "- **Open:** ..."; the audit missed
    every one of them, so a thread resolved but left open went uncounted."""
    conv = _conv()
    messages = _messages()
    chapter = Chapter(
        conversation_id=1,
        first_message_id=4,
        last_message_id=5,
        text="Mara asked about the logbook.\n- **Open:** where the 1887 logbook is\n"
        "**Open**: when the boat comes\n**Resolved:** the lamp oil was paid for.",
    )
    pieces = memory_pieces([chapter], [], messages, {i: i for i in range(1, 6)})
    topics = audit(pieces, conv=conv, chronicler_calls=[], to_source={}).topics
    assert (topics.open_items, topics.resolved_markers, topics.resolved_left_open) == (2, 1, 1)
    assert topics.examples[0].open_line == "where the 1887 logbook is"
