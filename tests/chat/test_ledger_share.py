"""A long ledger in a real conversation: the turn that applies the landed memory carries the
ledger within its share of the window, the newest decisions out first and the user's facts and
rules kept, the oldest longest; every entry stays in the store, the block stays byte-stable until
a fold lands, and the inspector and `kotonia memory` name those the prompt leaves out and why."""

from __future__ import annotations

import argparse
import json

from kotonia_tui.chat.memory_report import memory_report
from kotonia_tui.cli.memory import memory as memory_command
from kotonia_tui.domain import Chapter, LedgerKind, Message, Role
from kotonia_tui.memory.ledger import LEDGER_HEADING, LeftOut, render_ledger
from kotonia_tui.tui.widgets.inspector import ledger_line, ledger_note
from tests.cards import write_short_card
from tests.scripted_chapters import ledger_entry
from tests.settings import tiny_settings


async def test_the_prompt_carries_the_ledger_within_its_share_and_names_what_is_left_out(
    make_service, tiny_model_path
):
    # 8192 * 0.02: 163 tokens, room for the fact and a few of the twelve decisions.
    settings = tiny_settings(tiny_model_path, ledger_budget_ratio=0.02)
    key = write_short_card()
    service = await make_service(settings)
    conv = service.new_conversation(service.library.get(key))
    service.store.add_messages(
        conv.id,
        [
            Message(role=Role.USER, speaker="Ann", text="I am allergic to walnuts."),
            Message(role=Role.CHARACTER, speaker="Wren", text="Then no walnut bread."),
        ],
    )
    allergy = "Ann is allergic to walnuts"
    entries = [ledger_entry(conv.id, LedgerKind.USER_FACT, allergy, 1, subject="Ann")] + [
        ledger_entry(conv.id, LedgerKind.DECISION, f"Day {day}: they mend the north window", 2)
        for day in range(1, 13)
    ]
    service.store.store_chapter(
        Chapter(
            conversation_id=conv.id,
            first_message_id=1,
            last_message_id=2,
            text="- Ann said she is allergic to walnuts. (#1)",
        ),
        entries,
    )

    turn = await service.send(conv.id, "Is the window mended?")
    assert (await turn.wait()).error is None

    stored = service.store.ledger(conv.id)
    assert len(stored) == 13  # the store keeps every entry
    carried = service.store.memory_state(conv.id).memory_text
    assert LEDGER_HEADING in carried
    budget = service.prompter.budgets.ledger
    ledger_text = carried[carried.index(LEDGER_HEADING) :].split("\n\n## ")[0]
    assert service.engine.count_tokens(ledger_text) <= budget
    fact, *decisions = stored
    assert f"{fact.label} (Ann): Ann is allergic to walnuts" in carried
    kept = [d for d in decisions if d.label + ":" in carried]
    left = [d for d in decisions if d.label + ":" not in carried]
    assert kept and left
    # The newest decisions left the prompt; the oldest stay.
    assert min(d.id for d in left) > max(d.id for d in kept)
    assert ledger_text == render_ledger([fact, *kept])

    view = service.memory_view(conv.id)
    assert view.ledger_left_out == {d.id for d in left}
    assert view.ledger_in_prompt == {fact.id, *(d.id for d in kept)}
    # What the inspector's Ledger section says of them.
    assert "not in the prompt (over the ledger's share)" in ledger_line(left[0], view).plain
    assert "not in the prompt" not in ledger_line(kept[0], view).plain
    note = ledger_note(view).plain
    assert f"{len(left)} not in the prompt, over the ledger's share of {budget:,} tok" in note
    assert ", ".join(d.label for d in left) in note

    # `kotonia memory --json` says the same from the store alone.
    report = memory_report(service.store, conv.id, service.prompter.fit_ledger)
    out = [e["label"] for e in report["ledger"] if e["live"] and not e["in_prompt"]]
    assert out == [d.label for d in left]
    assert {e["left_out"] for e in report["ledger"] if e["label"] in out} == {LeftOut.OVER_SHARE}
    assert all(e["left_out"] is None for e in report["ledger"] if e["in_prompt"])


async def test_over_its_share_the_ledger_keeps_the_users_first_fact_and_first_rule(
    make_service, tiny_model_path
):
    """Under the share, the newest entries were kept: the user's name and the first rule they
    set were the first of their facts and rules to leave the prompt. Now the newest leave."""
    settings = tiny_settings(tiny_model_path, ledger_budget_ratio=0.02)
    key = write_short_card()
    service = await make_service(settings)
    conv = service.new_conversation(service.library.get(key))
    store = service.store
    store.add_messages(
        conv.id,
        [
            Message(role=Role.USER, speaker="Mara", text="I'm Mara. Never call me Marusya."),
            Message(role=Role.CHARACTER, speaker="Wren", text="Welcome, Mara."),
        ],
    )
    name = ledger_entry(conv.id, LedgerKind.USER_FACT, "Her name is Mara", 1, subject="Mara")
    rule = ledger_entry(conv.id, LedgerKind.CONSTRAINT, "Never call her Marusya", 1)
    store.store_chapter(
        Chapter(conversation_id=conv.id, first_message_id=1, last_message_id=2, text="- (#1)"),
        [name, rule],
    )
    # Later chapters add many facts and rules of hers, and decisions: far over 163 tokens.
    for n in range(3):
        first, last = store.add_messages(
            conv.id,
            [
                Message(role=Role.USER, speaker="Mara", text=f"Part {n}."),
                Message(role=Role.CHARACTER, speaker="Wren", text="Noted."),
            ],
        )
        store.store_chapter(
            Chapter(
                conversation_id=conv.id,
                first_message_id=first,
                last_message_id=last,
                text=f"- Part {n}. (#{first})",
            ),
            [
                ledger_entry(conv.id, kind, f"{what} number {n}-{k}", first, subject=subject)
                for k in range(4)
                for kind, what, subject in (
                    (LedgerKind.USER_FACT, "Mara's ferry ticket is", "Mara"),
                    (LedgerKind.CONSTRAINT, "No scenes on the water in part", ""),
                    (LedgerKind.DECISION, "They mend the north window on day", ""),
                )
            ],
        )

    turn = await service.send(conv.id, "Do you remember me?")
    assert (await turn.wait()).error is None
    text = store.memory_state(conv.id).memory_text
    stored = store.ledger(conv.id)
    first_fact, first_rule = stored[0], stored[1]
    assert f"{first_fact.label} (Mara): Her name is Mara" in text
    assert f"{first_rule.label}: Never call her Marusya" in text
    view = service.memory_view(conv.id)
    assert view.ledger_left_out  # the share is too small for all of it
    report = memory_report(store, conv.id, service.prompter.fit_ledger)
    for e in report["ledger"]:  # every live entry is in the prompt, or says why it is not
        assert e["in_prompt"] or e["left_out"] == LeftOut.OVER_SHARE
    # The block is byte-stable until a fold lands: the next turn carries it unchanged.
    again = await service.send(conv.id, "And my rule?")
    assert (await again.wait()).error is None
    assert store.memory_state(conv.id).memory_text == text


async def test_kotonia_memory_shows_the_landed_memory_exactly_as_the_next_prompt_carries_it(
    make_service, tiny_model_path, capsys
):
    """A chapter lands with a ledger far over its share: `kotonia memory --json` (the command
    itself, counting with the model's vocabulary) shows the block the next turn carries, byte
    for byte, not the landed block with every live entry; the entries it leaves out say why."""
    settings = tiny_settings(tiny_model_path, ledger_budget_ratio=0.02)
    key = write_short_card()
    service = await make_service(settings)
    conv = service.new_conversation(service.library.get(key))
    service.store.add_messages(
        conv.id,
        [
            Message(role=Role.USER, speaker="Ann", text="I am allergic to walnuts."),
            Message(role=Role.CHARACTER, speaker="Wren", text="Then no walnut bread."),
        ],
    )
    entries = [
        ledger_entry(conv.id, LedgerKind.DECISION, f"Day {day}: they mend the north window", 2)
        for day in range(1, 13)
    ]
    service.store.store_chapter(
        Chapter(conversation_id=conv.id, first_message_id=1, last_message_id=2, text="- (#1)"),
        entries,
    )
    args = argparse.Namespace(id=conv.id, json=True, db=service.store.path, read_only=False)
    assert memory_command(args, settings) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["applies_on_next_turn"]
    out = [e["label"] for e in report["ledger"] if e["left_out"] == LeftOut.OVER_SHARE]
    next_turn = [e["label"] for e in report["ledger"] if e["left_out"] == LeftOut.NEXT_TURN]
    assert out and next_turn  # the share keeps some of the twelve, and the turn carries them
    for label in out:
        assert f"- {label}:" not in report["memory_text"]

    turn = await service.send(conv.id, "Is the window mended?")
    assert (await turn.wait()).error is None
    carried = service.store.memory_state(conv.id).memory_text
    assert carried == report["memory_text"]
    assert all(f"- {label}:" in carried for label in next_turn)
