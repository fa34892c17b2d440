"""Recall at turn time on the real store and engine: a fact said once, long folded away, comes
back into the turn that asks about it, after the history, without changing the cached prefix."""

from __future__ import annotations

import itertools
import os
from typing import cast

from kotonia_tui.chat.recall import RECALL_CANDIDATES, Recaller
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import Chapter, Conversation, Message, Role
from kotonia_tui.engine import Engine, GenerationRequest
from kotonia_tui.memory.recall import RECALL_HEADER
from kotonia_tui.memory.recall_forms import GAP
from kotonia_tui.store import Store
from tests.cards import SHORT_CARD_KEY, write_short_card
from tests.chat_cli import chat_with_stats

from .conftest import tiny_settings

FACT = "My sister's name is Ilse, and she keeps bees in Bergen."
FACT_REPLY = "Ilse and her bees. I will remember that."
CHAPTER = "Ann came to the lighthouse and talked with Wren about the tides and the lamp oil."
TIDES = ("grey", "high", "low", "slack", "rough", "calm")
REPLY = "The lamp burns."
QUESTIONS = (
    "Do you remember my sister's name?",  # applies the chapter: the prefix changes here
    "Does Ilse still keep bees in Bergen?",
    "Tell me about my sister again.",
)


def story(count: int = 300, fact_at: int = 5, *, asking: bool = False) -> list[Message]:
    """`count` messages, Ann's at odd numbers (each a question if `asking`); the fact at
    message `fact_at`, its reply next, and nothing else about a sister or a name."""
    out = []
    for number in range(1, count + 1):
        tide = TIDES[number % len(TIDES)]
        if number == fact_at:
            out.append(Message(role=Role.USER, speaker="Ann", text=FACT))
        elif number == fact_at + 1:
            out.append(Message(role=Role.CHARACTER, speaker="Wren", text=FACT_REPLY))
        elif number % 2:
            text = f"Line {number}: a {tide} tide{'?' if asking else '.'}"
            out.append(Message(role=Role.USER, speaker="Ann", text=text))
        else:
            text = f"Aye, {tide} again."
            out.append(Message(role=Role.CHARACTER, speaker="Wren", text=text))
    return out


def folded_story(
    store: Store, *, verbatim_from: int = 271, asking: bool = False
) -> tuple[int, list[int]]:
    """A 300-message conversation with Wren (the short card) whose first `verbatim_from - 1`
    messages are folded into a chapter that does not keep the fact (as a weak chronicler
    leaves it)."""
    write_short_card()
    store.upsert_character(SHORT_CARD_KEY, "Wren", "test", "")
    conv = store.create_conversation(
        Conversation(character_key=SHORT_CARD_KEY, character_name="Wren", persona_name="Ann")
    )
    ids = store.add_messages(conv.id, story(asking=asking))
    store.add_chapter(
        Chapter(
            conversation_id=conv.id,
            first_message_id=ids[0],
            last_message_id=ids[verbatim_from - 2],
            text=CHAPTER,
            story_time="the first week",
        )
    )
    state = store.memory_state(conv.id)
    store.set_memory_state(state.model_copy(update={"verbatim_start_id": ids[verbatim_from - 1]}))
    return conv.id, ids


def settings_for(model, **values):
    write_short_card()  # before the service opens its library
    values.setdefault("n_ctx", 2048)
    values.setdefault("reply_max_tokens", 32)
    values.setdefault("prewarm_after_fold", False)
    values.setdefault("fold_delay_s", 3600.0)  # no fold lands during the test
    values.setdefault("persona", {"name": "Ann"})
    # The tiny model's tokenizer spends a token per byte: the recall header alone is ~230.
    values.setdefault("recall_budget_ratio", 0.25)
    # What recall chooses within its share (the room under the trigger is tested apart).
    values.setdefault("recall_free_room", False)
    return tiny_settings(model, **values)


async def test_a_fact_at_message_5_of_300_folded_away_is_recalled_when_asked(
    make_service, scripted_model
):
    service = await make_service(settings_for(scripted_model(REPLY)))
    conv_id, ids = folded_story(service.store)

    turn = await service.send(conv_id, "Do you remember my sister's name?")
    done = await turn.wait()
    assert done.error is None
    prepared = turn.prepared
    assert prepared.window[0].id == ids[270]  # message 5 is far outside the prompt's history
    assert ids[4] in prepared.recall.message_ids
    assert prepared.recall.message_ids[:2] == [ids[4], ids[5]]  # the fact brings its reply
    notes = prepared.request.messages[-1]
    assert notes.role == "system"
    assert notes.content.startswith(RECALL_HEADER)
    assert (
        f"In-story time: the first week\nMessages #5-#6:\nAnn: {FACT}\nWren: {FACT_REPLY}"
        in notes.content
    )
    # The history (memory, then the window ending with the question) comes before it, whole.
    assert prepared.request.messages[-2].content == "Do you remember my sister's name?"
    assert CHAPTER in prepared.request.messages[1].content
    # Within the budget.
    assert service.engine.count_tokens(prepared.recall.render()) <= int(2048 * 0.25)


async def test_a_reply_that_starts_writing_a_recall_block_stops_before_it(
    make_service, scripted_model
):
    # The embedded 270M, having read the excerpts, went on after its answer with the block's
    # framing (a tmux chat, issue 28): the framing is the prompt's, never the character's.
    answer = "Planet Fitness, I think."
    for framing in (
        "\n\nIn-story time: Tuesday, 20 October 2018\nMessages #47-#49:",
        "\nMessages #47-#49:\nAnn: hello",
        "\n[Recalled from the archive: earlier lines",
    ):
        service = await make_service(
            settings_for(scripted_model(answer + framing), reply_max_tokens=96)
        )
        conv_id, _ids = folded_story(service.store)
        turn = await service.send(conv_id, "Do you remember my sister's name?")
        done = await turn.wait()
        assert done.error is None and turn.prepared.recall.excerpts
        assert done.reply.text == answer
        assert service.store.get_message(done.reply.id).text == answer
        await service.close()


async def test_the_sentence_that_answers_is_recalled_from_a_message_too_long_to_quote_whole(
    make_service, scripted_model
):
    """On the tiny GGUF: message 5 is a long letter with the fact in its
    middle; the budget cannot hold it whole, so the turn quotes the sentence that holds the
    question's words with the sentences beside it (a strong hit is quoted wide), with the
    speaker and marks where the letter goes on, and the reply."""
    service = await make_service(settings_for(scripted_model(REPLY)))
    before = " ".join(f"The {tide} tide came in at dusk and the lamp burned." for tide in TIDES * 2)
    after = " ".join(f"On {tide} days the boats stayed in the harbour." for tide in TIDES * 2)
    letter = f"{before} {FACT} {after}"
    conv_id, ids = folded_story(service.store)
    service.store.update_message_text(ids[4], letter, [])

    turn = await service.send(conv_id, "Do you remember my sister's name?")
    assert (await turn.wait()).error is None
    recall = turn.prepared.recall
    assert recall.budget == int(2048 * 0.25)
    assert service.engine.count_tokens(letter) > recall.budget  # it cannot come whole
    notes = turn.prepared.request.messages[-1].content
    (quoted,) = [line for line in notes.splitlines() if FACT in line]
    assert quoted.startswith(f"Ann: {GAP} ") and quoted.endswith(f" {GAP}")
    # The fact with the sentences beside it (16 words a side at least), not the letter.
    assert f"{FACT} On grey days the boats stayed in the harbour." in quoted
    assert len(quoted) < len(letter) / 2
    assert letter not in notes
    assert f"Wren: {FACT_REPLY}" in notes  # the reply after it
    assert recall.message_ids[:2] == [ids[4], ids[5]]
    assert recall.tokens <= recall.budget


async def test_a_name_the_question_asks_about_ranks_before_a_rarer_plain_word(
    make_service, scripted_model
):
    """On the tiny GGUF: the store ranks by how rare the words held are ("lantern", in one
    message, before "Piet", in six); recall weighs the question's names double (what it is
    about), so the messages about Piet come first."""
    service = await make_service(settings_for(scripted_model(REPLY)))
    conv_id, ids = folded_story(service.store)
    for k in range(6):
        service.store.update_message_text(ids[20 + 2 * k], f"Piet mended net {k} by the slip.", [])
    service.store.update_message_text(ids[60], "The lantern is cracked along its seam.", [])
    question = "Did Piet take the lantern?"
    by_store = service.store.recall(conv_id, question, ids[270], RECALL_CANDIDATES, ignore=())
    assert by_store[0].message_id == ids[60]  # the rarer word first, by the store alone

    turn = await service.send(conv_id, question)
    assert (await turn.wait()).error is None
    ranked = turn.prepared.recall.ranked
    assert set(ranked[:6]) == {ids[20 + 2 * k] for k in range(6)}
    assert ranked[6] == ids[60]


async def test_the_cached_prefix_is_byte_stable_across_turns_with_recall(
    make_service, scripted_model
):
    service = await make_service(settings_for(scripted_model(REPLY)))
    conv_id, ids = folded_story(service.store)
    turns = []
    for text in QUESTIONS:
        turn = await service.send(conv_id, text)
        done = await turn.wait()
        assert done.error is None
        assert ids[4] in turn.prepared.recall.message_ids
        turns.append((turn, done))
    (second, _), (third, done3) = turns[1], turns[2]
    assert_prefix_kept(service, second, third, done3)


def assert_prefix_kept(service, second, third, done3) -> None:
    """The third turn's prompt starts with all the second sent but its notes, then the second
    reply, and the engine reused that prefix."""
    before = second.prepared.request.messages
    after = third.prepared.request.messages
    # Everything the second turn sent but its notes is the start of the third turn's prompt.
    assert after[: len(before) - 1] == before[:-1]
    assert (after[len(before) - 1].role, after[len(before) - 1].content) == ("assistant", REPLY)
    # The cache holds: the third turn evaluates only what follows that prefix (the second
    # reply, the new message and this turn's notes), not the history again.
    prefix = GenerationRequest(
        messages=before[:-1], max_tokens=1, reply_name="Wren", user_name="Ann"
    )
    prefix_cells = service.engine.prompt_cells(prefix)
    assert done3.metrics is not None
    assert done3.metrics.reused >= prefix_cells - 8
    assert done3.metrics.evaluated < done3.metrics.prompt_positions - prefix_cells + 8


async def test_after_a_fold_recall_takes_the_room_the_short_window_leaves(
    make_service, scripted_model
):
    """Right after a fold the window is short and the prompt has room nothing uses until it
    grows back: the turn recalls into it (up to its share again), and the prompt is still no
    larger than at the trigger, so the reply always fits. With `recall_free_room` off, the
    share alone."""
    share = int(2048 * 0.25)
    for free in (True, False):
        service = await make_service(settings_for(scripted_model(REPLY), recall_free_room=free))
        conv_id, _ids = folded_story(service.store)
        turn = await service.send(conv_id, "Do you remember my sister's name?")
        assert (await turn.wait()).error is None
        prepared = turn.prepared
        budgets = prepared.plan.budgets
        assert budgets is not None
        room = budgets.trigger - prepared.plan.history_tokens
        assert room > 0  # the folded story's window is well under the trigger
        recall = prepared.recall
        if free:
            assert recall.budget == share + min(share, room)
            assert share < recall.tokens <= recall.budget  # more lines than the share holds
        else:
            assert recall.budget == share
            assert recall.tokens <= share
        cells = service.engine.prompt_cells(prepared.request)
        assert cells + prepared.request.max_tokens <= 2048


async def test_recall_off_at_budget_zero(make_service, scripted_model):
    service = await make_service(settings_for(scripted_model(REPLY), recall_budget_ratio=0.0))
    conv_id, _ids = folded_story(service.store)
    turn = await service.send(conv_id, "Do you remember my sister's name?")
    assert (await turn.wait()).error is None
    assert turn.prepared.recall.message_ids == []
    assert all(RECALL_HEADER not in m.content for m in turn.prepared.request.messages)


async def test_recall_reads_are_bounded_by_its_candidates_not_the_conversation(
    make_service, scripted_model
):
    service = await make_service(settings_for(scripted_model(REPLY)))
    card = service.library.get(write_short_card())
    setup = service.setup_for(card)
    rows: dict[tuple[int, bool], int] = {}
    # `asking`: every line after a hit asks, so recall reads the reply each question got too.
    for size, asking in itertools.product((300, 20_000), (False, True)):
        if size == 300:
            conv_id, ids = folded_story(service.store, asking=asking)
        else:
            conv_id, ids = _big(service.store, size, asking=asking)
        await service.send(conv_id, "Do you remember my sister's name?")
        prepared = await service.prompter.prepare(conv_id, card, setup, service.persona)
        read = await service.prompter.read(conv_id, card, setup, service.persona)
        decision = service.prompter.plan(read, queue_by_trigger=False)
        before = service.store.rows_read
        names = (setup.display_name, service.persona.name)
        recall = await service.prompter.recall(read, decision, names=names)
        rows[size, asking] = service.store.rows_read - before
        assert ids[4] in recall.message_ids
        assert prepared.recall.message_ids == recall.message_ids
    print(f"\nrows read by recall (300 and 20,000 messages, without and with questions): {rows}")
    # Per candidate: the hit, its two neighbours, their message numbers, its story time, and
    # where the line after it asks, the reply it got (its number is the question's next); and
    # the vocabulary rows of the query's words. None of it grows with the conversation.
    assert rows[300, True] > rows[300, False]  # the replies were read
    bound = 9 * RECALL_CANDIDATES
    assert all(count <= bound for count in rows.values())


def _big(store: Store, size: int, *, asking: bool = False) -> tuple[int, list[int]]:
    write_short_card()
    store.upsert_character(SHORT_CARD_KEY, "Wren", "test", "")
    conv = store.create_conversation(
        Conversation(character_key=SHORT_CARD_KEY, character_name="Wren", persona_name="Ann")
    )
    ids = store.add_messages(conv.id, story(size, asking=asking))
    state = store.memory_state(conv.id)
    store.set_memory_state(state.model_copy(update={"verbatim_start_id": ids[-30]}))
    return conv.id, ids


def test_chat_stats_list_the_recalled_message_ids(scripted_model, kotonia_home):
    with Store.open(app_dirs().default_db) as store:
        conv_id, ids = folded_story(store)
    env = {
        **os.environ,
        "KOTONIA_HOME": str(kotonia_home),
        "KOTONIA_MODEL_PATH": str(scripted_model(REPLY)),
        "KOTONIA_N_CTX": "2048",
        "KOTONIA_FOLD_DELAY_S": "0",
        "KOTONIA_PERSONA__NAME": "Ann",
        "KOTONIA_RECALL_BUDGET_RATIO": "0.25",
    }
    proc, stats = chat_with_stats(
        env,
        SHORT_CARD_KEY,
        "--conversation",
        str(conv_id),
        "--say",
        "What was my sister's name again?",
        "--say",
        "Nice weather.",
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(stats) == 2
    assert ids[4] in stats[0]["recalled"]
    assert all(isinstance(i, int) for i in stats[0]["recalled"])
    assert stats[1]["recalled"] == []  # "Nice weather." shares no word with the archive
    assert proc.stdout == f"{REPLY}\n{REPLY}\n"


class _JoinedCostsMore:
    """Counts a text's tokens as its words, except that the recall as rendered (header and
    excerpts joined) costs `extra` more than its lines counted apart. A fake for what a real
    tokenizer does only now and then (a word joined across a line break tokenizes differently:
    seen on the embedded model, a 410-token recall for a 409-token budget, and then the turn
    recalled nothing) and cannot be made to do on demand; words make every count exact."""

    def __init__(self, extra: int) -> None:
        self.extra = extra

    async def count_tokens_many(self, texts):
        return [len(t.split()) + (self.extra if _joined(t) else 0) for t in texts]


def _joined(text: str) -> bool:
    return text.startswith(RECALL_HEADER) and text != RECALL_HEADER


async def test_a_recall_whose_joined_text_costs_more_than_its_lines_still_fits_and_quotes(
    make_service, scripted_model
):
    """Whatever the joined text costs over the lines' own counts, the turn still quotes what
    fits within the budget: never nothing because the count came out over by a few tokens."""
    service = await make_service(settings_for(scripted_model(REPLY)))
    conv_id, ids = folded_story(service.store)
    # The fact alone (header, time line, label, line) is 46 words, with its reply 56: each
    # budget leaves room for the fact however much more the joined text costs.
    for budget in range(60, 72):
        for extra in range(1, budget - 46):
            engine = _JoinedCostsMore(extra)
            # Recall asks its engine for token counts only.
            recall = await Recaller(service.store, cast(Engine, engine)).recall(
                conv_id,
                "Do you remember my sister's name?",
                older_than=ids[270],
                memory_text="",
                budget=budget,
                names=("Wren", "Ann"),
            )
            assert recall.excerpts, f"nothing recalled in {budget} when joined costs {extra} more"
            assert ids[4] in recall.message_ids
            assert (await engine.count_tokens_many([recall.render()]))[0] <= budget


RESCUE = "Got him. A young fisherman, his boat gone to pieces on the sandbar."
ASKED = "Bring him in by the stove. Who is he?"
ANSWER = "Says he's Piet Vos, from Dunmore."
RESCUE_QUESTION = "What is the name of the fisherman rescued from the sandbar?"


def rescue_story(store: Store, asked: str = ASKED) -> tuple[int, list[int]]:
    """The folded story with, at messages #100-#102, Wren telling of a rescue, Ann's line
    after it (by default a question that holds none of the query's words) and Wren's reply."""
    conv_id, ids = folded_story(store)
    for index, text in ((99, RESCUE), (100, asked), (101, ANSWER)):
        store.update_message_text(ids[index], text, [])
    return conv_id, ids


async def recall_rescue(store: Store, conv_id: int, older_than: int):
    # Token counts are words (no model is loaded): the store and the choice are real.
    return await Recaller(store, cast(Engine, _JoinedCostsMore(0))).recall(
        conv_id,
        RESCUE_QUESTION,
        older_than=older_than,
        memory_text="",
        budget=200,
        names=("Wren", "Ann"),
    )


async def test_the_reply_to_the_question_after_a_hit_is_recalled_with_it():
    """Lighthouse #201-#203 on the real store: the hit tells of the rescue, the line after it
    asks who he is, and the reply names him: the excerpt goes on to the reply, not ending on
    the question."""
    with Store.open(app_dirs().default_db) as store:
        conv_id, ids = rescue_story(store)
        recall = await recall_rescue(store, conv_id, ids[270])
    assert ids[99] == recall.ranked[0]
    assert [ids[99], ids[100], ids[101]] == recall.message_ids[-3:]
    assert f"Ann: {ASKED}\nWren: {ANSWER}" in recall.render()
    assert "Messages #99-#102:" in recall.render()  # the reply numbered next to the question


async def test_a_line_after_a_hit_that_asks_nothing_brings_no_further_line():
    with Store.open(app_dirs().default_db) as store:
        conv_id, ids = rescue_story(store, asked="Bring him in by the stove.")
        recall = await recall_rescue(store, conv_id, ids[270])
    assert ids[100] in recall.message_ids  # the line after the hit, as ever
    assert ids[101] not in recall.message_ids
    assert "Piet Vos" not in recall.render()


async def test_a_reply_in_the_verbatim_window_is_never_recalled():
    """The reply to the question is the window's first message: the prompt carries it already,
    and recall quotes only what is older."""
    with Store.open(app_dirs().default_db) as store:
        conv_id, ids = rescue_story(store)
        recall = await recall_rescue(store, conv_id, ids[101])
    assert ids[99] in recall.message_ids and ids[100] in recall.message_ids
    assert ids[101] not in recall.message_ids
    assert "Piet Vos" not in recall.render()


async def test_a_line_by_the_same_speaker_after_the_question_is_not_its_answer():
    """Ann asks, and the next message is Ann's again (Wren's reply deleted): she went on, she
    was not answered, and her next line is not quoted as the answer."""
    with Store.open(app_dirs().default_db) as store:
        conv_id, ids = rescue_story(store)
        store.delete_message(ids[101])
        store.update_message_text(ids[102], ANSWER, [])  # Ann's, though it reads as a reply
        recall = await recall_rescue(store, conv_id, ids[270])
    assert ids[99] in recall.message_ids and ids[100] in recall.message_ids
    assert ids[102] not in recall.message_ids
    assert "Piet Vos" not in recall.render()
