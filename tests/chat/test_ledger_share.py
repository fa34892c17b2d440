"""A long ledger in a real conversation: the turn that applies the landed memory carries the
ledger within its share of the window, the oldest decisions out first and the user's fact kept;
every entry stays in the store, and the inspector and `kotonia memory` name those the prompt
leaves out."""

from __future__ import annotations

from kotonia_tui.chat.memory_report import memory_report
from kotonia_tui.domain import Chapter, LedgerKind, Message, Role
from kotonia_tui.memory.ledger import LEDGER_HEADING, render_ledger
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
    # The oldest decisions left the prompt; the newest stay.
    assert max(d.id for d in left) < min(d.id for d in kept)
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
    report = memory_report(service.store, conv.id)
    out = [e["label"] for e in report["ledger"] if e["live"] and not e["in_prompt"]]
    assert out == [d.label for d in left]
