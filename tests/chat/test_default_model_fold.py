"""A fold on the real embedded default model (Gemma 3 270M, a base model).

Left to itself a base model given the chronicler's transcript copies the source lines, so its
chapter came out empty or ran to the cap and every fold failed. A chapter is now answered in a
JSON schema under a grammar: the answer always ends, within its bound, as a chapter that parses.
What it writes is not always so: the 270M cites the wrong lines and invents ("Ann took the train to
the lighthouse"), so an item is kept only when the messages it rests on hold it, and a range
where nothing does is quoted instead. This runs the real fold worker on the real model.
"""

from __future__ import annotations

import json

import pytest

from kotonia_tui.chat.events import FoldProgress, FoldState, ServiceEvent
from kotonia_tui.domain import Message, Role, StoredChapter, StoredLedgerEntry
from kotonia_tui.memory.grounding import grounded
from kotonia_tui.memory.readback import missing, user_specifics
from kotonia_tui.memory.structured import says_something
from tests.cards import write_short_card
from tests.settings import default_model_settings

pytestmark = pytest.mark.default_model

STORY = (
    ("I shake the snow off my coat and thank you for the tea.", "Wren pours a second cup."),
    ("How long have you kept this lighthouse?", '"Twenty winters," Wren says.'),
    ("My name is Ann, and I came looking for my brother.", '"Which ship?" Wren asks.'),
    ("He sailed on the Grey Heron.", "Wren goes quiet and looks at a brass compass."),
    ("Whose compass is that?", '"A sailor left it here last spring," Wren says.'),
    ("I promise to stay until the storm is over.", "Wren nods and adds oil to the lamp."),
)


def chapter_words_of(chapter: StoredChapter, entries: list[StoredLedgerEntry]) -> str:
    """What memory keeps of a chapter: its text, its story time and its ledger entries."""
    return "\n".join([chapter.text, chapter.story_time or "", *(e.text for e in entries)])


@pytest.mark.slow
async def test_the_embedded_model_writes_a_chapter_that_is_not_a_copy_of_its_source(
    make_service,
):
    settings = default_model_settings(
        seed=1, reply_max_tokens=32, summary_max_tokens=256, prewarm_after_fold=False
    )
    key = write_short_card()
    service = await make_service(settings)
    events: list[ServiceEvent] = []
    service.subscribe(events.append)
    conv = service.new_conversation(service.library.get(key))
    backlog = []
    for _round in range(7):  # enough stored story to cross the fold trigger at once
        for line, reply in STORY:
            backlog.append(Message(role=Role.USER, speaker="Ann", text=line))
            backlog.append(Message(role=Role.CHARACTER, speaker="Wren", text=reply))
    service.store.add_messages(conv.id, backlog)

    turn = await service.send(conv.id, "Is the storm getting worse?")
    assert (await turn.wait()).error is None
    assert turn.prepared.queued is not None or turn.prepared.plan.forced_cut_through
    await service.worker.wait_settled(conv.id)

    failed = [
        e.detail for e in events if isinstance(e, FoldProgress) and e.state is FoldState.FAILED
    ]
    chapters = service.store.chapters(conv.id)
    assert chapters, f"no chapter landed; failures: {failed}"
    cap_failures = [f for f in failed if f and "output cap" in f]
    assert cap_failures == []
    ledger = service.store.ledger(conv.id, include_ended=True)
    for chapter in chapters:
        source = service.store.messages_between(
            conv.id, chapter.first_message_id, chapter.last_message_id
        )
        text_of = {m.id: m.text for m in source}
        # The names the user gave in the chapter's range are in memory: kept by the chronicler
        # or quoted from the user's line into the ledger.
        kept = chapter_words_of(chapter, [e for e in ledger if e.chapter_id == chapter.id])
        assert missing(user_specifics(source), kept) == []
        if chapter.quoted:
            # Nothing the model wrote for this range rested on its messages: the range is
            # quoted, every line from one of its messages, and the note says why.
            assert chapter.note and "chronicler's chapter was unusable" in chapter.note
            for line in chapter.text.splitlines():
                cited = int(line.split(" ", 1)[0].lstrip("#"))
                assert cited in text_of, line
            continue
        assert chapter.structure is not None  # a structured chapter, rendered from its JSON
        structure = json.loads(chapter.structure)
        happened = structure["events"]
        assert happened and all(e["text"].strip() for e in happened)
        assert chapter.text.startswith("- ")
        assert "[#" not in chapter.text  # not the source lines copied back
        # No item that says nothing is kept ("1", "1887", "}, {" and runs of 1s were, under
        # the first schema), and no item the messages it cites do not hold ("Ann took the
        # train to the lighthouse": nobody mentioned a train).
        chronicled = [x for x in structure["ledger"] if x["source"] != "readback"]
        items = [*happened, *structure["claims"], *chronicled]
        assert all(says_something(item["text"]) for item in items), items
        for item in items:
            # A decision's reasons may rest on any message of the range; its decision may not.
            main = item["text"].split(" Because: ")[0].split(" Rejected: ")[0]
            assert grounded(main, [text_of[i] for i in item["ids"]], ("Ann", "Wren")), item
    # The model's chapters are not all thrown away: at least one range is told in its words.
    assert any(not chapter.quoted for chapter in chapters)
