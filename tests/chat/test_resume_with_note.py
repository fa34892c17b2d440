"""Returning to a conversation with an Author's Note inside the history (SillyTavern's depth 4):
its saved KV state must carry the prompt up to where the new one first differs, so only the new
message is read again, as at depth 0. Real engine, a tiny scripted GGUF (the same reply to any
prompt, so both depths have the same messages), saved states on.

Before the fix the saved state held the note where the last turn put it; the next prompt has it
two messages further down, so the state was usable only up to the note's old place (and not at
all on a sliding-window model such as the embedded default: only the setup's state loaded)."""

from __future__ import annotations

from kotonia_tui.domain import ChatMessage, ChatSettings, DepthNote, TurnMetrics
from kotonia_tui.memory.assembly import History, history_for_next_turn
from tests.cards import write_short_card
from tests.chat.conftest import tiny_settings

REPLY = "The lamp is lit and the sea is calm tonight."
NOTE = "[Keep the lighthouse and the storm in every scene, {{user}}.]"
LINES = (
    "Good evening, keeper.",
    "How long have you kept this light?",
    "Who kept it before you?",
    "Does the storm frighten you?",
    "What is that sound below?",
    "Shall we go down and look?",
)


async def _back_after_another(make_service, scripted_model, depth: int) -> TurnMetrics:
    """A conversation with the note at `depth`, one turn in another conversation, then the
    first conversation opened again (as the app opens it) and continued: that turn's figures."""
    write_short_card()
    service = await make_service(tiny_settings(scripted_model(REPLY), reply_max_tokens=24))
    card = service.library.get("wren")
    conv, other = service.new_conversation(card), service.new_conversation(card)
    service.save_settings(
        conv.id, ChatSettings(), ChatSettings(author_note=NOTE, author_note_depth=depth)
    )
    for text in LINES:
        await (await service.send(conv.id, text)).wait()
        await service.states_settled()  # the user reads the reply: its state is saved
    await (await service.send(other.id, "Hello, who are you?")).wait()
    await service.states_settled()
    await service.open_conversation(conv.id)
    await service.states_settled()
    done = await (await service.send(conv.id, "Then lead the way.")).wait()
    assert done.metrics is not None
    return done.metrics


async def test_a_conversation_with_a_deep_note_resumes_up_to_the_new_message(
    make_service, scripted_model
):
    at = {depth: await _back_after_another(make_service, scripted_model, depth) for depth in (0, 4)}
    for depth, metrics in at.items():
        assert metrics.restored > 0, (depth, metrics)  # its own state, loaded from disk
        assert metrics.reused == metrics.restored
    # Depth 0 reads the new message and the note after it; depth 4 has the note in the saved
    # state already, so it reads no more (it read the note and the four messages after it).
    assert at[4].evaluated <= at[0].evaluated, at
    assert at[4].restored > at[0].restored, at  # the note and all the history came from disk


def test_the_note_moves_to_where_the_next_turn_puts_it():
    system = ChatMessage("system", "setup")
    lines = tuple(ChatMessage("user" if i % 2 else "assistant", f"m{i}") for i in range(8))
    note = ChatMessage("system", "note")

    def next_of(depth: int, count: int, reply: ChatMessage | None = None):
        history = History((system,), lines[:count], (DepthNote("note", depth),))
        return history_for_next_turn(history, reply)

    # Depth 4 with eight lines: before the last four now, before the last three next turn.
    assert next_of(4, 8) == (system, *lines[:5], note, *lines[5:])
    assert next_of(4, 7, lines[7]) == (system, *lines[:5], note, *lines[5:])  # with the reply
    # Depth 0: after the next message, so not in what the next turn starts with.
    assert next_of(0, 8) == (system, *lines)
    assert next_of(4, 2) == (system, note, lines[0], lines[1])  # fewer lines: first
    assert next_of(4, 4) == (system, lines[0], note, *lines[1:4])
    assert next_of(1, 3) == (system, *lines[:3], note)
