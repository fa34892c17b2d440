"""A turn's reads do not grow with the conversation: 100 and 20,000 messages read the same rows."""

from __future__ import annotations

from kotonia_tui.domain import Message, Role

from .conftest import tiny_settings


def messages(count: int, user: str, char: str) -> list[Message]:
    out = []
    for i in range(count):
        if i % 2:
            out.append(Message(role=Role.CHARACTER, speaker=char, text=f'"Reply {i}."'))
        else:
            out.append(Message(role=Role.USER, speaker=user, text=f"Line {i} of the story."))
    return out


async def test_rows_read_per_turn_are_the_same_at_100_and_20000_messages(
    make_service, tiny_model_path
):
    # Recall off: what it reads depends on what the archive holds (bounded by its candidates,
    # not equal at both sizes; tests/chat/test_recall.py bounds it).
    service = await make_service(tiny_settings(tiny_model_path, recall_budget_ratio=0.0))
    card = service.library.get("rowan-ashby")
    setup = service.setup_for(card)
    rows: dict[int, int] = {}
    for size in (100, 20_000):
        conv = service.new_conversation(card)
        ids = service.store.add_messages(
            conv.id, messages(size, service.persona.name, setup.display_name)
        )
        # As after folding: the prompt carries the newest 40 messages verbatim.
        state = service.store.memory_state(conv.id)
        service.store.set_memory_state(state.model_copy(update={"verbatim_start_id": ids[-40]}))
        await service.prompter.prepare(conv.id, card, setup, service.persona)  # counts once
        before = service.store.rows_read
        prepared = await service.prompter.prepare(conv.id, card, setup, service.persona)
        rows[size] = service.store.rows_read - before
        assert len(prepared.window) == 40
    print(f"\nrows read per turn: {rows[100]} at 100 messages, {rows[20_000]} at 20,000")
    assert rows[20_000] == rows[100]
    assert rows[100] < 200
