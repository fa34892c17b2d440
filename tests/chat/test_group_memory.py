"""Memory knows a group's cast (issue 31): the chronicler reads each line signed by the member
who spoke it, and a chapter says which member said what (the ledger takes an item's subject
from the message it cites in the same way, memory/structured.py).

The real fold worker and a real SQLite file, the fake engine (tests/fake_engine.py) answering a
given chapter JSON under the chapter's schema as a grammar makes a model write it: what is
tested is how the answer is read and attributed, which does not depend on the model."""

from __future__ import annotations

import asyncio

from kotonia_tui.domain import Conversation, Message, Role
from kotonia_tui.memory.chronicler import Cast, render_source, structured_instructions
from kotonia_tui.store import Store

from .test_structured_folding import chapter_job, fold

CAST = Cast.group(["Rowan", "Lin"], "Ann")
LINES = [
    (Role.USER, "Ann", None, "Rowan, where did you put the silver key?"),
    (Role.CHARACTER, "Rowan", "rowan", "I gave the silver key to Lin at the harbour."),
    (Role.CHARACTER, "Lin", "lin", "I promise to keep the silver key until the fair."),
    (Role.USER, "Ann", None, "Lin, show me the key, please."),
]
# A claim by each member, one chapter each: the chapter says who told whom from the message
# the claim cites.
ROWANS = (
    '{"events":[{"event":"Ann asked Rowan where the silver key was.","ids":[1]}],'
    '"user_facts":[],"constraints":[],'
    '"claims":[{"said":"I gave the silver key to Lin at the harbour.","in_fact":"","ids":[2]}],'
    '"open_threads":[]}'
)
LINS = (
    '{"events":[{"event":"Ann asked Lin to show the key.","ids":[4]}],'
    '"user_facts":[],"constraints":[],'
    '"claims":[{"said":"I promise to keep the silver key until the fair.","in_fact":"","ids":[3]}],'
    '"open_threads":[]}'
)


def _seed(store: Store) -> int:
    conv = store.create_conversation(
        Conversation(character_key="rowan", character_name="Rowan", persona_name="Ann")
    )
    store.set_cast(conv.id, [("rowan", "Rowan"), ("lin", "Lin")])
    store.add_messages(
        conv.id,
        [
            Message(role=role, speaker=who, text=text, character_key=key)
            for role, who, key, text in LINES
        ],
    )
    return conv.id


def test_the_chroniclers_source_signs_each_line_with_its_speaker() -> None:
    messages = [
        Message(id=i, role=role, speaker=who, text=text, character_key=key)
        for i, (role, who, key, text) in enumerate(LINES, start=1)
    ]
    source = render_source(messages, char=CAST.char, user=CAST.user)
    assert "[#1] Ann (the user) -> Rowan, Lin (says):" in source
    assert "[#2] Rowan -> Ann (says): I gave the silver key" in source
    assert "[#3] Lin -> Ann (says): I promise" in source
    assert "the story between Rowan, Lin and Ann" in structured_instructions(CAST)


def test_each_chapter_attributes_a_claim_to_the_member_who_said_it(tmp_path):
    store = Store.open(tmp_path / "kotonia.sqlite3")
    conv_id = _seed(store)
    asyncio.run(fold(store, ROWANS, chapter_job(conv_id, 1, 2), cast=CAST))
    asyncio.run(fold(store, LINS, chapter_job(conv_id, 3, 4), cast=CAST))
    first, second = store.chapters(conv_id)
    assert "Rowan told Ann: I gave the silver key to Lin at the harbour. (#2)" in first.text
    # Lin said it (message 3 is Lin's), not Rowan, who spoke before and whom Ann addressed.
    assert "Lin told Ann: I promise to keep the silver key until the fair. (#3)" in second.text
    store.close()
