"""Memory knows a group's cast (issue 31): the chronicler reads each line signed by the member
who spoke it, and a chapter says which member said what (the ledger takes an item's subject
from the message it cites in the same way, memory/structured.py).

The real fold worker and a real SQLite file, the fake engine (tests/fake_engine.py) answering a
given chapter JSON under the chapter's schema as a grammar makes a model write it: what is
tested is how the answer is read and attributed, which does not depend on the model."""

from __future__ import annotations

import asyncio

from kotonia_tui.domain import Conversation, LedgerKind, Message, Role
from kotonia_tui.memory.attribution import cast_memory
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


# Lin alone knows where the key is hidden: she says so while Rowan is not there, and Rowan
# later says he does not know. The answer cites Rowan's line (#3) for Lin's decision, as a small
# model mixes up ids: the decision rests on the line that says it (Lin's, #2) and is Lin's,
# not Rowan's, through both folds.
SECRET_LINES = [
    (Role.USER, "Ann", None, "Lin, Rowan has gone to the harbour. Where will the key be safe?"),
    (Role.CHARACTER, "Lin", "lin", "I decided to hide the silver key inside the lighthouse bell."),
    (Role.CHARACTER, "Rowan", "rowan", "I am back from the harbour. Did I miss anything?"),
    (Role.USER, "Ann", None, "Rowan, do you know where the silver key is now?"),
    (Role.CHARACTER, "Rowan", "rowan", "No, I have no idea where anyone put it."),
]
HIDES = (
    '{"events":[{"event":"Ann asked Lin where the key would be safe.","ids":[1]}],'
    '"user_facts":[],"constraints":[],"claims":[],'
    '"decisions":[{"decision":"Lin decided to hide the silver key inside the lighthouse bell",'
    '"because":"","rejected":"","ids":[3]}],'
    '"open_threads":[]}'
)
ASKS = (
    '{"events":[{"event":"Ann asked Rowan where the silver key is.","ids":[4]}],'
    '"user_facts":[],"constraints":[],'
    '"claims":[{"said":"No, I have no idea where anyone put it.","in_fact":"","ids":[5]}],'
    '"open_threads":[]}'
)


def test_a_fact_one_member_states_stays_theirs_through_the_folds(tmp_path):
    store = Store.open(tmp_path / "kotonia.sqlite3")
    conv = store.create_conversation(
        Conversation(character_key="rowan", character_name="Rowan", persona_name="Ann")
    )
    store.set_cast(conv.id, [("rowan", "Rowan"), ("lin", "Lin")])
    store.add_messages(
        conv.id,
        [
            Message(role=role, speaker=who, text=text, character_key=key)
            for role, who, key, text in SECRET_LINES
        ],
    )
    asyncio.run(fold(store, HIDES, chapter_job(conv.id, 1, 3), cast=CAST))
    asyncio.run(fold(store, ASKS, chapter_job(conv.id, 4, 5), cast=CAST))

    entries = store.ledger(conv.id, include_ended=True)
    secret = [e for e in entries if "lighthouse bell" in e.text]
    # Lin's, resting on her line: Rowan's line (#3), which the answer cited, does not say it.
    assert [(e.kind, e.subject, e.evidence) for e in secret] == [(LedgerKind.DECISION, "Lin", [2])]
    assert secret[0].ended_by_chapter_id is None  # the second fold kept it, as it was
    _first, second = store.chapters(conv.id)
    assert "Rowan told Ann: No, I have no idea where anyone put it. (#5)" in second.text

    # Read per speaker (the inspector's page): Lin knows it, Rowan does not.
    cited = {m.id: m for m in store.messages_between(conv.id, 1, 5)}
    memory = cast_memory(["Rowan", "Lin"], "Ann", store.chapters(conv.id), entries, cited)
    by_name = {s.name: s for s in memory.speakers}
    assert [i.text for i in by_name["Lin"].said if "bell" in i.text] == [secret[0].text]
    assert not any("bell" in i.text for i in by_name["Rowan"].said + by_name["Rowan"].about)
    assert any("no idea" in i.text for i in by_name["Rowan"].said)
    store.close()
