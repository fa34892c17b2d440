"""Semantic recall on the real store, the real chat engine and a real llama.cpp embedding model
(a tiny random one the suite writes: its vectors carry no meaning, but the same text always
gets the same vector and a nearly identical text a nearly equal one, which is what these tests
rely on; one test uses the shipped all-MiniLM-L6-v2, whose vectors do carry meaning).

What a user relies on: turned off (`semantic_recall = false`) nothing changes; on, the archive
is embedded in the background (backfill and each turn), edits are embedded again, a model of
another dimension keeps its own vectors, a line that shares no word with the question can
still come back, the cached prefix stays byte-stable, and a model that cannot be loaded leaves
recall by words with one clear notice."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from kotonia_tui.chat.events import MemoryNotice, NoticeLevel
from kotonia_tui.chat.semantic import SemanticRecall
from kotonia_tui.config import load_settings
from kotonia_tui.memory.recall import RECALL_HEADER, RECALL_HEADER_SEMANTIC
from kotonia_tui.store import Store

from .test_recall import QUESTIONS, REPLY, assert_prefix_kept, folded_story, settings_for

SETTLE_S = 240  # generous bound on the background work (the machine is shared)

# Archived, then asked about in other words: no word in common (recall matches a word and its
# forms: a word with the same start, terms.same_word; here each differs within its first four
# letters), nearly the same characters (so nearly the same tokens, nearly the same vector).
ARCHIVED = "Grandmother Ilsebill kept beehives beside Bergenhus."
ASKED = "Grrandmother Ilssebill keept beeehives bessside Berrgenhus?"


async def settled(service) -> None:
    await asyncio.wait_for(service.semantic.settled(), SETTLE_S)


async def embedded_story(make_service, model, embedding, db=None):
    """A service on `embedding` over the folded 300-message story, every message embedded."""
    service = await make_service(settings_for(model, embedding_model_path=embedding), db=db)
    conv_id, ids = folded_story(service.store)
    service.semantic.wake()
    await settled(service)
    return service, conv_id, ids


def vector_rows(store: Store) -> int:
    raw = sqlite3.connect(store.path)
    try:
        return int(raw.execute("SELECT count(*) FROM message_vectors").fetchone()[0])
    finally:
        raw.close()


async def test_turned_off_nothing_is_embedded_and_recall_is_by_words(make_service, scripted_model):
    service = await make_service(settings_for(scripted_model(REPLY)))
    conv_id, ids = folded_story(service.store)
    turn = await service.send(conv_id, "Do you remember my sister's name?")
    assert (await turn.wait()).error is None
    assert not service.semantic.active and service.semantic.embedder is None
    assert service.semantic.status.startswith("off (semantic_recall = false)")
    assert ids[4] in turn.prepared.recall.message_ids
    assert not turn.prepared.recall.semantic
    assert turn.prepared.request.messages[-1].content.startswith(RECALL_HEADER)
    assert all(e.similarity is None for e in turn.prepared.recall.excerpts)
    assert vector_rows(service.store) == 0


async def test_the_archive_is_embedded_in_the_background_and_each_turn_after_it(
    make_service, scripted_model, tiny_embedding_path
):
    settings = settings_for(scripted_model(REPLY), embedding_model_path=tiny_embedding_path)
    service = await make_service(settings)
    assert service.semantic.active, service.semantic.status
    conv_id, ids = folded_story(service.store)  # stored after start: another process, say
    service.semantic.wake()
    await settled(service)
    key = service.semantic.model_key
    assert service.store.vector_counts(key).stored == len(ids)
    assert service.store.vector_counts(key).pending == 0

    turn = await service.send(conv_id, "Do you remember my sister's name?")
    done = await turn.wait()
    assert done.error is None and done.reply is not None
    await settled(service)
    counts = service.store.vector_counts(key)
    assert (counts.stored, counts.pending) == (len(ids) + 2, 0)  # the question and the reply
    # Recall by words still finds the fact; the excerpts say why they came.
    assert ids[4] in turn.prepared.recall.message_ids
    assert turn.prepared.recall.semantic
    assert turn.prepared.request.messages[-1].content.startswith(RECALL_HEADER_SEMANTIC)
    fact = next(e for e in turn.prepared.recall.excerpts if ids[4] in e.hits)
    assert "'sister'" in fact.why() and fact.score is not None


async def test_a_line_sharing_no_word_with_the_question_is_recalled_by_meaning(
    make_service, scripted_model, tiny_embedding_path
):
    plain = await make_service(settings_for(scripted_model(REPLY)))
    semantic = await make_service(
        settings_for(scripted_model(REPLY), embedding_model_path=tiny_embedding_path),
        db=plain.store.path.parent / "semantic.sqlite3",
    )
    found = {}
    for name, service in (("words", plain), ("meaning", semantic)):
        conv_id, ids = folded_story(service.store)
        service.store.update_message_text(ids[40], ARCHIVED, [])
        service.semantic.wake()
        await settled(service)
        recall = await service.prompter.recaller.recall(
            conv_id, ASKED, older_than=ids[270], memory_text="", budget=600
        )
        found[name] = recall
    assert ids[40] not in found["words"].message_ids  # no word in common: words find nothing
    assert found["words"].excerpts == ()
    recall = found["meaning"]
    assert ids[40] in recall.message_ids
    excerpt = next(e for e in recall.excerpts if ids[40] in e.hits)
    assert excerpt.words == ()
    assert excerpt.similarity is not None and excerpt.similarity > 0.99
    assert excerpt.why() == f"similar meaning (1.00) · score {excerpt.score:.3f}"
    assert ARCHIVED in recall.render()


async def test_by_default_the_shipped_model_recalls_a_line_told_in_other_words(
    make_service, scripted_model
):
    """No embedding_model_path: the shipped all-MiniLM-L6-v2 is converted and used, and its
    vectors carry meaning (the tiny model's do not): a question that shares no word with an
    archived line ranks that line first, above a line on another matter."""
    service = await make_service(settings_for(scripted_model(REPLY), semantic_recall=True))
    assert service.semantic.status.startswith("on: all-MiniLM-L6-v2.f16.gguf, dimension 384")
    conv_id, ids = folded_story(service.store)
    service.store.update_message_text(
        ids[40], "My grandmother kept bees beside the harbour fortress.", []
    )
    service.store.update_message_text(ids[80], "The ferry timetable changed in spring.", [])
    service.semantic.wake()
    await settled(service)
    recall = await service.prompter.recaller.recall(
        conv_id,
        "Which insects did your nan raise near that castle by the sea?",
        older_than=ids[270],
        memory_text="",
        budget=600,
    )
    assert recall.semantic
    # Excerpts come in story order; the best ranked is the line told in other words.
    best = max(recall.excerpts, key=lambda e: e.score or 0.0)
    assert ids[40] in best.hits and best.words == ()
    assert best.similarity == max(e.similarity or 0.0 for e in recall.excerpts)
    ferry = [e for e in recall.excerpts if ids[80] in e.hits]  # may be quoted, but lower
    assert all((e.similarity or 0.0) < best.similarity for e in ferry)
    assert "My grandmother kept bees beside the harbour fortress." in recall.render()


async def test_unset_the_room_under_the_trigger_goes_to_recall_only_with_semantic_recall(
    make_service, scripted_model, tiny_embedding_path, tmp_path
):
    """`recall_free_room` unset: recall by meaning takes the room a folded story's short window
    leaves (its hits rank past what the share holds), recall by words keeps to its share; set,
    the setting decides. The prompt stays within the window either way."""
    share = int(2048 * 0.25)
    cases = [
        ("meaning, unset", tiny_embedding_path, None, True),
        ("words, unset", None, None, False),
        ("meaning, off", tiny_embedding_path, False, False),
    ]
    for number, (name, embedding, free, takes_room) in enumerate(cases):
        settings = settings_for(
            scripted_model(REPLY), embedding_model_path=embedding, recall_free_room=free
        )
        assert settings.recall_free_room is free
        service = await make_service(settings, db=tmp_path / f"{number}.sqlite3")
        conv_id, _ids = folded_story(service.store)
        service.semantic.wake()
        await settled(service)
        turn = await service.send(conv_id, "Do you remember my sister's name?")
        assert (await turn.wait()).error is None, name
        prepared = turn.prepared
        assert prepared.plan.budgets is not None
        room = prepared.plan.budgets.trigger - prepared.plan.history_tokens
        assert room > 0, name
        expected = share + min(share, room) if takes_room else share
        assert prepared.recall.budget == expected, name
        assert prepared.recall.tokens <= expected, name
        if takes_room:
            assert prepared.recall.tokens > share, name  # more lines than the share holds
        cells = service.engine.prompt_cells(prepared.request)
        assert cells + prepared.request.max_tokens <= 2048, name


async def test_an_edit_is_embedded_again_and_the_old_vector_never_used(
    make_service, scripted_model, tiny_embedding_path
):
    service, conv_id, ids = await embedded_story(
        make_service, scripted_model(REPLY), tiny_embedding_path
    )
    key = service.semantic.model_key
    embedder = service.semantic.embedder
    assert embedder is not None
    old_text = service.store.get_message(ids[40]).text
    old_vector = embedder.embed(old_text)
    assert service.store.similar(conv_id, key, old_vector, ids[-1], 1)[0].message_id == ids[40]

    service.edit_message(ids[40], ARCHIVED)
    assert service.store.similar(conv_id, key, old_vector, ids[-1], 1)[0].message_id != ids[40]
    await settled(service)
    assert service.store.vector_counts(key).pending == 0
    (best,) = service.store.similar(conv_id, key, embedder.embed(ARCHIVED), ids[-1], 1)
    assert (best.message_id, best.text) == (ids[40], ARCHIVED)
    assert best.similarity == pytest.approx(1.0, abs=1e-4)


async def test_a_model_of_another_dimension_keeps_its_own_vectors(
    make_service, scripted_model, tiny_embedding_path, tiny_embedding_32_path
):
    first, conv_id, ids = await embedded_story(
        make_service, scripted_model(REPLY), tiny_embedding_path
    )
    key_64 = first.semantic.model_key
    db = first.store.path
    await first.close()

    second = await make_service(
        settings_for(scripted_model(REPLY), embedding_model_path=tiny_embedding_32_path), db=db
    )
    assert second.semantic.embedder is not None and second.semantic.embedder.dimension == 32
    key_32 = second.semantic.model_key
    assert key_32 != key_64 and key_32.endswith(":32") and key_64.endswith(":64")
    await settled(second)  # started from nothing: every message embedded again
    assert second.store.vector_counts(key_32).stored == len(ids)
    assert second.store.vector_counts(key_64).stored == len(ids)  # kept apart, not mixed
    recall = await second.prompter.recaller.recall(
        conv_id, ASKED, older_than=ids[270], memory_text="", budget=600
    )
    assert recall.semantic  # 32-dimensional queries rank 32-dimensional vectors only


async def test_the_cached_prefix_stays_byte_stable_with_semantic_recall(
    make_service, scripted_model, tiny_embedding_path
):
    service = await make_service(
        settings_for(scripted_model(REPLY), embedding_model_path=tiny_embedding_path)
    )
    conv_id, _ids = folded_story(service.store)
    turns = []
    for text in QUESTIONS:
        turn = await service.send(conv_id, text)
        done = await turn.wait()
        assert done.error is None
        assert turn.prepared.recall.semantic and turn.prepared.recall.excerpts
        turns.append((turn, done))
        await settled(service)  # the background work between turns, as a person reads
    (second, _), (third, done3) = turns[1], turns[2]
    assert_prefix_kept(service, second, third, done3)
    assert third.prepared.request.messages[-1].content.startswith(RECALL_HEADER_SEMANTIC)


async def test_a_missing_embedding_model_leaves_recall_by_words_with_one_notice(
    make_service, scripted_model, tmp_path
):
    missing = tmp_path / "missing-embed.gguf"
    service = await make_service(settings_for(scripted_model(REPLY), embedding_model_path=missing))
    notices: list[MemoryNotice] = []
    service.subscribe(lambda e: notices.append(e) if isinstance(e, MemoryNotice) else None)
    conv_id, _ids = folded_story(service.store)
    for text in ("Do you remember my sister's name?", "And her bees?"):
        turn = await service.send(conv_id, text)
        assert (await turn.wait()).error is None
    assert not service.semantic.active
    warnings = [n.text for n in notices if n.level is NoticeLevel.WARNING]
    assert warnings == [
        "semantic recall unavailable, recall matches words only: "
        f"{missing}: embedding model file not found; set embedding_model_path in the profile "
        "or KOTONIA_EMBEDDING_MODEL_PATH (empty: the shipped all-MiniLM-L6-v2), or "
        "semantic_recall = false"
    ]
    assert vector_rows(service.store) == 0


async def test_the_worker_waits_while_a_turn_runs(tmp_path, tiny_embedding_path):
    with Store.open(tmp_path / "busy.sqlite3") as store:
        _conv_id, ids = folded_story(store)
        semantic = SemanticRecall.open(store, tiny_embedding_path)
        turn_running = True
        asked = 0

        def busy() -> bool:
            nonlocal asked
            asked += 1
            return turn_running

        semantic.start(busy=busy)
        try:
            # The worker has found the turn running again and again (not a pause of a fixed
            # length, which a loaded machine can spend before the worker even starts) ...
            async with asyncio.timeout(SETTLE_S):
                while asked < 3:
                    await asyncio.sleep(0.01)
            # ... and nothing is embedded while the turn runs, however long it takes.
            assert store.vector_counts(semantic.model_key).stored == 0
            turn_running = False
            await asyncio.wait_for(semantic.settled(), SETTLE_S)
            assert store.vector_counts(semantic.model_key).stored == len(ids)
        finally:
            await semantic.stop()


def test_the_settings_are_read_from_the_environment_and_on_is_the_default(monkeypatch, tmp_path):
    model = tmp_path / "embed.gguf"
    monkeypatch.setenv("KOTONIA_EMBEDDING_MODEL_PATH", str(model))
    assert load_settings().active_profile().embedding_model_path == model
    # Empty is unset: the shipped model (engine/default_embedding.py).
    monkeypatch.setenv("KOTONIA_EMBEDDING_MODEL_PATH", "")
    assert load_settings().active_profile().embedding_model_path is None
    monkeypatch.delenv("KOTONIA_EMBEDDING_MODEL_PATH")
    assert load_settings().active_profile().embedding_model_path is None
    # On unless turned off (tests/conftest.py turns it off for the suite).
    monkeypatch.delenv("KOTONIA_SEMANTIC_RECALL")
    assert load_settings().semantic_recall is True
    monkeypatch.setenv("KOTONIA_SEMANTIC_RECALL", "false")
    assert load_settings().semantic_recall is False
