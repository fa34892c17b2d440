"""The chat service on the server backend: turns, a fold, and a server that dies mid-reply.

Real llama-cpp-python servers on loopback (tests/server/conftest.py), the real store and the
real fold worker. The scripted tiny model answers every prompt with CHAPTER, so a landed
chapter is recognisable.
"""

from __future__ import annotations

import pytest

from kotonia_tui.chat.events import ReplyDelta
from kotonia_tui.chat.fold import worker as fold_worker
from kotonia_tui.domain import (
    ChatMessage,
    FoldJob,
    FoldKind,
    FoldStatus,
    MessageStatus,
    Role,
    utcnow,
)
from kotonia_tui.engine import GenerationResult
from kotonia_tui.engine.errors import StreamInterruptedError
from kotonia_tui.engine.server import ServerEngine
from kotonia_tui.engine.types import FinishReason, GenerationRequest, TextDelta
from tests.cards import write_short_card
from tests.scripted_chapters import written_by_script

from .conftest import CHAPTER, poll, server_profile, server_settings


async def chat_until_queued(service, conv_id, limit=80):
    for index in range(limit):
        turn = await service.send(conv_id, f"Message number {index} about the lamps.")
        done = await turn.wait()
        assert done.error is None, done.error
        if turn.prepared.queued is not None:
            return turn.prepared.queued
    raise AssertionError("the fold trigger was never crossed")


@pytest.mark.slow
async def test_turns_and_a_fold_through_the_service(make_service, scripted_server):
    key = write_short_card()
    service = await make_service(
        server_settings(scripted_server.url, n_ctx=2048, reply_max_tokens=64)
    )
    assert isinstance(service.engine, ServerEngine)
    conv = service.new_conversation(service.library.get(key))
    turn = await service.send(conv.id, "Good evening, Wren.")
    done = await turn.wait()
    assert done.error is None and done.reply.text == CHAPTER
    assert done.reply.status is MessageStatus.COMPLETE
    assert done.metrics.prompt_positions > 0 and done.metrics.generated > 0

    job = await chat_until_queued(service, conv.id)
    chapters = await poll(lambda: service.store.chapters(conv.id))
    assert written_by_script(chapters[0], CHAPTER)
    assert chapters[0].model == "tiny"
    assert service.store.get_fold(job.id).status is FoldStatus.DONE


async def test_a_killed_server_breaks_the_stream_with_the_partial_reply(own_server):
    engine = ServerEngine.open(server_profile(own_server.url))
    try:
        call = engine.start(
            GenerationRequest(
                messages=(ChatMessage("user", "Hello.", name="Ann"),),
                max_tokens=96,
                reply_name="Wren",
                user_name="Ann",
            )
        )
        with pytest.raises(StreamInterruptedError) as caught:
            async for event in call:
                if isinstance(event, TextDelta) and own_server.proc is not None:
                    own_server.kill()
        message = str(caught.value)
        assert own_server.url in message and "part way through the reply" in message
        partial = caught.value.partial
        assert isinstance(partial, GenerationResult)
        assert partial.finish_reason is FinishReason.LENGTH and partial.text
    finally:
        engine.close()


@pytest.mark.slow
async def test_server_killed_mid_reply_then_restarted(
    make_service, own_server, scripted_model_file, monkeypatch
):
    monkeypatch.setattr(fold_worker, "UNAVAILABLE_RETRY_S", 0.2)
    key = write_short_card()
    service = await make_service(server_settings(own_server.url, n_ctx=2048, reply_max_tokens=96))
    conv = service.new_conversation(service.library.get(key))
    service.worker.pause()  # hold the fold until the server is gone
    # The user says what the scripted chronicler records: a chapter's items must rest on the
    # messages they cite.
    hello = f"Hello, Wren. {CHAPTER}"
    assert (await (await service.send(conv.id, hello)).wait()).error is None
    first, last = service.messages(conv.id)[0], service.store.last_message(conv.id)
    job = service.store.enqueue_fold(
        FoldJob(
            conversation_id=conv.id,
            kind=FoldKind.CHAPTER,
            first_message_id=first.id,
            last_message_id=last.id,
            not_before=utcnow(),
        )
    )

    # The server dies while it streams a reply.
    turn = await service.send(conv.id, "Are you still there?")
    events = []
    async for event in turn:
        events.append(event)
        if isinstance(event, ReplyDelta) and own_server.proc is not None:
            own_server.kill()
    done = turn.done
    assert done.error is not None and own_server.url in done.error
    assert any(isinstance(e, ReplyDelta) for e in events)
    # The user's message is kept; no reply is stored as if it had finished.
    user = [m for m in service.messages(conv.id) if m.role is Role.USER][-1]
    assert user.text == "Are you still there?"
    last = service.store.last_message(conv.id)
    assert last.id == user.id or last.status in (MessageStatus.CUT, MessageStatus.ERROR)

    # The fold queue waits for the server instead of failing the job.
    service.worker.resume()
    waiting = await poll(
        lambda: (j := service.store.get_fold(job.id)).last_error and "waiting" in j.last_error and j
    )
    assert waiting.status is FoldStatus.PENDING and own_server.url in waiting.last_error

    # The server comes back (same port, same alias): the job runs and the chapter lands.
    own_server.start(scripted_model_file)
    await poll(lambda: service.store.get_fold(job.id).status is FoldStatus.DONE)
    assert written_by_script(service.store.chapters(conv.id)[0], CHAPTER)
    after = await (await service.send(conv.id, "Welcome back.")).wait()
    assert after.error is None and after.reply.text == CHAPTER
