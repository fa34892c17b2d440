"""Group chats end to end (issue 31) on a real SQLite file and the in-process fake engine
(tests/fake_engine.py): who answers, auto runs, members coming and going, and what a change
of speaker costs in evaluated positions. None of it depends on what a model writes; the fake's
KV contexts evaluate only what differs from what they hold, as the real engine does."""

from __future__ import annotations

import asyncio
import random

import pytest

from kotonia_tui.chat.errors import ChatError
from kotonia_tui.chat.events import TurnOutcome
from kotonia_tui.chat.impersonate import IMPERSONATE_NOTE
from kotonia_tui.chat.prompting import speaker_note
from kotonia_tui.chat.turn import NOTHING_WRITTEN
from kotonia_tui.domain import QuickReply, ReplyOrder
from tests.fake_engine import pieces, scripted
from tests.settings import fake_settings

ROWAN, TSUMUGI, LIN = "rowan-ashby", "tsukishima-tsumugi", "lin-wanzhou"


async def _group(service, keys=(ROWAN, TSUMUGI, LIN)):
    service.groups.rng = random.Random(5)
    return service.groups.new_group([service.library.get(k) for k in keys])


def _speakers(service, conv_id: int) -> list[tuple[str, str | None]]:
    return [(m.role.value, m.character_key) for m in service.store.recent_messages(conv_id, 100)]


async def test_a_group_opens_with_each_members_greeting_and_lists_its_cast(make_fake_service):
    service = await make_fake_service(fake_settings(), scripted("Hm."))
    conv = await _group(service)
    assert [m.character_key for m in service.store.cast(conv.id)] == [ROWAN, TSUMUGI, LIN]
    assert _speakers(service, conv.id) == [
        ("character", ROWAN),
        ("character", TSUMUGI),
        ("character", LIN),
    ]
    names = [m.speaker for m in service.store.recent_messages(conv.id, 10)]
    assert names == ["Rowan Ashby", "紬", "林晚舟"]
    # The chronicler is told the story is between all of them.
    assert service.cast_of(conv.id).members == ("Rowan Ashby", "紬", "林晚舟")
    with pytest.raises(ChatError, match="two cards or more"):
        service.groups.new_group([service.library.get(ROWAN)])


async def test_natural_order_the_member_named_answers_first(make_fake_service):
    service = await make_fake_service(fake_settings(), scripted("Hm."))
    conv = await _group(service)
    run = await service.groups.send(conv.id, "林晚舟, what do you think?")
    assert run.planned[0] == LIN
    turns = await run.wait()
    first = turns[0].done.reply
    assert first.character_key == LIN and first.speaker == "林晚舟"
    assert turns[0].prepared.request.reply_name == "林晚舟"
    stored = [k for _role, k in _speakers(service, conv.id)[4:]]
    assert stored == run.planned  # every planned member answered, in order


async def test_list_order_every_unmuted_member_in_the_casts_order(make_fake_service):
    service = await make_fake_service(fake_settings(), scripted("Hm."))
    conv = await _group(service)
    service.store.set_reply_order(conv.id, ReplyOrder.LIST)
    service.groups.set_muted(conv.id, TSUMUGI, True)
    await (await service.groups.send(conv.id, "Good morning, everyone.")).wait()
    assert _speakers(service, conv.id)[3:] == [
        ("user", None),
        ("character", ROWAN),
        ("character", LIN),
    ]


async def test_manual_order_waits_for_the_players_pick(make_fake_service):
    service = await make_fake_service(fake_settings(), scripted("Hm."))
    conv = await _group(service)
    service.store.set_reply_order(conv.id, ReplyOrder.MANUAL)
    with pytest.raises(ChatError, match="pick who answers \\(nothing was sent\\)"):
        await service.send(conv.id, "Anyone?")
    assert service.store.message_count(conv.id) == 3  # nothing stored
    run = await service.groups.send(conv.id, "Anyone?")
    assert run.planned == [] and await run.wait() == []
    (turn,) = await service.groups.reply(conv.id, TSUMUGI).wait()
    assert turn.done.reply.character_key == TSUMUGI
    with pytest.raises(ChatError, match="'nobody' is not in this group's cast"):
        await service.groups.reply(conv.id, "nobody").wait()


async def test_an_auto_run_goes_on_for_n_replies_and_stops_when_cancelled(make_fake_service):
    service = await make_fake_service(fake_settings(), scripted("And so it goes."))
    conv = await _group(service)
    service.store.set_reply_order(conv.id, ReplyOrder.LIST)
    turns = await service.groups.auto(conv.id, 4).wait()
    # Round the list after the last greeting's speaker (Lin): Rowan, Tsumugi, Lin, Rowan.
    assert [t.done.reply.character_key for t in turns] == [ROWAN, TSUMUGI, LIN, ROWAN]
    before = service.store.message_count(conv.id)
    # The second reply of the next run never ends by itself: Esc stops it and the run.
    service.engine.hold(lambda request: request.reply_name == "林晚舟")  # after Tsumugi
    run = service.groups.auto(conv.id, 5)
    seen = []
    async for turn in run:
        seen.append(turn)
        if len(seen) == 2:
            await asyncio.sleep(0.05)
            run.stop()
    service.engine.release()
    assert len(seen) == 2 and run.stopped
    assert seen[1].done.outcome is TurnOutcome.CANCELLED
    # Stopped while it read its prompt: nothing written, nothing stored; no third reply.
    assert seen[1].done.reply is None and seen[1].done.error == NOTHING_WRITTEN
    assert service.store.message_count(conv.id) == before + 1
    assert service.store.last_message(conv.id).character_key == TSUMUGI


async def test_members_join_and_leave_mid_story(make_fake_service):
    service = await make_fake_service(fake_settings(), scripted("Hm."))
    conv = service.new_conversation(service.library.get(ROWAN))
    assert not service.groups.is_group(conv.id)
    one = await (await service.send(conv.id, "Hello.")).wait()
    assert one.reply.character_key is None
    service.groups.add_member(conv.id, service.library.get(LIN))
    turn = await service.send(conv.id, "林晚舟, welcome.")
    done = await turn.wait()
    assert done.reply.character_key == LIN
    assert "# 林晚舟" in turn.prepared.request.messages[0].content
    assert turn.stats()["speaker"] == "林晚舟"
    service.groups.remove_member(conv.id, LIN)
    after = await (await service.send(conv.id, "Just us again.")).wait()
    assert after.reply.speaker == "Rowan Ashby"
    # Lin's reply stays in the story after Lin left.
    assert any(m.character_key == LIN for m in service.store.recent_messages(conv.id, 20))


async def test_a_change_of_speaker_evaluates_no_more_than_a_one_card_turn(make_fake_service):
    """The setup holds the whole cast; the speaker is named after the history: Lin answering
    after Rowan evaluates the new message, Lin's notes (lore, post-history instructions) and
    the named tail only, as a one-card chat with Lin does, plus the speaker's note."""
    service = await make_fake_service(fake_settings(), scripted("I see what you mean."))
    one = service.new_conversation(service.library.get(LIN))
    await (await service.send(one.id, "Hello there.")).wait()
    await service.states_settled()
    single = (await (await service.send(one.id, "How is the shop today?")).wait()).metrics

    conv = await _group(service, (ROWAN, LIN))
    await (await service.send(conv.id, "Hello there.", speaker=ROWAN)).wait()
    await service.states_settled()
    turn = await service.send(conv.id, "How is the shop today?", speaker=LIN)
    changed = (await turn.wait()).metrics
    note = len(pieces(speaker_note("林晚舟"))) + len(pieces("林晚舟")) + 2
    print(
        f"one-card turn: {single.evaluated} of {single.prompt_positions}; "
        f"group turn after a change of speaker: {changed.evaluated} of {changed.prompt_positions}"
    )
    assert changed.evaluated <= single.evaluated + note
    setup = len(pieces(turn.prepared.request.messages[0].content))
    assert changed.reused > setup  # the cast's setup and the history were not read again
    # The inspector's budget counts the setup the group's turns carry: the whole cast's.
    shared = turn.prepared.request.messages[0].content
    assert service.memory_view(conv.id).budget.setup == service.prompter.setup_tokens(shared)
    # Rowan going on with no new message evaluates Lin's reply, Rowan's notes (the speaker's
    # note last) and the tail.
    (after,) = await service.groups.reply(conv.id, ROWAN).wait()
    reply = service.store.get_message(turn.done.reply.id)
    notes = after.prepared.request.messages[-1]
    assert notes.role == "system" and notes.content.endswith(speaker_note("Rowan Ashby"))
    # The template's markers: the reply's turn (4 before, 2 after), the notes' turn (2 before,
    # 2 after) and the generation prompt (2). Whether the settle after Lin's turn has brought the
    # context to the history's stable prefix before Rowan's call is a race (it runs in the
    # background): if it has, Lin's reply was already read and this turn evaluates less.
    tail = 12
    assert (
        after.done.metrics.evaluated <= len(pieces(reply.text)) + len(pieces(notes.content)) + tail
    )


async def test_impersonate_writes_the_players_line_and_stores_nothing(make_fake_service):
    service = await make_fake_service(fake_settings(), scripted("I wave at everyone."))
    conv = await _group(service)
    before = service.store.message_count(conv.id)
    line = await service.impersonate(conv.id)
    assert line == "I wave at everyone."
    assert service.store.message_count(conv.id) == before  # never stored, never sent
    request = service.engine.requests[-1]
    persona = service.persona_of(conv).name
    assert request.reply_name == persona  # the model writes as the player
    assert request.messages[-1].content == IMPERSONATE_NOTE.format(user=persona)
    assert "\n林晚舟:" in request.extra_stops  # and stops where a character's line starts


async def test_quick_replies_are_the_global_ones_then_each_members(make_fake_service):
    service = await make_fake_service(fake_settings(), scripted("Hm."))
    conv = await _group(service, (ROWAN, LIN))
    service.store.add_quick_reply(QuickReply(label="Look", text="*looks around*"))
    service.store.add_quick_reply(QuickReply(character_key=LIN, label="Tea", text="Tea, please."))
    service.store.add_quick_reply(QuickReply(character_key=TSUMUGI, label="Other", text="x"))
    assert [q.label for q in service.quick_replies(conv.id)] == ["Look", "Tea"]
