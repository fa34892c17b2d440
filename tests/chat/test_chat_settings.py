"""Generation settings per profile, character and conversation; the Author's Note and its cost."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kotonia_tui.chat.chat_settings import ChatSettingsError, Layer, resolve
from kotonia_tui.config import ModelProfile, app_dirs
from kotonia_tui.domain import ChatSettings, GenerationSettings, MessageStatus
from kotonia_tui.engine import GenerationRequest, Slot
from kotonia_tui.engine.sampling import Sampling
from kotonia_tui.store import StoreError
from tests.cards import write_short_card
from tests.fake_engine import scripted
from tests.settings import fake_settings

from .conftest import tiny_settings

# What the fake engine's turns answer (a reply of a few words, as the tiny GGUF's often are).
REPLY = "The lamp is lit and the sea is calm tonight."


async def _service(make_service, model, **values: Any):
    """A service on `model` with the short card (written first: the library reads it once)."""
    write_short_card()
    return await make_service(tiny_settings(model, **values))


def _gen(**values: object) -> ChatSettings:
    return ChatSettings(generation=GenerationSettings.model_validate(values))


def test_a_narrower_layer_wins_and_says_which_layer_set_each_value() -> None:
    profile = ModelProfile(temperature=0.8, top_k=40, reply_max_tokens=256)
    character = ChatSettings(
        generation=GenerationSettings(temperature=0.5, top_k=10),
        author_note="Keep it short.",
        author_note_depth=3,
        world_info=("town.json", "shared.json"),
    )
    conversation = ChatSettings(
        generation=GenerationSettings(temperature=1.2),
        author_note_depth=0,
        world_info=("shared.json", "quest.json"),
    )
    turn = resolve(profile, character, conversation, lore_budget=100)
    assert turn.generation["temperature"].value == 1.2
    assert turn.generation["temperature"].layer is Layer.CONVERSATION
    assert (turn.generation["top_k"].value, turn.generation["top_k"].layer) == (10, Layer.CHARACTER)
    assert turn.generation["top_p"].layer is Layer.PROFILE
    assert turn.reply_max_tokens == 256
    assert (turn.author_note, turn.author_note_layer) == ("Keep it short.", Layer.CHARACTER)
    assert turn.author_note_depth == 0  # the conversation set it
    assert [name for name, _ in turn.world_info] == ["town.json", "shared.json", "quest.json"]
    assert (turn.lore_budget.value, turn.lore_budget.layer) == (100, Layer.CONFIG)
    narrower = resolve(
        profile, ChatSettings(lore_budget=40), ChatSettings(lore_budget=0), lore_budget=100
    )
    assert (narrower.lore_budget.value, narrower.lore_budget.layer) == (0, Layer.CONVERSATION)


def test_the_engine_samples_with_the_request_layer_over_the_profile() -> None:
    profile = ModelProfile(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1)
    layered = GenerationRequest(
        messages=(), max_tokens=8, sampling=GenerationSettings(top_k=1, min_p=0.2)
    )
    sampling = Sampling.of(profile, layered)
    assert (sampling.temperature, sampling.top_k, sampling.min_p) == (0.8, 1, 0.2)
    assert (sampling.top_p, sampling.repeat_penalty) == (0.95, 1.1)
    greedy = GenerationRequest(
        messages=(), max_tokens=8, temperature=0.0, sampling=GenerationSettings(temperature=1.5)
    )
    assert Sampling.of(profile, greedy).temperature == 0.0  # an explicit call's own wins


def test_bounds_are_the_profiles() -> None:
    with pytest.raises(ValueError, match="top_p"):
        GenerationSettings(top_p=1.5)
    with pytest.raises(ValueError, match="reply_max_tokens"):
        GenerationSettings(reply_max_tokens=8)
    with pytest.raises(ValueError, match="author_note_depth"):
        ChatSettings(author_note_depth=-1)
    with pytest.raises(ValueError, match="lore_budget"):
        ChatSettings(lore_budget=-1)


async def test_settings_are_stored_per_character_and_conversation(make_service, tiny_model_path):
    service = await _service(make_service, tiny_model_path)
    card = service.library.get("wren")
    one, two = service.new_conversation(card), service.new_conversation(card)
    service.save_settings(one.id, _gen(top_k=5), _gen(temperature=0.3))
    assert service.settings_view(two.id).effective.generation["top_k"].value == 5
    assert service.settings_view(two.id).effective.generation["temperature"].layer is Layer.PROFILE
    assert service.settings_view(one.id).effective.generation["temperature"].value == 0.3
    service.store.delete_conversation(one.id)
    assert service.store.conversation_settings(one.id) == ChatSettings()
    service.store._db.execute(
        "UPDATE character_settings SET settings = ? WHERE character_key = ?",
        (json.dumps({"generation": {"top_p": 7}}), card.key),
    )
    with pytest.raises(StoreError, match=r"settings of character wren .*top_p"):
        service.store.character_settings(card.key)


async def test_a_reply_length_the_window_cannot_hold_is_refused_naming_it(
    make_service, tiny_model_path
):
    service = await _service(make_service, tiny_model_path, n_ctx=2048)
    conv = service.new_conversation(service.library.get("wren"))
    with pytest.raises(ChatSettingsError, match=r"reply length 1500 \(the conversation's\).*1024"):
        service.save_settings(conv.id, ChatSettings(), _gen(reply_max_tokens=1500))
    assert service.store.conversation_settings(conv.id) == ChatSettings()  # nothing stored
    with pytest.raises(ChatSettingsError, match=r"lore budget 600 \(the character's\).*512"):
        service.save_settings(conv.id, ChatSettings(lore_budget=600), ChatSettings())
    with pytest.raises(ChatSettingsError, match=r"'missing\.json'.*not in the folder"):
        service.save_settings(conv.id, ChatSettings(world_info=("missing.json",)), ChatSettings())


async def test_reply_length_is_the_reply_cap_and_the_reserve_of_the_budgets(
    make_service, tiny_noeos_model_path
):
    service = await _service(make_service, tiny_noeos_model_path, n_ctx=2048, reply_max_tokens=200)
    conv = service.new_conversation(service.library.get("wren"))
    before = service.memory_view(conv.id).budgets
    service.save_settings(conv.id, ChatSettings(), _gen(reply_max_tokens=1000))
    after = service.memory_view(conv.id).budgets
    assert (before.reply_reserve, after.reply_reserve) == (200, 1000)
    # The fold budgets follow: the history's ceiling leaves the longer reply its room beside
    # the card's setup (the budgets are fitted to it).
    assert after.ceiling + after.fixed_tokens + after.reply_reserve <= 2048
    assert after.ceiling < before.ceiling
    assert after.trigger <= after.ceiling
    service.save_settings(conv.id, ChatSettings(), _gen(reply_max_tokens=24))
    done = await (await service.send(conv.id, "Tell me everything.")).wait()
    assert done.reply is not None and done.reply.status is MessageStatus.CUT
    assert done.metrics is not None and done.metrics.generated == 24
    assert service.memory_view(conv.id).budget.reply_reserve == 24


async def test_top_k_of_one_samples_the_greedy_reply(make_service, tiny_model_path):
    """The layered settings reach the sampler: top-k 1 leaves one token to pick from."""
    service = await _service(make_service, tiny_model_path, temperature=0.0, reply_max_tokens=24)
    card = service.library.get("wren")
    greedy_conv, hot_conv = service.new_conversation(card), service.new_conversation(card)
    greedy = (await (await service.send(greedy_conv.id, "Hello there.")).wait()).reply
    service.save_settings(hot_conv.id, ChatSettings(), _gen(temperature=3.0, top_k=1))
    hot = (await (await service.send(hot_conv.id, "Hello there.")).wait()).reply
    assert greedy is not None and hot is not None and hot.text == greedy.text
    service.save_settings(hot_conv.id, ChatSettings(), _gen(temperature=3.0, top_k=0, min_p=0.0))
    wild = await (await service.regenerate(hot_conv.id)).wait()
    assert wild.reply is not None and wild.reply.text != greedy.text


async def _prompt_of(service, conv_id: int) -> list[tuple[str, str]]:
    conv = service.store.get_conversation(conv_id)
    card = service.library.get(conv.character_key)
    persona = service.persona_of(conv)
    prepared = await service.prompter.preview(conv_id, card, service.setup_for(card), persona)
    assert prepared.request.sampling is not None
    return [(m.role, m.content) for m in prepared.request.messages]


async def test_the_authors_note_is_placed_at_its_depth(make_fake_service):
    """Fake engine: this test is about where the prompt places the note, which does not depend
    on the model."""
    write_short_card()
    service = await make_fake_service(fake_settings(), scripted(REPLY))
    conv = service.new_conversation(service.library.get("wren"))
    for text in ("One.", "Two.", "Three."):
        await (await service.send(conv.id, text)).wait()
    note = "[Style: {{char}} answers {{user}} in rhyme.]"
    service.save_settings(conv.id, ChatSettings(), ChatSettings(author_note=note))
    messages = await _prompt_of(service, conv.id)
    shown = "[Style: Wren answers User in rhyme.]"
    assert messages[-1] == ("system", shown)  # depth 0: after the history
    service.save_settings(
        conv.id, ChatSettings(), ChatSettings(author_note=note, author_note_depth=2)
    )
    messages = await _prompt_of(service, conv.id)
    at = messages.index(("system", shown))
    assert len(messages) - at - 1 == 2  # two messages of the history after it
    assert messages[at + 1][0] == "user" and messages[at + 1][1] == "Three."
    service.save_settings(
        conv.id, ChatSettings(), ChatSettings(author_note=note, author_note_depth=999)
    )
    messages = await _prompt_of(service, conv.id)
    assert messages[1] == ("system", shown)  # deeper than the window: at its start


async def test_a_deep_note_is_read_again_while_the_user_reads_not_before_the_reply(
    make_fake_service,
):
    """Measured, not assumed: at depth 4 the note moves down the history every turn, so the
    note and the messages after it are read again; the settle after each reply does it (the
    history as the next turn starts it), so the next turn reads only its new message and what
    follows the history, as at depth 0.

    Fake engine: this test is about what the note's place costs in positions read again, which
    the fake counts from what its context holds as the real engine does (tests/engine measures
    the real reuse); it does not depend on the model."""
    write_short_card()
    evaluated: dict[int, list[int]] = {}
    background: dict[int, int] = {}
    for depth in (0, 4):
        service = await make_fake_service(fake_settings(reply_max_tokens=24), scripted(REPLY))
        conv = service.new_conversation(service.library.get("wren"))
        service.save_settings(
            conv.id,
            ChatSettings(),
            ChatSettings(
                author_note="[Keep the lighthouse in every scene.]", author_note_depth=depth
            ),
        )
        evaluated[depth] = []
        for i in range(6):
            done = await (await service.send(conv.id, f"Message number {i} about the sea.")).wait()
            await service.states_settled()  # the user reads the reply
            assert done.metrics is not None
            evaluated[depth].append(done.metrics.evaluated)
        work = service.engine.work(Slot.CHAT).evaluated
        background[depth] = work - sum(evaluated[depth])  # what the settles read
    steady = {depth: sum(values[3:]) / 3 for depth, values in evaluated.items()}
    assert steady[4] <= steady[0], evaluated
    assert background[4] > background[0] + 5 * steady[0], (background, evaluated)


def _card_with_notes() -> str:
    """A small card whose post-history instructions and lorebook change the end of the prompt."""
    return write_short_card(
        post_history_instructions="[Stay in the lighthouse, {{user}}.]",
        character_book={
            "entries": [{"keys": ["storm"], "content": "LORE-STORM: gales break on the rocks."}]
        },
    )


async def test_what_changes_every_turn_sits_after_the_history_so_the_prefix_is_byte_stable(
    make_fake_service,
):
    """The card's lorebook, a World Info file, the Author's Note (depth 0) and the card's
    post-history instructions all come after the history: each turn's rendered prompt starts
    with the previous turn's, byte for byte, up to the end of its new message, and the engine
    reuses that prefix from its cache.

    Fake engine: this test is about the order of the prompt, rendered by the app's own formats,
    and the positions it lets the engine reuse, which the fake counts as the real engine does;
    it does not depend on the model."""
    folder = app_dirs().world_info
    folder.mkdir(parents=True)
    book = {"entries": {"0": {"uid": 0, "key": ["bell"], "content": "WORLD-BELL: it tolls."}}}
    (folder / "harbour.json").write_text(json.dumps(book), encoding="utf-8")
    key = _card_with_notes()
    service = await make_fake_service(fake_settings(reply_max_tokens=16), scripted(REPLY))
    conv = service.new_conversation(service.library.get(key))
    service.save_settings(
        conv.id,
        ChatSettings(author_note="NOTE: {{char}} speaks softly."),
        ChatSettings(world_info=("harbour.json",)),
    )
    says = ["A storm rises.", "The bell rings.", "Quiet night.", "Storm and bell.", "Dawn."]
    previous = ""
    for turn_no, text in enumerate(says):
        turn = await service.send(conv.id, text)
        prompt = service.engine.render(turn.prepared.request).text
        done = await turn.wait()
        assert done.metrics is not None
        assert prompt.startswith(previous), turn_no
        # The notes of this turn, after the new message, in their order.
        end = prompt.rindex(text) + len(text)
        tail = prompt[end:]
        places = [
            tail.find(part)
            for part in ("LORE-STORM", "WORLD-BELL", "NOTE: Wren", "[Stay in the lighthouse, User")
        ]
        lore = service.memory_view(conv.id).lore
        assert lore is not None
        sent = " ".join(f.entry.content for f in lore.selection.fired if f.sent)
        fired = ["LORE-STORM" in sent, "WORLD-BELL" in sent, True, True]
        assert [at >= 0 for at in places] == fired, (turn_no, tail)
        if turn_no < 2:  # the first storm and the first bell fire on their own turn
            assert fired[turn_no], (turn_no, tail)
        shown = [at for at in places if at >= 0]
        assert shown == sorted(shown)  # lore, then the note, then post-history: last
        assert "LORE-STORM" not in prompt[:end] and "WORLD-BELL" not in prompt[:end]
        if previous:
            # Reused from the cache: at least everything before the previous turn's notes.
            assert done.metrics.reused >= service.engine.count_tokens(previous) - 2, turn_no
            assert done.metrics.evaluated < done.metrics.prompt_positions // 2, turn_no
        previous = prompt[:end]


async def test_the_lore_budget_is_a_setting_of_the_character_or_the_conversation(
    make_service, tiny_model_path
):
    """The app's lore budget (`lore_budget_ratio` of the window) is the base; a character's
    or a conversation's decides which fired entries are sent and which are left out."""
    folder = app_dirs().world_info
    folder.mkdir(parents=True)
    long = "The storm tower's bell, cast in the old foundry, rings at every change of tide."
    book = {
        "entries": {
            "0": {"uid": 0, "key": ["storm"], "comment": "Short", "content": "Gales.", "order": 9},
            "1": {"uid": 1, "key": ["storm"], "comment": "Long", "content": long, "order": 1},
        }
    }
    (folder / "sea.json").write_text(json.dumps(book), encoding="utf-8")
    service = await _service(make_service, tiny_model_path, reply_max_tokens=16)
    conv = service.new_conversation(service.library.get("wren"))
    short_cost = service.engine.count_tokens("Gales.")
    assert service.engine.count_tokens(long) > short_cost + 4

    async def sent_after(character: ChatSettings, conversation: ChatSettings) -> list[str]:
        service.save_settings(conv.id, character, conversation)
        await (await service.send(conv.id, "A storm comes.")).wait()
        lore = service.memory_view(conv.id).lore
        assert lore is not None
        assert lore.selection.budget == service.settings_view(conv.id).effective.lore_budget.value
        return [f.label for f in lore.selection.fired if f.sent]

    files = ChatSettings(world_info=("sea.json",))
    assert sorted(await sent_after(files, ChatSettings())) == ["Long", "Short"]  # 5% of 2,048
    tight = files.model_copy(update={"lore_budget": short_cost + 2})
    assert await sent_after(tight, ChatSettings()) == ["Short"]  # the character's
    assert await sent_after(tight, ChatSettings(lore_budget=0)) == []  # the conversation's
    view = service.memory_view(conv.id)
    assert view.settings is not None and view.settings.lore_budget.layer is Layer.CONVERSATION
