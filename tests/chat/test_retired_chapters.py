"""A chapter whose every message the user deleted leaves the memory (it is retired).

Deleting a message marks the chapters covering it stale and queues a refold of their range. When
the user had deleted every message of the range, the refold found nothing to fold, was marked
done ("nothing left to fold"), and the stale chapter stayed live for good: its text, about
messages that no longer exist, stayed in the memory block of every prompt and in the
inspector, the ledger entries it wrote stayed live, and a synopsis that had folded it kept it.
Now such a refold retires the chapter: it leaves the prompt, the inspector's chapters and
`kotonia memory`'s, the entries it wrote end (`retired`), and a synopsis that held it is
rebuilt without it; the other chapters are untouched. Real SQLite store and fold worker, fake
engine: retiring asks no model.
"""

from __future__ import annotations

import json

from kotonia_tui.chat.events import FoldProgress, FoldState, ServiceEvent
from kotonia_tui.chat.fold import chapters as chapters_module
from kotonia_tui.chat.fold.chapters import retired_words
from kotonia_tui.chat.prompting import Prompter
from kotonia_tui.cli import main
from kotonia_tui.domain import (
    Chapter,
    FoldJob,
    FoldKind,
    LedgerEnd,
    LedgerEnding,
    LedgerKind,
    Message,
    Role,
    Synopsis,
    utcnow,
)
from kotonia_tui.memory.assembly import MEMORY_TITLE
from kotonia_tui.memory.numbering import referenced_ids
from kotonia_tui.store.ledger_rows import RETIRE_NOTE
from kotonia_tui.tui.widgets.inspector import chapter_line, ledger_line
from tests.cards import write_short_card
from tests.fake_engine import scripted
from tests.scripted_chapters import ledger_entry

from .test_folding import CHAPTER, fake_settings_for

A_TEXT = "- Ann met Wren at the lighthouse. (#2)"
B_TEXT = "- Wren lit the east lamp at dawn. (#7)"
C_TEXT = "- The ferry left for Halden. (#12)"
RULE = "Ask before taking the ferry"


def _chapter(conv_id: int, first: int, last: int, text: str) -> Chapter:
    return Chapter(conversation_id=conv_id, first_message_id=first, last_message_id=last, text=text)


async def _story(service, key: str) -> int:
    """The store's first conversation: the greeting and 11 lines, ids 1-12 (its numbers too),
    folded as a fold stores them into A (ids 1-5), B (6-10) and C (11-12). A writes a fact and
    a thread, B resolves the thread and writes a rule."""
    card = service.library.get(key)
    conv = service.new_conversation(card)
    user, char = service.persona.name, service.setup_for(card).display_name
    lines = [
        Message(
            role=Role.USER if k % 2 == 0 else Role.CHARACTER,
            speaker=user if k % 2 == 0 else char,
            text=f"Line {k + 2} about the lamps.",
        )
        for k in range(11)
    ]
    store = service.store
    assert store.add_messages(conv.id, lines) == list(range(2, 13))
    fact = ledger_entry(conv.id, LedgerKind.USER_FACT, "Mia lands on the 14th", 2, subject=user)
    thread = ledger_entry(conv.id, LedgerKind.THREAD, "Whether the east lamp is lit", 3)
    store.store_chapter(_chapter(conv.id, 1, 5, A_TEXT), [fact, thread])
    (open_thread,) = store.ledger(conv.id)[1:]
    store.store_chapter(
        _chapter(conv.id, 6, 10, B_TEXT),
        [ledger_entry(conv.id, LedgerKind.CONSTRAINT, RULE, 7, 9)],
        [LedgerEnding(open_thread.id, LedgerEnd.RESOLVED, "lit at dawn")],
    )
    store.store_chapter(_chapter(conv.id, 11, 12, C_TEXT), [])
    return conv.id


def _memory_message(turn) -> str:
    """The memory block the turn's prompt carries ("" when it carries none)."""
    found = [
        m.content for m in turn.prepared.request.messages if m.content.startswith(MEMORY_TITLE)
    ]
    return found[0] if found else ""


async def _turn(service, conv_id: int, text: str):
    turn = await service.send(conv_id, text)
    assert (await turn.wait()).error is None
    return turn


def _landed(events: list[ServiceEvent], kind: FoldKind) -> list[str]:
    return [
        e.detail
        for e in events
        if isinstance(e, FoldProgress) and e.state is FoldState.LANDED and e.job.kind is kind
    ]


async def test_a_chapter_whose_messages_were_all_deleted_leaves_the_memory(
    make_fake_service, capsys
):
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(CHAPTER))
    events: list[ServiceEvent] = []
    service.subscribe(events.append)
    conv_id = await _story(service, key)
    store = service.store
    a, b, c = store.chapters(conv_id)
    before = await _turn(service, conv_id, "Tell me about the lamps.")
    memory = _memory_message(before)
    assert B_TEXT in memory and RULE in memory  # the prompt carries B and its rule

    for message_id in range(6, 11):  # every message of B, as a user deletes them
        service.delete_message(message_id)
    await service.worker.wait_settled(conv_id)

    # The refold found nothing to fold: B is retired (kept for audit, out of the memory).
    retired = store.get_chapter(b.id)
    assert (retired.retired, retired.stale, retired.superseded_by) == (True, True, None)
    assert _landed(events, FoldKind.REFOLD) == [
        "retired the chapter after #5, as its messages were deleted; it left the memory, "
        "and 1 ledger entry it wrote ended with it"
    ]
    assert [x.id for x in store.chapters(conv_id)] == [a.id, c.id]
    # The other chapters are untouched.
    assert [store.get_chapter(x.id) for x in (a, c)] == [a, c]

    # B's rule ended with it, by B, and says why; A's fact is live as it was.
    entries = {e.text: e for e in store.ledger(conv_id, include_ended=True)}
    rule = entries[RULE]
    assert (rule.end, rule.ended_by_chapter_id, rule.end_note) == (
        LedgerEnd.RETIRED,
        b.id,
        RETIRE_NOTE,
    )
    live = [e.text for e in store.ledger(conv_id)]
    assert RULE not in live and "Mia lands on the 14th" in live

    # The inspector: B is not among the chapters; its rule is shown ended, retired.
    view = service.memory_view(conv_id)
    assert [v.chapter.id for v in view.chapters] == [a.id, c.id]
    assert not any("east lamp" in v.chapter.text for v in view.chapters)
    assert view.pending_apply  # the prompt still carries B until the next turn applies it
    listed = " ".join(chapter_line(v, view, utcnow()).plain for v in view.chapters)
    assert "stale" not in listed
    (shown_rule,) = [e for e in view.ledger if e.text == RULE]
    assert f"from (no messages left), retired\n  {RULE}" in ledger_line(shown_rule, view).plain

    # `kotonia memory`: B's chapter is not listed, its rule is not live, and the memory the
    # next turn carries has neither.
    assert main(["--db", str(store.path), "memory", str(conv_id), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [ch["id"] for ch in report["chapters"]] == [a.id, c.id]
    (reported,) = [e for e in report["ledger"] if e["text"] == RULE]
    assert (reported["live"], reported["end"], reported["in_prompt"]) == (False, "retired", True)
    assert "Wren lit the east lamp" not in report["memory_text"]
    assert RULE not in report["memory_text"]
    assert main(["--db", str(store.path), "memory", str(conv_id)]) == 0
    out = capsys.readouterr().out
    (rule_line,) = [line for line in out.splitlines() if RULE in line]
    assert rule_line.endswith("  from (no messages left) (retired)")
    assert "Wren lit the east lamp" not in out.split("chapters:")[1]

    # The next turn applies the memory without B, and keeps A and C as they were.
    after = await _turn(service, conv_id, "And the ferry?")
    assert after.prepared.plan.apply_landed
    memory = _memory_message(after)
    assert "Wren lit the east lamp" not in memory and RULE not in memory
    assert "Ann met Wren at the lighthouse" in memory and "The ferry left for Halden" in memory
    assert "Mia lands on the 14th" in memory
    # ...once: the turn after it carries the same block.
    again = await _turn(service, conv_id, "Good night.")
    assert not again.prepared.plan.apply_landed
    assert _memory_message(again) == memory


async def test_a_retired_chapter_the_synopsis_held_is_rebuilt_out_of_it(make_fake_service):
    """A synopsis that folded the chapter is marked stale, as a refold of it does, and the
    next major fold rebuilds it without the chapter: here from the version before it, with no
    model call (no chapter after that version is left to fold)."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(CHAPTER))
    events: list[ServiceEvent] = []
    service.subscribe(events.append)
    conv_id = await _story(service, key)
    store = service.store
    a, b, c = store.chapters(conv_id)
    first = store.add_synopsis(
        Synopsis(conversation_id=conv_id, version=0, text="Ann met Wren.", through_message_id=5),
        [a.id],
    )
    second = store.add_synopsis(
        Synopsis(
            conversation_id=conv_id,
            version=0,
            text="Ann met Wren, who lit the east lamp at dawn.",
            through_message_id=10,
        ),
        [b.id],
    )
    before = await _turn(service, conv_id, "Tell me about the lamps.")
    assert "who lit the east lamp" in _memory_message(before)

    for message_id in range(6, 11):
        service.delete_message(message_id)
    await service.worker.wait_settled(conv_id)

    assert store.get_chapter(b.id).retired
    (refold,) = _landed(events, FoldKind.REFOLD)
    assert refold.endswith("; the synopsis will be rebuilt without it")
    versions = store.synopsis_versions(conv_id)
    rebuilt = versions[-1]
    assert _landed(events, FoldKind.MAJOR_GC) == [
        "synopsis version 3 rebuilt from version 1 alone: the rest was retired "
        f"({rebuilt.tokens} tokens, target {rebuilt.target_tokens})"
    ]
    assert [(s.version, s.stale, s.current) for s in versions] == [
        (1, False, False),
        (2, True, False),  # it folded B
        (3, False, True),
    ]
    assert rebuilt.tokens == service.engine.count_tokens(first.text)
    assert (rebuilt.text, rebuilt.through_message_id) == (first.text, second.through_message_id)
    assert [x.id for x in store.chapters(conv_id, include_in_synopsis=True)] == [a.id, c.id]

    after = await _turn(service, conv_id, "And the ferry?")
    memory = _memory_message(after)
    assert "Ann met Wren." in memory and "east lamp" not in memory and RULE not in memory
    assert "The ferry left for Halden" in memory


async def test_when_every_chapter_is_retired_the_prompt_carries_no_memory(make_fake_service):
    """With nothing left to carry, the memory block goes too (an empty block was never applied:
    the prompt kept the old one)."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(CHAPTER))
    card = service.library.get(key)
    conv = service.new_conversation(card)
    store = service.store
    user = service.persona.name
    store.add_messages(
        conv.id, [Message(role=Role.USER, speaker=user, text=f"Line {k}.") for k in range(2, 6)]
    )
    fact = ledger_entry(conv.id, LedgerKind.USER_FACT, "Mia lands on the 14th", 2, subject=user)
    (only,) = [store.store_chapter(_chapter(conv.id, 1, 5, A_TEXT), [fact])]
    assert "Ann met Wren" in _memory_message(await _turn(service, conv.id, "Hello."))

    for message_id in range(1, 6):
        service.delete_message(message_id)
    await service.worker.wait_settled(conv.id)

    assert store.get_chapter(only.id).retired and store.ledger(conv.id) == []
    after = await _turn(service, conv.id, "Where were we?")
    assert after.prepared.plan.apply_landed
    assert _memory_message(after) == ""
    assert store.memory_state(conv.id).memory_text == ""


async def test_undoing_a_deletion_folds_a_retired_chapters_range_again(make_fake_service):
    """A message put back inside a retired chapter's range is folded again: the refold
    supersedes the retired chapter, and the range is in the memory once more."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(CHAPTER))
    conv_id = await _story(service, key)
    store = service.store
    b = store.chapters(conv_id)[1]
    for message_id in range(6, 11):
        service.delete_message(message_id)
    await service.worker.wait_settled(conv_id)
    assert store.get_chapter(b.id).retired

    restored = service.undo_delete_message(conv_id)
    assert restored is not None and restored.id == 10
    await service.worker.wait_settled(conv_id)
    old = store.get_chapter(b.id)
    assert old.superseded_by is not None
    refold = store.get_chapter(old.superseded_by)
    # Written from the one message the range holds again, as any refold is.
    assert (refold.first_message_id, refold.last_message_id, refold.retired) == (10, 10, False)
    assert refold.id in [x.id for x in store.chapters(conv_id)]


def test_the_retirement_is_said_in_the_chats_numbers_and_never_renumbered():
    """Named as the chat numbers messages (already numbers, so nothing in it reads as a store
    id for `told` to number again): by the message before it when none is left, by its range
    when only notes are."""

    def chapter(first: int, last: int, *, in_synopsis: bool = False):
        return _chapter(1, first, last, "x").model_copy(
            update={"id": first, "in_synopsis": in_synopsis}
        )

    gone = chapter(40, 44)
    said = retired_words([gone], {39: 4, 44: 4}, ended=2, notes_left=False)
    assert said == (
        "retired the chapter after #4, as its messages were deleted; it left the memory, and 2 "
        "ledger entries it wrote ended with it"
    )
    notes = retired_words(
        [chapter(1, 3), chapter(45, 47, in_synopsis=True)],
        {0: 0, 3: 0, 44: 4, 47: 5},
        ended=0,
        notes_left=True,
    )
    assert notes == (
        "retired the chapter at the start of the story and chapter #5-#5, as only notes that are "
        "not part of the story are left in them; they left the memory; the synopsis will be "
        "rebuilt without them"
    )
    assert referenced_ids(said) == referenced_ids(notes) == frozenset()


async def test_a_rebuild_left_empty_after_a_turn_took_the_retirement_still_clears_the_block(
    make_fake_service, monkeypatch
):
    """A turn between the retirement and the synopsis rebuild applies the memory again (the
    retired count changed) but still carries the stale synopsis; the rebuild then leaves an
    empty synopsis. The counts are equal by then, yet the landed memory is empty beside a
    stored block: that block is out of date and goes, once."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(CHAPTER))
    card = service.library.get(key)
    conv = service.new_conversation(card)
    store = service.store
    user = service.persona.name
    store.add_messages(
        conv.id, [Message(role=Role.USER, speaker=user, text=f"Line {k}.") for k in range(2, 6)]
    )
    a = store.store_chapter(_chapter(conv.id, 1, 5, A_TEXT), [])
    secret = "Ann met Wren in secret."
    store.add_synopsis(
        Synopsis(conversation_id=conv.id, version=0, text=secret, through_message_id=5), [a.id]
    )
    assert secret in _memory_message(await _turn(service, conv.id, "Hello."))

    async def not_yet(ctx, conv_id):  # the rebuild waits behind other work
        return None

    monkeypatch.setattr(chapters_module, "queue_major_fold", not_yet)
    for message_id in range(1, 6):
        service.delete_message(message_id)
    await service.worker.wait_settled(conv.id)
    assert store.get_chapter(a.id).retired and store.current_synopsis(conv.id).stale
    between = await _turn(service, conv.id, "Where were we?")
    assert between.prepared.plan.apply_landed and secret in _memory_message(between)
    assert store.memory_state(conv.id).applied_retired == 1

    store.enqueue_fold(FoldJob(conversation_id=conv.id, kind=FoldKind.MAJOR_GC))
    service.worker.wake()
    await service.worker.wait_settled(conv.id)
    assert store.current_synopsis(conv.id).text == ""
    after = await _turn(service, conv.id, "Anyone?")
    assert after.prepared.plan.apply_landed
    assert _memory_message(after) == "" and store.memory_state(conv.id).memory_text == ""
    # ...once: an empty block stored, nothing is pending.
    again = await _turn(service, conv.id, "Still there?")
    assert not again.prepared.plan.apply_landed and _memory_message(again) == ""


async def test_a_chapter_retired_while_a_turn_reads_its_memory_leaves_the_next_block(
    make_fake_service, monkeypatch
):
    """The turn reads its memory's rows, then fits the ledger off the loop: a retirement
    landing during the fit must not leave the retired chapter's ended rule in a block applied
    as if without it (its count taken), where no later turn would take it out. The turn
    carries the rows it read (B and its rule, no retirement counted); the next applies the
    memory again without B."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(CHAPTER))
    conv_id = await _story(service, key)
    store = service.store
    b = store.chapters(conv_id)[1]
    fit = Prompter.fitted_ledger
    retired: list[object] = []

    async def fit_then_retire(self, live):
        fitted = await fit(self, live)
        if not retired:  # the worker's refold with nothing to fold lands during the await
            retired.append(store.retire_chapters(conv_id, [b.id]))
        return fitted

    monkeypatch.setattr(Prompter, "fitted_ledger", fit_then_retire)
    first = await _turn(service, conv_id, "Tell me about the lamps.")
    assert retired and store.get_chapter(b.id).retired
    memory = _memory_message(first)
    assert RULE in memory and "Mia lands on the 14th" in memory
    assert store.memory_state(conv_id).applied_retired == 0
    later = await _turn(service, conv_id, "And?")
    assert later.prepared.plan.apply_landed
    memory = _memory_message(later)
    assert RULE not in memory and "Mia lands on the 14th" in memory
    assert store.memory_state(conv_id).applied_retired == 1
    again = await _turn(service, conv_id, "Still?")
    assert not again.prepared.plan.apply_landed and RULE not in _memory_message(again)


async def test_a_branch_made_before_an_undone_deletions_refold_runs_refolds_it_too(
    make_fake_service,
):
    """The deletion undone, the original's refold of the retired chapter's range still
    waiting: a branch made then holds the restored message, so it queues the refold of the
    retired copy too (otherwise the message is in neither its prompt nor its memory)."""
    key = write_short_card()
    service = await make_fake_service(fake_settings_for(), scripted(CHAPTER))
    conv_id = await _story(service, key)
    store = service.store
    b = store.chapters(conv_id)[1]
    await _turn(service, conv_id, "Tell me about the lamps.")
    for message_id in range(6, 11):
        service.delete_message(message_id)
    await service.worker.wait_settled(conv_id)
    assert store.get_chapter(b.id).retired
    await _turn(service, conv_id, "And?")

    service.worker.pause()  # the refold the undo queues has not run yet
    assert service.undo_delete_message(conv_id) is not None
    branched = service.manager.duplicate(conv_id)
    new_id = branched.conversation.id
    assert branched.refolds == 1
    service.worker.resume()
    await service.worker.wait_settled(conv_id)
    await service.worker.wait_settled(new_id)

    original = [(x.first_message_id, x.last_message_id) for x in store.chapters(conv_id)]
    assert original == [(1, 5), (10, 10), (11, 12)]
    restored = store.get_message(10).text
    (copy,) = [m for m in store.messages_between(new_id, 0, 10**9) if m.text == restored]
    copies = [(x.first_message_id, x.last_message_id) for x in store.chapters(new_id)]
    assert len(copies) == 3 and copies[1] == (copy.id, copy.id)
