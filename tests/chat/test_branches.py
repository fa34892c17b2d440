"""Branches, duplicates and deletions with real folds: the memory stays right in each branch.

The folding tests run on the fake engine (tests/fake_engine.py), whose every call writes a fixed
script, so chapters really land (as in test_folding.py) in milliseconds, and whose prompt cache
figures follow what each context holds as the real engine's do. The others run on a tiny GGUF.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from kotonia_tui.chat.numbering import NO_CHAPTER, cited_numbers, numbered
from kotonia_tui.cli import main
from kotonia_tui.domain import (
    Chapter,
    LedgerEnd,
    LedgerEnding,
    LedgerKind,
    NewChapter,
    Role,
    utcnow,
)
from kotonia_tui.memory.chronicler import render_source
from kotonia_tui.memory.structured import Line, Resolution, StructuredChapter, render_chapter
from kotonia_tui.tui.screens.cast_memory import speaker_block
from kotonia_tui.tui.screens.dialogs import ledger_page
from kotonia_tui.tui.widgets.inspector import chapter_line, ledger_line
from tests.cards import write_short_card
from tests.fake_engine import scripted
from tests.scripted_chapters import ledger_entry, written_by_script
from tests.settings import fake_settings

from .test_folding import CHAPTER, chat_until, fake_settings_for, settings_for
from .test_numbering import _memory_message as _memory
from .test_numbering import _second_conversation


async def _folded_story(service, key: str):
    """A conversation with a chapter landed and applied, and a few turns after it."""
    conv = service.new_conversation(service.library.get(key))
    await chat_until(service, conv.id, lambda turn: turn.prepared.queued is not None)
    await service.worker.wait_settled(conv.id)
    applying = await service.send(conv.id, "And then?")
    await applying.wait()
    assert applying.prepared.plan.apply_landed
    last = await service.send(conv.id, "Go on.")
    await last.wait()
    return conv, last


def _first_chapter(service, conv_id: int):
    """The conversation's first chapter and the messages it covers."""
    chapter = service.store.chapters(conv_id)[0]
    return chapter, service.store.messages_between(
        conv_id, chapter.first_message_id, chapter.last_message_id
    )


async def test_a_branch_shares_the_memory_and_the_prompt_cache_prefix(make_fake_service):
    """Fake engine: this test is about the memory a branch shares and the prompt it sends, which
    do not depend on the model (the engine's prefix reuse is tests/engine's)."""
    key = write_short_card()
    # Recall off: its excerpts follow the history and change every turn (the tiny GGUF's
    # tokenizer leaves them no room at this window; the fake's shorter tokens would).
    service = await make_fake_service(fake_settings_for(recall_budget_ratio=0.0), scripted(CHAPTER))
    conv, last = await _folded_story(service, key)
    state = service.store.memory_state(conv.id)
    chapter, _source = _first_chapter(service, conv.id)
    assert written_by_script(chapter, CHAPTER) and chapter.text in state.memory_text

    branched = service.manager.duplicate(conv.id)
    new = branched.conversation
    assert branched.memory_shared and branched.chapters >= 1
    # The copied block cites the branch's own messages, as its chapters' ranges do; the prompt
    # numbers messages per conversation, so both read the same bytes.
    copied = service.store.memory_state(new.id).memory_text
    assert copied != state.memory_text
    assert numbered(service.store, new.id, copied) == numbered(
        service.store, conv.id, state.memory_text
    )
    assert new.title == f"Conversation {conv.id} (copy)"

    turn = await service.send(new.id, "Meanwhile, in the other story...")
    done = await turn.wait()
    assert done.error is None
    # No chapter is applied again: the branch's prompt starts as the original's did, and the
    # engine reuses that prefix (the original's last prompt and reply) from its cache. (This
    # turn may cross the fold trigger and queue the branch's own next chapter, as any turn.)
    assert not turn.prepared.plan.apply_landed
    assert turn.prepared.state.memory_text == copied
    assert _memory(turn.prepared.request.messages) == _memory(last.prepared.request.messages)
    assert done.metrics.reused >= last.done.metrics.prompt_positions - 2
    assert done.metrics.evaluated < done.metrics.prompt_positions / 4


async def test_branches_never_mix_their_memory(make_fake_service):
    """Fake engine: this test is about which conversation's memory an edit refolds, which does
    not depend on the model."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(CHAPTER))
    conv, _last = await _folded_story(service, key)
    chapter, source = _first_chapter(service, conv.id)
    branched = service.manager.branch(conv.id, source[-1].id)
    new = branched.conversation
    number = service.store.message_numbers(conv.id, [source[-1].id])[source[-1].id]
    assert new.title == f"Conversation {conv.id} (branch at #{number})"
    before = service.store.chapters(new.id)
    # An edit inside the original's folded range refolds the original's chapter only.
    service.edit_message(source[1].id, "An edited line about the lamps.")
    await service.worker.wait_settled(conv.id)
    assert service.store.get_chapter(chapter.id).superseded_by is not None
    assert service.store.chapters(new.id) == before
    assert not service.open_folds(new.id)
    # And the branch's own story stays its own.
    await (await service.send(new.id, "Only in the branch.")).wait()
    texts = [m.text for m in service.store.recent_messages(conv.id, 500)]
    assert "Only in the branch." not in texts


async def test_deleting_inside_a_folded_range_refolds_it_and_undo_refolds_again(
    make_fake_service,
):
    """Fake engine: this test is about what a delete and its undo refold, which does not depend
    on the model."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(CHAPTER))
    conv, _last = await _folded_story(service, key)
    chapter, source = _first_chapter(service, conv.id)
    victim = source[2]
    service.delete_message(victim.id)
    assert service.can_undo_delete(conv.id)
    await service.worker.wait_settled(conv.id)
    refolded = service.store.get_chapter(service.store.get_chapter(chapter.id).superseded_by)
    assert (refolded.first_message_id, refolded.last_message_id) == (
        chapter.first_message_id,
        chapter.last_message_id,
    )
    restored = service.undo_delete_message(conv.id)
    assert restored is not None and restored.id == victim.id and restored.text == victim.text
    assert service.store.get_chapter(refolded.id).stale  # folded again, with it back
    await service.worker.wait_settled(conv.id)
    assert service.store.get_chapter(refolded.id).superseded_by is not None
    assert service.undo_delete_message(conv.id) is None
    ids = [m.id for m in service.store.messages_between(conv.id, source[0].id, source[-1].id)]
    assert ids == [m.id for m in source]


async def test_a_deleted_conversation_comes_back_with_undo_and_is_gone_after_close(
    make_service, tiny_model_path
):
    key = write_short_card()
    service = await make_service(settings_for(tiny_model_path))
    conv = service.new_conversation(service.library.get(key))
    keep = service.new_conversation(service.library.get(key))
    service.manager.delete(conv.id)
    assert [c.id for c in service.conversations()] == [keep.id]
    assert service.manager.undo_delete().id == conv.id
    service.manager.delete(conv.id)
    assert service.manager.close() == [conv.id]
    assert [c.id for c in service.store.list_conversations()] == [keep.id]


def _st_chat_with_a_note(path: Path) -> Path:
    lines = [
        {"user_name": "Ann", "character_name": "Wren", "create_date": "2026-01-01@10h00m00s"},
        {"name": "Wren", "is_user": False, "mes": "Welcome to the lighthouse."},
        {"name": "Ann", "is_user": True, "mes": "Thank you."},
        {
            "name": "SillyTavern System",
            "is_user": False,
            "is_system": True,
            "mes": "[Start a new chat]",
        },
        {"name": "Ann", "is_user": True, "mes": "I am back."},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


async def test_imported_system_notes_stay_stored_but_never_reach_the_model(
    make_service, tiny_model_path, tmp_path
):
    write_short_card()
    service = await make_service(settings_for(tiny_model_path))
    imported = service.manager.import_file(_st_chat_with_a_note(tmp_path / "chat.jsonl"))
    conv = imported.conversation
    stored = service.store.recent_messages(conv.id, 10)
    note = stored[2]
    assert (note.role, note.text) == (Role.SYSTEM, "[Start a new chat]")
    turn = await service.answer(conv.id)
    assert (await turn.wait()).error is None
    sent = turn.prepared.request.messages
    assert not any("Start a new chat" in m.content for m in sent)
    assert "Start a new chat" not in service.engine.render(turn.prepared.request).text
    assert [m.content for m in sent if m.role == "user"][-2:] == ["Thank you.", "I am back."]
    assert service.prompter.message_tokens(note) == 0  # no room is kept for it either
    # Nor is the chronicler asked to write about it.
    source = render_source(stored, char="Wren", user="Ann")
    assert "Start a new chat" not in source and "I am back." in source


# ---- the ledger a branch shares ---------------------------------------------------------------


def _structured(conv_id: int, messages, event: int, text: str, resolves: str = "") -> Chapter:
    """A structured chapter over `messages`, its event citing messages[event], as a fold stores
    it (citing store ids)."""
    structure = StructuredChapter(
        time="",
        events=(Line(text, (messages[event].id,)),),
        claims=(),
        ledger=(),
        resolved=(Resolution(resolves, "lit at dawn", (messages[-1].id,)),) if resolves else (),
    )
    return Chapter(
        conversation_id=conv_id,
        first_message_id=messages[0].id,
        last_message_id=messages[-1].id,
        text=render_chapter(structure),
        structure=structure.to_json(),
    )


def _fold_with_ledger(service, conv_id: int, messages) -> None:
    """Two chapters as a fold stores them: #1-#4 writes a fact the user stated and a thread;
    #5-#7 resolves the thread and writes a rule."""
    user = service.persona.name
    store = service.store
    store.store_chapter(
        _structured(conv_id, messages[:4], 1, f"{user} said Mia lands on the 14th."),
        [
            ledger_entry(
                conv_id,
                LedgerKind.USER_FACT,
                f"{user}'s sister Mia lands on the 14th",
                messages[1].id,
                subject=user,
            ),
            ledger_entry(
                conv_id, LedgerKind.THREAD, "Whether the east lamp is lit", messages[2].id
            ),
        ],
    )
    (thread,) = [e for e in store.ledger(conv_id) if e.kind is LedgerKind.THREAD]
    store.store_chapter(
        _structured(conv_id, messages[4:], 2, "Wren said the ferry left for Halden.", thread.label),
        [ledger_entry(conv_id, LedgerKind.CONSTRAINT, "Ask before the ferry", messages[4].id)],
        [LedgerEnding(thread.id, LedgerEnd.RESOLVED, "lit at dawn")],
    )


def _ledger_seen(view) -> list[tuple[str, str, str, str, bool, bool]]:
    """The inspector's Ledger section: each entry's label, kind, text, evidence (numbered as
    the chat numbers messages), whether it has ended and whether the prompt carries it."""
    return [
        (
            e.label,
            e.kind.label,
            e.text,
            view.evidence(e.evidence),
            e.ended_by_chapter_id is not None,
            e.id in view.ledger_in_prompt,
        )
        for e in view.ledger
    ]


def _by_speaker(service, conv_id: int) -> list[str]:
    """The memory-by-speaker page's text (Alt+W), as the chat screen builds it. (A branch's
    chapters are copies with store ids of their own; the page names them by their ranges.)"""
    memory = service.groups.memory(conv_id)
    ids = sorted({i for s in memory.speakers for it in (*s.said, *s.about) for i in it.evidence})
    numbers = cited_numbers(service.store, conv_id, ids)
    return [speaker_block(s, numbers, memory.chapter_numbers).plain for s in memory.speakers]


async def test_a_branch_carries_the_ledger_and_its_prompt_carries_the_same_lines(
    make_fake_service, capsys
):
    """Fake engine: the ledger a branch shares, the inspector and the prompt; the model does
    not matter. A second conversation in the store, so its ids are not its numbers."""
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    conv_id, messages = await _second_conversation(service, key)
    _fold_with_ledger(service, conv_id, messages)
    turn = await service.send(conv_id, "Is the lamp lit?")
    assert (await turn.wait()).error is None and turn.prepared.plan.apply_landed
    memory = _memory(turn.prepared.request.messages)
    user = service.persona.name
    fact = f"{user}'s sister Mia lands on the 14th (#2)"
    assert fact in memory and "Ask before the ferry (#5)" in memory
    assert "Whether the east lamp is lit" not in memory  # resolved

    # At the last message the branch shares the whole memory, the ledger with it.
    branched = service.manager.branch(conv_id, turn.prepared.window[-1].id)
    late = branched.conversation.id
    assert branched.memory_shared and branched.ledger_entries == 3
    original = _ledger_seen(service.memory_view(conv_id))
    assert [(label[0], in_prompt) for label, *_rest, in_prompt in original] == [
        ("F", True),
        ("T", False),
        ("C", True),
    ]
    assert _ledger_seen(service.memory_view(late)) == original
    assert _by_speaker(service, late) == _by_speaker(service, conv_id)
    again = await service.send(late, "Meanwhile, in the other story...")
    assert (await again.wait()).error is None
    assert not again.prepared.plan.apply_landed  # the copied block, with its ledger lines
    assert _memory(again.prepared.request.messages) == memory

    # At #4 the branch shares the first chapter only: the thread the second one resolved is
    # open in it, and the rule the second one wrote was never set.
    assert main(["--db", str(service.store.path), "branch", str(conv_id), "#4"]) == 0
    out, err = capsys.readouterr()
    early = int(out)
    assert "1 chapter and 2 ledger entries carried over, applied on its next turn" in err
    seen = _ledger_seen(service.memory_view(early))
    assert [row[:5] for row in seen] == [
        original[0][:5],
        (original[1][0], "thread", "Whether the east lamp is lit", "#3", False),
    ]
    turn = await service.send(early, "Is the lamp lit?")
    assert (await turn.wait()).error is None and turn.prepared.plan.apply_landed
    memory = _memory(turn.prepared.request.messages)
    assert f"- {original[0][0]} ({user}): {fact}" in memory
    assert f"- {original[1][0]}: Whether the east lamp is lit (#3)" in memory
    assert "Ask before the ferry" not in memory
    assert all(row[5] for row in _ledger_seen(service.memory_view(early)))


async def test_the_ledger_names_its_chapters_by_their_ranges_in_a_branch_too(
    make_fake_service, capsys
):
    """An entry said how long it holds by the chapters' store ids ("from chapter 1", "chapter
    1 to 2, resolved"; "chapter 3 to 4" in a branch of it), ids the user sees nowhere else,
    read as message numbers. In a second conversation (its ids are not its numbers) and a
    branch of it (its chapters are copies with new ids), the inspector's Ledger and Chapters,
    the entry's page, the memory by speaker and `kotonia memory` name a chapter by its range,
    numbered as the chat numbers messages: the same words in both. Fake engine: only the store
    and the numbering count."""
    key = write_short_card()
    service = await make_fake_service(fake_settings(), scripted("Aye."))
    conv_id, messages = await _second_conversation(service, key)
    _fold_with_ledger(service, conv_id, messages)
    branch = service.manager.branch(conv_id, messages[-1].id).conversation.id
    store = service.store
    originals = [c.id for c in store.chapters(conv_id)]
    assert originals != [c.id for c in store.chapters(branch)]  # the copies' own ids
    validity = {
        "F": "from #1-#4",
        "T": "#1-#4 to #5-#7, resolved",
        "C": "from #5-#7",
    }
    for conv in (conv_id, branch):
        view = service.memory_view(conv)
        ledger = {e.label[0]: ledger_line(e, view).plain for e in view.ledger}
        assert all(words in ledger[kind] for kind, words in validity.items()), ledger
        (thread,) = [e for e in view.ledger if e.ended_by_chapter_id is not None]
        page = ledger_page(thread, [], {}, view).blocks[0].plain
        assert "valid from #1-#4 to #5-#7 · resolved; no longer in the prompt" in page
        listed = [chapter_line(c, view, utcnow()).plain for c in view.chapters]
        assert [line.split(" ")[0] for line in listed] == ["#1-#4", "#5-#7"]
        speakers = "\n".join(_by_speaker(service, conv))
        assert "· from #1-#4" in speakers and "· from #5-#7" in speakers
        assert main(["--db", str(store.path), "memory", str(conv)]) == 0
        out = capsys.readouterr().out
        assert "from #1-#4 to #5-#7 (resolved)" in out
        assert "  chapter #1-#4 (structured)\n" in out
        shown = "\n".join([*ledger.values(), page, *listed, speakers, out])
        assert not re.search(r"chapter \d", shown) and not re.search(r"#\d+ msgs", shown)

    # A refold replaces the branch's first chapter: the replaced one leaves the list, and the
    # entries it wrote, ended by the refold, still name it by its range.
    first = store.chapters(branch)[0]
    copies = store.messages_between(branch, 0, 10**9)
    store.store_refold([first.id], [NewChapter(_structured(branch, copies[:4], 1, "Again."))])
    view = service.memory_view(branch)
    assert first.id not in [c.chapter.id for c in view.chapters]
    (fact,) = [e for e in view.ledger if e.label == "F1"]
    assert "#1-#4 to #1-#4, superseded" in ledger_line(fact, view).plain

    # An id that names no chapter of the conversation (here the original's, asked of the
    # branch) is not read as a range, nor shown as a number: it is said in words.
    assert store.chapter_ranges(branch, originals) == {}
    (thread,) = [e for e in view.ledger if e.label == "T2"]
    gone = thread.model_copy(update={"ended_by_chapter_id": originals[1]})
    assert f"#1-#4 to {NO_CHAPTER}, resolved" in ledger_line(gone, view).plain


async def test_an_edit_in_a_branch_refolds_only_its_own_ledger(make_fake_service):
    """Fake engine: which conversation's entries an edit or a deletion ends does not depend
    on the model."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(CHAPTER))
    conv_id, messages = await _second_conversation(service, key)
    _fold_with_ledger(service, conv_id, messages)
    branch = service.manager.branch(conv_id, messages[-1].id).conversation.id
    store = service.store

    def live(conv: int) -> list[str]:
        return [e.text for e in store.ledger(conv)]

    user = service.persona.name
    both = [f"{user}'s sister Mia lands on the 14th", "Ask before the ferry"]
    assert live(conv_id)[:2] == live(branch)[:2] == both
    # An edit in the branch's first chapter refolds it there: the entries it wrote end (they
    # rest on text that changed) in the branch only.
    copies = store.messages_between(branch, 0, 10**9)
    service.edit_message(copies[1].id, "My sister Mia lands on the 20th.")
    await service.worker.wait_settled(branch)
    assert both[0] not in live(branch) and "Ask before the ferry" in live(branch)
    assert live(conv_id) == both
    # A deletion in the original's second chapter ends its rule there only.
    service.delete_message(messages[4].id)
    await service.worker.wait_settled(conv_id)
    assert "Ask before the ferry" not in live(conv_id) and both[0] in live(conv_id)
    assert "Ask before the ferry" in live(branch)
