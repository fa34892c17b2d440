"""Overflow and failure: each gives a visible, specific error; the story goes on; nothing is lost.
The two chronicler failures run on the fake engine (tests/fake_engine.py) and a clock the test
moves (tests/fake_clock.py); the rest on tiny real models.

* a reply that runs into its cap and the window (a model that never stops, a small n_ctx);
* a chronicler whose every chapter holds nothing (each range is quoted from its own lines);
* a chronicler whose model call fails every time (retried; the last attempt quotes the range);
* the model file disappearing after it was loaded (the loaded model keeps working; the next
  load names the missing file);
* a full disk (a size-limited database: `PRAGMA max_page_count`): a StoreError naming the file;
  what was stored before is intact and the conversation goes on once there is room.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from kotonia_tui.chat.bootstrap import open_service
from kotonia_tui.chat.errors import ChatError
from kotonia_tui.chat.events import FoldProgress, FoldState, ServiceEvent
from kotonia_tui.chat.fold import worker as fold_worker
from kotonia_tui.chat.service import ChatService
from kotonia_tui.domain import FoldKind, FoldStatus, MessageStatus, Role
from kotonia_tui.engine import EngineError, ModelFileError, Slot
from kotonia_tui.engine.types import GenerationRequest
from kotonia_tui.store import Store, StoreError
from tests.fake_clock import FakeClock
from tests.fake_engine import scripted

from .conftest import (
    HOLLOW_CHAPTER,
    db_path,
    fake_settings_on,
    settings_on,
    write_card,
    write_config,
)


def user_texts(store: Store, conv_id: int) -> list[str]:
    return [m.text for m in store.iter_messages(conv_id) if m.role is Role.USER]


async def test_replies_that_fill_the_window_are_cut_visibly_and_the_story_goes_on(
    make_service, tiny_noeos_model_path
):
    write_card()
    # Each reply may take 40% of a 1024-token window and never ends by itself.
    service = await make_service(
        settings_on(tiny_noeos_model_path, n_ctx=1024, reply_max_tokens=400), db=db_path()
    )
    conv = service.new_conversation(service.library.get("wren"))
    sent = []
    for index in range(8):
        text = f"Tell me more, part {index}."
        sent.append(text)
        done = await (await service.send(conv.id, text)).wait()
        assert done.error is None, done.error
        reply = done.reply
        assert reply.status is MessageStatus.CUT
        assert reply.status_reason == "cut: the reply reached its cap of 400 tokens"
        assert done.metrics.prompt_positions + done.metrics.generated <= 1024
    assert user_texts(service.store, conv.id) == sent  # nothing lost to the forced cuts
    # "Continue" the cut reply until reply and prompt no longer fit the window together.
    errors = []
    for _ in range(4):
        last = service.store.last_message(conv.id)
        try:
            # A continuation gets the room left; with none left it is refused before it starts.
            done = await (await service.continue_reply(conv.id)).wait()
        except ChatError as exc:
            errors.append(str(exc))
            assert service.store.get_message(last.id).text == last.text  # kept as it was
            continue
        if done.error is not None:
            errors.append(done.error)
            assert service.store.get_message(last.id).text == last.text  # kept as it was
        else:
            assert done.reply.text.startswith(last.text)  # only ever grows
    print("continue errors:", errors)
    for error in errors:
        assert "\n" not in error and ("window" in error or "context" in error), error
    assert user_texts(service.store, conv.id) == sent
    assert service.store.integrity_check() == "ok"


async def run_retries(service: ChatService, clock: FakeClock) -> None:
    """Every retry a failed fold job waits for runs now: the clock is moved past each backoff
    until no job waits for one."""
    while True:
        assert await service.worker.wait_idle(60)
        if not service.store.next_fold_due():
            return
        clock.advance(max(fold_worker.RETRY_BACKOFF_S))


async def test_a_chronicler_that_never_gives_a_chapter(make_fake_service):
    """Every chapter the chronicler writes holds nothing, asked again the same. No empty chapter
    is stored and no job fails for it: each range is quoted from its own lines, with a note that
    says why, so nothing leaves the prompt without being in the memory.

    Fake engine: this test is about what the fold worker stores and retries for an answer that
    holds nothing, which does not depend on the model; the clock is moved past every backoff."""
    write_card()
    clock = FakeClock()
    service = await make_fake_service(
        fake_settings_on(prewarm_after_fold=False), scripted(HOLLOW_CHAPTER), db_path(), clock
    )
    events: list[ServiceEvent] = []
    service.subscribe(events.append)
    conv = service.new_conversation(service.library.get("wren"))
    sent = []
    forced = False
    store = service.store
    for index in range(60):
        text = f"Message number {index} about the lamps."
        sent.append(text)
        turn = await service.send(conv.id, text)
        done = await turn.wait()
        assert done.error is None, done.error
        forced = forced or turn.prepared.plan.forced_cut_through is not None
        await asyncio.wait_for(service.worker.wait_settled(conv.id), 60)
        await run_retries(service, clock)
        if len(store.chapters(conv.id, include_in_synopsis=True)) >= 3:
            break
    chapters = store.chapters(conv.id, include_in_synopsis=True, include_superseded=True)
    assert len(chapters) >= 3
    for chapter in chapters:
        assert chapter.quoted and "holds nothing from messages #" in chapter.note
        lines = chapter.text.splitlines()
        assert lines and all(line.startswith("#") and ": " in line for line in lines)
    failed = [e for e in events if isinstance(e, FoldProgress) and e.state is FoldState.FAILED]
    assert not [e for e in failed if e.job.kind is not FoldKind.MAJOR_GC]
    assert not any(j.attempts > 1 for j in store.fold_jobs(conv.id) if j.kind is FoldKind.CHAPTER)
    assert not forced  # nothing left the prompt that the memory does not hold
    assert user_texts(store, conv.id) == sent
    done = await (await service.send(conv.id, "Still talking.")).wait()
    assert done.error is None
    assert chapters[0].text in store.memory_state(conv.id).memory_text or chapters[0].in_synopsis


async def test_a_chapter_whose_model_call_always_fails_is_quoted_on_its_last_attempt(
    make_fake_service,
):
    """The fold's model call raises an engine error every time. Each attempt fails visibly and
    is retried; the last one stores the range quoted from its own lines instead of failing for
    good, so the range is never in neither the prompt nor the memory.

    Fake engine: a real llama.cpp context cannot be made to fail a decode on demand; the fake's
    fold calls raise. The turns, the store, the counts, the quote and the worker's retries are
    real; the clock is moved past every backoff."""
    write_card()

    def fold_calls_fail(request: GenerationRequest) -> str:
        if request.slot is Slot.FOLD:
            raise EngineError("llama_decode returned -3 (test)")
        return "The lamp is lit."

    clock = FakeClock()
    service = await make_fake_service(
        fake_settings_on(prewarm_after_fold=False), fold_calls_fail, db_path(), clock
    )
    events: list[ServiceEvent] = []
    service.subscribe(events.append)
    conv = service.new_conversation(service.library.get("wren"))
    store = service.store
    sent = []
    for index in range(60):
        sent.append(f"Message number {index}: the lamps need 12 wicks from Tarn.")
        done = await (await service.send(conv.id, sent[-1])).wait()
        assert done.error is None, done.error
        await run_retries(service, clock)  # every retry runs
        if store.chapters(conv.id, include_in_synopsis=True):
            break
    first_job = min(
        (j for j in store.fold_jobs(conv.id) if j.kind is FoldKind.CHAPTER), key=lambda j: j.id
    )
    assert first_job.attempts == fold_worker.MAX_ATTEMPTS
    assert first_job.status is FoldStatus.DONE
    failed = [
        e
        for e in events
        if isinstance(e, FoldProgress) and e.state is FoldState.FAILED and e.job.id == first_job.id
    ]
    assert len(failed) == fold_worker.MAX_ATTEMPTS - 1
    assert all("llama_decode returned -3" in e.detail for e in failed)
    chapter = store.chapters(conv.id, include_in_synopsis=True)[0]
    assert chapter.first_message_id == first_job.first_message_id
    assert chapter.quoted
    assert "the model failed on every attempt (llama_decode returned -3 (test))" in chapter.note
    lines = chapter.text.splitlines()
    assert lines and all(line.startswith("#") and ": " in line for line in lines)
    # The user's sentences with names and numbers are kept in their words.
    assert any("12 wicks from Tarn" in e.text for e in store.ledger(conv.id))
    done = await (await service.send(conv.id, "Still talking.")).wait()
    assert done.error is None
    assert chapter.text in store.memory_state(conv.id).memory_text
    assert user_texts(store, conv.id) == [*sent, "Still talking."]


async def test_the_model_file_disappears(make_service, tiny_model_path, tmp_path):
    write_card()
    model = tmp_path / "copy.gguf"
    shutil.copyfile(tiny_model_path, model)
    settings = settings_on(model)
    service = await make_service(settings, db=db_path())
    conv = service.new_conversation(service.library.get("wren"))
    assert (await (await service.send(conv.id, "Before.")).wait()).error is None
    model.unlink()
    # The loaded model is mapped: the open session goes on.
    done = await (await service.send(conv.id, "After the file went away.")).wait()
    assert done.error is None and done.reply is not None
    await service.close()

    # The next load says which file is missing, before touching anything else.
    with pytest.raises(ModelFileError, match=str(model)) as caught:
        open_service(settings, db=db_path())
    assert "\n" not in str(caught.value)
    # The CLI: exit status 1 and one specific line.
    write_config(model)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from kotonia_tui.cli import main; sys.exit(main())",
            "chat",
            "wren",
            "--conversation",
            str(conv.id),
            "--say",
            "Hello?",
        ],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert str(model) in line
    with Store.open(db_path()) as store:
        assert user_texts(store, conv.id) == ["Before.", "After the file went away."]


async def test_a_full_disk(make_service, scripted_model):
    write_card()
    service = await make_service(settings_on(scripted_model("The lamp is lit.")), db=db_path())
    conv = service.new_conversation(service.library.get("wren"))
    for index in range(3):
        assert (await (await service.send(conv.id, f"Early {index}")).wait()).error is None
    before = list(service.store.iter_messages(conv.id))
    # The database may not grow any more: the next pages it needs are "disk full".
    conn = service.store._db.conn  # the test limits the store's own connection
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    big = "a long line that needs new pages " * 400
    with pytest.raises(StoreError) as caught:
        for _ in range(20):
            await (await service.send(conv.id, big)).wait()
    message = str(caught.value)
    assert str(db_path()) in message and "full" in message and "\n" not in message
    # Nothing stored before is lost, the file is sound, and with room again the story goes on.
    assert list(service.store.iter_messages(conv.id))[: len(before)] == before
    assert service.store.integrity_check() == "ok"
    conn.execute("PRAGMA max_page_count = 1073741823")
    done = await (await service.send(conv.id, "There is room again.")).wait()
    assert done.error is None and done.reply.text == "The lamp is lit."
    texts = user_texts(service.store, conv.id)
    assert texts[:3] == ["Early 0", "Early 1", "Early 2"] and texts[-1] == "There is room again."


async def test_a_disk_that_fills_while_the_reply_streams(make_service, tiny_noeos_model_path):
    """The user's line is stored; then the disk fills; the long reply cannot be stored."""
    write_card()
    service = await make_service(
        settings_on(tiny_noeos_model_path, n_ctx=4096, reply_max_tokens=2000), db=db_path()
    )
    conv = service.new_conversation(service.library.get("wren"))
    turn = await service.send(conv.id, "Tell me everything.")
    # The reply (2,000 tokens, several KB) needs pages of its own; the filler takes the rest.
    conn = service.store._db.conn
    conn.execute("CREATE TABLE filler (x BLOB)")
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    for size in (65536, 4096, 512, 64, 1):  # use up every free byte of the allowed pages
        while True:
            try:
                conn.execute("INSERT INTO filler VALUES (zeroblob(?))", (size,))
            except sqlite3.OperationalError:
                break
    done = await turn.wait()  # a TurnDone with the reason, not an exception
    assert done.reply is None
    assert done.error.startswith("the reply could not be stored: ")
    assert str(db_path()) in done.error and "full" in done.error
    conn.execute("DROP TABLE filler")
    conn.execute("PRAGMA max_page_count = 1073741823")
    assert user_texts(service.store, conv.id) == ["Tell me everything."]
    assert service.store.integrity_check() == "ok"
    again = await (await service.send(conv.id, "Once more.")).wait()
    assert again.error is None and again.reply is not None
