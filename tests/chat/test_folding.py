"""Generational memory end to end: real SQLite, the real fold worker and service.

The chronicler's words are known: every model call writes a fixed script, so the tests can tell a
stored chapter from a refusal (a chapter carries the script's words in its structure,
tests/scripted_chapters.py), and the prompt's bytes from turn to turn. Replies in the chat are
that same script. The first test runs the real engine on a tiny GGUF scripted so
(tests/tiny_models.py): a turn, a fold that lands and the turn that applies it. The others run on
the fake engine (tests/fake_engine.py), which writes the script the same way, in milliseconds.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import replace

from kotonia_tui.chat.events import FoldProgress, FoldState, MemoryNotice, ServiceEvent
from kotonia_tui.domain import (
    QUOTED_SYNOPSIS_LEAD,
    FoldKind,
    FoldStatus,
    LedgerKind,
    SynopsisOrigin,
)
from kotonia_tui.engine import Slot
from tests.cards import write_short_card
from tests.fake_engine import Step, by_kind, scripted
from tests.scripted_chapters import written_by_script
from tests.settings import fake_settings

from .conftest import tiny_settings

CHAPTER = "Ann visited Wren at the lighthouse and they talked about the storm lamps."
# A chronicler that keeps nothing: under the grammar its words land in the chapter's strings,
# and a bare list of words says nothing (memory/structured.py `says_something`), so every item is
# dropped and the chapter is never stored.
HOLLOW_CHAPTER = "Harwick, Street, Corwin, Lamps, Storm, Tower, Key"


def _defaults(values):
    values.setdefault("n_ctx", 2048)
    values.setdefault("reply_max_tokens", 32)
    values.setdefault("prewarm_after_fold", False)
    # The scenarios' bounds on evaluated positions (a warm turn reads less than a quarter of
    # its prompt) were set with recall at 10% of the window; recalled tokens are read again
    # every turn, so at the 20% default (D-28) they alone are a fifth of the prompt.
    values.setdefault("recall_budget_ratio", 0.1)
    return values


def settings_for(model, **values):
    """A tiny real model's settings at the fold tests' window."""
    return tiny_settings(model, **_defaults(values))


def fake_settings_for(**values):
    """The same settings, for the fake engine."""
    return fake_settings(**_defaults(values))


async def chat_until(service, conv_id, predicate, limit=200, say=None):
    """Send short user messages (`say(index)`, if given) until `predicate(turn)` holds; returns
    the turns sent."""
    turns = []
    for index in range(limit):
        text = say(index) if say else f"Message number {index} about the lamps."
        turn = await service.send(conv_id, text)
        done = await turn.wait()
        assert done.error is None, done.error
        turns.append(turn)
        if predicate(turn):
            return turns
    raise AssertionError("the condition never held")


async def first_synopsis(service, conv_id):
    """Chat and let the folds settle until a major fold has stored a synopsis; its first
    version."""
    for _ in range(30):
        await chat_until(service, conv_id, lambda t: t.prepared.queued is not None)
        await service.worker.wait_settled(conv_id)
        if versions := service.store.synopsis_versions(conv_id):
            return versions[0]
    raise AssertionError("no major fold stored a synopsis")


async def test_crossing_queues_the_fold_and_only_the_next_turn_applies_it(
    make_service, scripted_model
):
    key = write_short_card()
    service = await make_service(settings_for(scripted_model(CHAPTER)))
    events: list[ServiceEvent] = []
    service.subscribe(events.append)
    card = service.library.get(key)
    conv = service.new_conversation(card)
    service.worker.pause()  # hold the job, to look at the turn that queued it

    turns = await chat_until(service, conv.id, lambda turn: turn.prepared.queued is not None)
    crossing, before = turns[-1], turns[-2]
    job = crossing.prepared.queued
    assert job.kind is FoldKind.CHAPTER and job.status is FoldStatus.PENDING
    assert any(isinstance(e, FoldProgress) and e.state is FoldState.QUEUED for e in events)
    # The crossing turn changed nothing: same memory, same verbatim start, cache reused.
    assert crossing.prepared.state.memory_text == before.prepared.state.memory_text == ""
    assert crossing.prepared.plan.verbatim_start_id == before.prepared.plan.verbatim_start_id
    assert crossing.done.metrics.reused >= before.done.metrics.prompt_positions - 2

    service.worker.resume()
    await service.worker.wait_settled(conv.id)
    chapters = service.store.chapters(conv.id)
    # One chapter, or several when the range is too large for one summarizer call.
    assert chapters and all(written_by_script(c, CHAPTER) for c in chapters)
    assert chapters[0].first_message_id <= job.first_message_id
    assert chapters[-1].last_message_id == job.last_message_id
    chapter = chapters[-1]
    landed_view = service.memory_view(conv.id)
    assert landed_view.pending_apply and not any(c.applied for c in landed_view.chapters)
    # The preview (what the prewarm evaluates) applies the chapter as the next turn will, and
    # stores nothing: the memory state and the fold queue are as they were.
    stored = service.store.memory_state(conv.id)
    persona = service.persona_of(conv)
    preview = await service.prompter.preview(
        conv.id, card, service.setup_for(card, persona), persona
    )
    assert chapter.text in preview.state.memory_text and preview.queued is None
    assert service.store.memory_state(conv.id) == stored
    assert not service.open_folds(conv.id)

    applying = await service.send(conv.id, "And then?")
    done = await applying.wait()
    assert done.error is None
    # The turn's prompt is the previewed one and the new message after it (then the excerpts
    # recall found for it, if any: the preview recalls nothing).
    sent = applying.prepared.request.messages
    assert sent[: len(preview.request.messages)] == preview.request.messages
    assert sent[len(preview.request.messages)].content == "And then?"
    notes = 1 if applying.prepared.recall.excerpts else 0
    assert len(sent) == len(preview.request.messages) + 1 + notes
    state = applying.prepared.state
    assert chapter.text in state.memory_text
    assert state.verbatim_start_id == chapter.last_message_id + 1
    assert any(isinstance(e, MemoryNotice) and "folded" in e.text for e in events)
    assert not service.memory_view(conv.id).pending_apply

    # The turn after the applying turn reuses the new prefix: only new tokens are evaluated.
    # Sent once the settle after the reply has run (in the background, as a person reads the
    # reply): sent before it, the context still holds the applying turn's notes after its
    # message, and the template's markers there are read again (seen under load in the suite:
    # 1,292 reused for 1,298 cells).
    await service.states_settled()
    after = await service.send(conv.id, "Go on.")
    after_done = await after.wait()
    assert after.prepared.state.memory_text == state.memory_text
    # All the applying turn sent but its notes (the recalled excerpts are the turn's own).
    kept = replace(applying.prepared.request, messages=sent[: len(sent) - notes])
    assert after_done.metrics.reused >= service.engine.prompt_cells(kept) - 2
    if not notes:
        assert after_done.metrics.reused >= done.metrics.prompt_positions - 2
    assert after_done.metrics.evaluated < after_done.metrics.prompt_positions / 4


async def test_chapters_stack_never_change_and_a_major_gc_keeps_old_synopses(make_fake_service):
    """Fake engine: this test is about what chapters and major folds store, which does not
    depend on the model."""
    key = write_short_card()
    # The scripted chronicler writes CHAPTER for the synopsis too: its target is that size.
    service = await make_fake_service(
        fake_settings_for(major_gc_ratio=0.03, synopsis_target_ratio=0.01), scripted(CHAPTER)
    )
    conv = service.new_conversation(service.library.get(key))
    written: dict[int, str] = {}

    def gc_done() -> bool:
        for chapter in service.store.chapters(conv.id, include_in_synopsis=True):
            # A chapter, once written, never changes.
            assert written.setdefault(chapter.id, chapter.text) == chapter.text
        return len(service.store.synopsis_versions(conv.id)) >= 2

    for _ in range(30):
        await chat_until(service, conv.id, lambda t: t.prepared.queued is not None)
        await service.worker.wait_settled(conv.id)
        if gc_done():
            break
    versions = service.store.synopsis_versions(conv.id)
    assert len(versions) >= 2
    assert [v.current for v in versions].count(True) == 1
    assert versions[-1].current and not versions[0].current
    assert versions[0].text  # the old version is kept for audit
    assert len(written) >= 3
    folded = [c for c in service.store.chapters(conv.id, include_in_synopsis=True) if c.in_synopsis]
    assert folded  # the older chapters went into the synopsis, and stay stored


async def test_a_chapter_that_holds_nothing_is_never_stored_and_the_range_is_quoted_instead(
    make_fake_service,
):
    """A chapter whose items say nothing keeps nothing; asking a greedy chronicler again gives
    the same answer, and the range would stay out of the memory for good. Its chapter quotes
    the range's own lines instead and says why.

    Fake engine: this test is about what the worker stores for a hollow answer, which does not
    depend on the model."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(HOLLOW_CHAPTER))
    conv = service.new_conversation(service.library.get(key))
    events: list[ServiceEvent] = []
    service.subscribe(events.append)
    turns = await chat_until(service, conv.id, lambda turn: turn.prepared.queued is not None)
    job = turns[-1].prepared.queued
    await service.worker.wait_settled(conv.id)
    chapters = service.store.chapters(conv.id)
    assert chapters and chapters[0].first_message_id == job.first_message_id
    for chapter in chapters:
        # Each line quotes one of its messages, as "#id speaker: its words".
        for line in chapter.text.splitlines():
            number, _, _ = line.partition(" ")
            message = service.store.get_message(int(number.removeprefix("#")))
            assert chapter.first_message_id <= message.id <= chapter.last_message_id
            assert line.startswith(f"#{message.id} {message.speaker}: ")
        assert chapter.quoted and "holds nothing" in chapter.note
        assert chapter.note.startswith(
            f"quoted from messages #{chapter.first_message_id}-#{chapter.last_message_id}"
        )
    assert "Message number 0 about the lamps." in chapters[0].text
    # The user's sentences with names and numbers are in the ledger too, in their own words:
    # it keeps them after a major fold takes the quote into the synopsis.
    facts = [e for e in service.store.ledger(conv.id) if e.kind is LedgerKind.USER_FACT]
    assert any("Message number 0 about the lamps." in e.text for e in facts)
    assert {e.chapter_id for e in facts} <= {c.id for c in chapters}
    done = service.store.get_fold(job.id)
    assert done.status is FoldStatus.DONE and done.attempts == 1
    assert not [e for e in events if isinstance(e, FoldProgress) and e.state is FoldState.FAILED]
    # The next turn carries the quote as memory.
    applying = await service.send(conv.id, "And then?")
    assert (await applying.wait()).error is None
    assert chapters[0].text in applying.prepared.state.memory_text


async def test_past_the_ceiling_the_oldest_messages_leave_the_prompt_but_stay_stored(
    make_fake_service,
):
    """Fake engine: this test is about the ceiling and the store, which do not depend on the
    model."""
    key = write_short_card()
    # Quote first off: a turn at the ceiling would carry the range at once instead of cutting.
    service = await make_fake_service(fake_settings_for(fold_quote_first=False), scripted(CHAPTER))
    conv = service.new_conversation(service.library.get(key))
    service.worker.pause()  # the summarizer "keeps failing": nothing lands
    turns = await chat_until(
        service, conv.id, lambda turn: turn.prepared.plan.forced_cut_through is not None
    )
    cut = turns[-1].prepared.plan.forced_cut_through
    state = service.store.memory_state(conv.id)
    assert state.forced_cut_through_id == cut
    assert state.verbatim_start_id > cut
    assert service.store.get_message(cut).text  # still stored
    assert any("left the prompt" in n for n in turns[-1].notices)
    # Folding catches up later and covers the cut messages too.
    service.worker.resume()
    await service.worker.wait_settled(conv.id)
    chapters = service.store.chapters(conv.id)
    assert chapters and chapters[0].first_message_id <= cut <= chapters[-1].last_message_id
    assert service.memory_view(conv.id).forced_cut_through_id == cut  # still out of the prompt
    # The turn that applies them brings the cut messages back (as memory): no warning is left.
    applying = await service.send(conv.id, "And then?")
    assert (await applying.wait()).error is None
    assert applying.prepared.plan.apply_landed
    assert service.memory_view(conv.id).forced_cut_through_id is None


async def test_an_edit_inside_a_folded_range_refolds_that_range_only(make_fake_service):
    """Fake engine: this test is about which chapters an edit refolds, which does not depend on
    the model."""
    key = write_short_card()
    # The chapters stay live (no major fold takes them into the synopsis): an edit inside a
    # chapter the synopsis holds is test_small_windows' refold-and-rebuild case.
    service = await make_fake_service(
        fake_settings_for(major_gc_min_chapters=50), scripted(CHAPTER)
    )
    conv = service.new_conversation(service.library.get(key))
    for _ in range(2):
        await chat_until(service, conv.id, lambda turn: turn.prepared.queued is not None)
        await service.worker.wait_settled(conv.id)
        await (await service.send(conv.id, "apply")).wait()
    first, second = service.store.chapters(conv.id)[:2]
    target = service.store.messages_between(conv.id, first.first_message_id, first.last_message_id)
    service.edit_message(target[1].id, "An edited line about the lamps.")
    await service.worker.wait_settled(conv.id)
    live = service.store.chapters(conv.id)
    old = service.store.get_chapter(first.id)
    assert old.stale and old.superseded_by is not None
    replacement = service.store.get_chapter(old.superseded_by)
    assert (replacement.first_message_id, replacement.last_message_id) == (
        first.first_message_id,
        first.last_message_id,
    )
    assert service.store.get_chapter(second.id) == second  # untouched
    assert first.id not in [c.id for c in live]


async def test_prewarm_makes_the_applying_turn_cheap(make_fake_service):
    """Fake engine: this test is about the service prewarming the prompt a landed fold makes;
    the engine's prewarm context (which the fake models as the real one does its items) is
    tests/engine/test_engine.py's."""
    key = write_short_card()
    figures = {}
    for prewarm in (False, True):
        service = await make_fake_service(
            fake_settings_for(prewarm_after_fold=prewarm), scripted(CHAPTER)
        )
        conv = service.new_conversation(service.library.get(key))
        await chat_until(service, conv.id, lambda turn: turn.prepared.queued is not None)
        await service.worker.wait_settled(conv.id)
        if prewarm:
            await service._prewarm_task
        applying = await service.send(conv.id, "And then?")
        done = await applying.wait()
        assert applying.prepared.plan.apply_landed
        figures[prewarm] = done.metrics
    cold, warm = figures[False], figures[True]
    print(f"\napplying turn: {cold.evaluated} evaluated cold, {warm.evaluated} with prewarm")
    assert cold.evaluated > cold.prompt_positions / 2
    assert warm.evaluated < warm.prompt_positions / 4


async def test_a_user_turn_goes_before_a_running_fold_and_never_waits_for_it(make_fake_service):
    """The fold makes no progress once it has started (the fake engine pauses it), so the
    chronicler runs as long as the test needs.

    Fake engine: this test is about who goes first on the engine's owner thread, which the fake
    runs its calls on as the real engine does; it does not depend on the model."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(reply_max_tokens=16), scripted(CHAPTER))
    engine = service.engine
    started = threading.Event()

    def hold_the_fold(step: Step) -> None:
        if step.request.slot is Slot.FOLD and not started.is_set():
            started.set()
            engine.hold(lambda request: request.slot is Slot.FOLD)

    engine.on_step = hold_the_fold
    conv = service.new_conversation(service.library.get(key))
    await chat_until(service, conv.id, lambda turn: turn.prepared.queued is not None, limit=400)
    for _ in range(500):  # wait until the chronicler is generating
        running = service.worker.running
        if running is not None and service.engine.busy:
            break
        await asyncio.sleep(0.01)
    assert service.worker.running is not None
    job = service.worker.running[0]
    done = await (await service.send(conv.id, "A question while it folds.")).wait()
    assert done.reply is not None and done.error is None
    # The reply came while the fold was still generating: the user did not wait for it.
    assert service.worker.running is not None and service.worker.running[0].id == job.id
    engine.release()


async def test_moving_to_a_narrow_window_folds_the_backlog_into_several_chapters(
    make_fake_service, tmp_path
):
    """Fake engine: this test is about the fold policy when the window shrinks, which does not
    depend on the model."""
    from kotonia_tui.domain import Message, Role

    key = write_short_card()
    db = tmp_path / "shared.sqlite3"
    # A long conversation kept verbatim under a wide window (here: 8k counted as wide).
    wide = await make_fake_service(
        fake_settings_for(n_ctx=8192, wide_window_ctx=8192, reply_max_tokens=32),
        scripted(CHAPTER),
        db=db,
    )
    conv = wide.new_conversation(wide.library.get(key))
    backlog = []
    for i in range(120):
        backlog.append(Message(role=Role.USER, speaker="User", text=f"Lamp question {i}?"))
        backlog.append(Message(role=Role.CHARACTER, speaker="Wren", text=f'"Lamp answer {i}."'))
    ids = wide.store.add_messages(conv.id, backlog)
    await (await wide.send(conv.id, "Still there?")).wait()
    assert wide.store.memory_state(conv.id).memory_text == ""  # nothing folded yet
    await wide.close()

    narrow = await make_fake_service(fake_settings_for(n_ctx=2048), scripted(CHAPTER), db=db)
    turn = await narrow.send(conv.id, "Now on a smaller model.")
    done = await turn.wait()
    assert done.error is None  # the prompt never overflows
    # The backlog cannot stay in a 2,048-token prompt: the turn queued its chapters and waited
    # for them, so it left the prompt only once it was in the memory.
    plan = turn.prepared.plan
    assert plan.forced_cut_through is None and plan.apply_landed
    assert plan.verbatim_start_id is not None and plan.verbatim_start_id > ids[0]
    await narrow.worker.wait_settled(conv.id)
    chapters = narrow.store.chapters(conv.id, include_in_synopsis=True)
    assert len(chapters) >= 2  # too large for one summarizer call: several, oldest first
    for earlier, later in itertools.pairwise(chapters):
        assert later.first_message_id == earlier.last_message_id + 1
    assert chapters[0].first_message_id <= ids[0]
    assert chapters[-1].last_message_id >= plan.verbatim_start_id - 1
    following = await narrow.send(conv.id, "And now?")
    assert (await following.wait()).error is None
    assert following.prepared.plan.forced_cut_through is None


async def test_a_synopsis_sentence_that_rests_on_nothing_it_folds_is_left_out(make_fake_service):
    """Seen on the embedded chronicler (issue 28): "So far in the story, I have not found a
    single word of this story." was stored beside a line that kept names, and took more than
    half of the synopsis. The sentence is left out of the synopsis, which keeps the rest, and
    the version records it for the inspector.

    Fake engine: this test is about what a major fold stores for a given draft, which does not
    depend on the model."""
    key = write_short_card()
    kept = "Ann and Wren talked about the storm lamps at the lighthouse."
    self_talk = "So far in the story, I have not found a single word of this story."
    service = await make_fake_service(
        fake_settings_for(major_gc_ratio=0.03, synopsis_target_ratio=0.04),
        by_kind(chat=CHAPTER, chapter=CHAPTER, prose=f"{self_talk} {kept}"),
    )
    conv = service.new_conversation(service.library.get(key))
    first = await first_synopsis(service, conv.id)
    assert (first.origin, first.text, first.dropped) == (
        SynopsisOrigin.SUMMARY,
        kept,
        (self_talk,),
    )
    (shown,) = await chat_until(
        service, conv.id, lambda t: t.prepared.state.applied_synopsis_id is not None
    )
    memory = shown.prepared.state.memory_text
    assert kept in memory and self_talk not in memory


async def test_a_base_models_chapter_keeps_only_its_paragraph(make_fake_service):
    """Fake engine: this test is about what a chapter's schema lets in, which the fake applies
    to the script as a grammar does; it does not depend on the model."""
    # The scripted model writes one paragraph, a blank line, then invents the next turn of the
    # transcript, as Gemma 3 270M (the embedded base model) does. A chapter's strings hold no
    # line break, so the invented turn can never enter the chapter. (The script closes its
    # string: left open, a scripted model starts its sentence over where the grammar refuses
    # the line break, and a sentence said twice is a loop, never stored.)
    script = ' Ann asked Wren about the lamps."\n\nNarrator: And then Wren lit them.'
    key = write_short_card()
    service = await make_fake_service(
        fake_settings_for(prompt_format="transcript", chronicler_lead="In this part of the story,"),
        scripted(script),
    )
    events: list[ServiceEvent] = []
    service.subscribe(events.append)
    conv = service.new_conversation(service.library.get(key))
    await chat_until(service, conv.id, lambda turn: turn.prepared.queued is not None)
    await service.worker.wait_settled(conv.id)
    chapters = service.store.chapters(conv.id)
    assert chapters
    for chapter in chapters:
        assert written_by_script(chapter, script)
        assert "Narrator" not in chapter.text and "\n\n" not in chapter.text
    assert not [e for e in events if isinstance(e, FoldProgress) and e.state is FoldState.FAILED]


def test_a_profile_in_the_transcript_format_leads_its_chronicler_unless_told_otherwise():
    from kotonia_tui.config import ModelProfile, PromptFormat
    from kotonia_tui.memory.chronicler import chronicler_lead

    base = ModelProfile(prompt_format=PromptFormat.TRANSCRIPT)
    chat = ModelProfile(prompt_format=PromptFormat.TEMPLATE)
    assert chronicler_lead(base) == "In this part of the story,"
    assert chronicler_lead(chat) == ""
    assert chronicler_lead(base.model_copy(update={"chronicler_lead": ""})) == ""
    assert chronicler_lead(chat.model_copy(update={"chronicler_lead": " So far: "})) == "So far:"


async def test_a_synopsis_that_keeps_nothing_of_its_chapters_is_quoted_instead(make_fake_service):
    """Seen on the embedded chronicler (issue 28): "So far in the story, the chronicler is not
    saying anything." was stored as the synopsis and replaced every line of the story before
    it. A draft that keeps almost nothing of the chapters it folds is never stored: the
    synopsis quotes them, and they stay in the memory.

    Fake engine: this test is about what a major fold stores for a given draft, which does not
    depend on the model."""
    key = write_short_card()
    service = await make_fake_service(
        fake_settings_for(major_gc_ratio=0.03, synopsis_target_ratio=0.04),
        by_kind(
            chat="Wren nods.",
            chapter=CHAPTER,
            prose="So far in the story, the chronicler is not saying anything.",
        ),
    )
    conv = service.new_conversation(service.library.get(key))
    first = await first_synopsis(service, conv.id)
    assert first.origin is SynopsisOrigin.QUOTED
    assert first.text.startswith(QUOTED_SYNOPSIS_LEAD)
    assert "not saying anything" not in first.text
    folded = service.store.chapters(conv.id, include_in_synopsis=True)
    said = [line.split(": ", 1)[1] for c in folded if c.in_synopsis for line in c.text.splitlines()]
    assert any(words.rstrip(" …") in first.text for words in said)  # the chapters' own words
