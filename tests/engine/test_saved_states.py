"""Saved KV states on the real engine with tiny models: a state saved by one engine starts the
next engine warm, gives the same reply, and is never trusted when it is damaged, cut short or
made for another model or profile; the cache dir stays under its cap (least recently used
first); writes are atomic."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import pytest

from kotonia_tui.config import ModelProfile, PromptFormat
from kotonia_tui.domain import ChatMessage, ImageInput
from kotonia_tui.engine import GenerationRequest, GenerationResult, LlamaEngine, Slot, StateRef
from kotonia_tui.engine.items import ImageItem
from kotonia_tui.engine.resume import Resumer
from kotonia_tui.engine.state_cache import StateCache, StateCacheConfig
from kotonia_tui.engine.state_file import (
    StateKey,
    fingerprint,
    read_head,
    read_state,
    write_state,
)
from tests.settings import default_model_settings, engine_threads
from tests.tiny_models import png_bytes, write_tiny_llama

SYSTEM = ChatMessage("system", "You are Wren, who keeps the old lighthouse on a stormy coast.")
USER = "Ann"
CHAR = "Wren"
LINES = ("Good evening. May I come in?", "Tell me about the lamp.", "Who was here before you?")


def states(tmp_path: Path, *, cap_bytes: int = 64 << 20, profile: str = "tiny") -> StateCacheConfig:
    return StateCacheConfig(tmp_path / "kv-state", cap_bytes, profile)


def open_engine(
    tmp_path: Path,
    model: Path,
    mmproj: Path | None = None,
    *,
    cap_bytes: int = 64 << 20,
    profile: str = "tiny",
) -> LlamaEngine:
    model_profile = ModelProfile(
        model_path=model,
        mmproj_path=mmproj,
        n_ctx=2048,
        prompt_format=PromptFormat.TEMPLATE,
        temperature=0.0,
        threads=engine_threads(),
        seed=7,
    )
    config = states(tmp_path, cap_bytes=cap_bytes, profile=profile)
    return LlamaEngine.open(model_profile, cache_dir=tmp_path / "models", states=config)


def ask(history: tuple[ChatMessage, ...], name: str = "conversation-1") -> GenerationRequest:
    return GenerationRequest(
        messages=history,
        max_tokens=12,
        reply_name=CHAR,
        user_name=USER,
        state=StateRef(name),
    )


async def turn(
    engine: LlamaEngine, history: tuple[ChatMessage, ...], text: str, *, settle: bool = True
) -> tuple[tuple[ChatMessage, ...], GenerationResult]:
    """One turn as the chat service runs it: the reply, then the settle (awaited: the user is
    reading), which keeps the history ready and saves it. Returns the history with the reply."""
    history = (*history, ChatMessage("user", text, name=USER))
    call = engine.start(ask(history))
    result = await call.result()
    history = (*history, ChatMessage("assistant", result.text, name=CHAR))
    if settle:
        await engine.settle(ask(history), call).result()
    return history, result


async def conversation(engine: LlamaEngine, lines: tuple[str, ...]) -> tuple[ChatMessage, ...]:
    history: tuple[ChatMessage, ...] = (SYSTEM,)
    for line in lines:
        history, _ = await turn(engine, history, line)
    return history


def saved_file(tmp_path: Path, name: str = "conversation-1") -> Path:
    (found,) = (tmp_path / "kv-state").glob(f"*-{name}.kvstate")
    return found


async def test_a_new_engine_resumes_from_the_saved_state_as_a_warm_one_would(
    tmp_path, tiny_model_path
):
    warm_dir, saved_dir = tmp_path / "warm", tmp_path / "saved"
    with open_engine(warm_dir, tiny_model_path) as engine:
        history = await conversation(engine, LINES)
        _, warm = await turn(engine, history, "And the storm tonight?")
    with open_engine(saved_dir, tiny_model_path) as engine:
        history = await conversation(engine, LINES)
    head = read_head(saved_file(saved_dir), engine._resumer.cache.key)
    with open_engine(saved_dir, tiny_model_path) as engine:  # a new process, in effect
        _, restored = await turn(engine, history, "And the storm tonight?")
    # The whole history came from disk; only the new message was evaluated, as warm.
    assert restored.metrics.restored == restored.metrics.reused == head.cells > 0
    assert restored.metrics.evaluated == warm.metrics.evaluated
    assert restored.metrics.reused == warm.metrics.reused
    assert warm.metrics.restored == 0
    assert restored.text == warm.text  # the same KV: the same greedy reply


async def test_a_state_holding_an_image_resumes_without_encoding_it_again(
    tmp_path, tiny_model_path, tiny_mmproj_path
):
    picture = ImageInput(data=png_bytes((32, 32), (200, 40, 40)), key="a" * 64)
    first = ChatMessage("user", "Look at this.", name=USER, images=(picture,))
    warm_dir, saved_dir = tmp_path / "warm", tmp_path / "saved"
    results = []
    for folder in (warm_dir, saved_dir):
        with open_engine(folder, tiny_model_path, tiny_mmproj_path) as engine:
            call = engine.start(ask((SYSTEM, first)))
            reply = await call.result()
            history = (SYSTEM, first, ChatMessage("assistant", reply.text, name=CHAR))
            await engine.settle(ask(history), call).result()
            if folder == warm_dir:
                results.append((await turn(engine, history, "What colour is it?"))[1])
    head = read_head(saved_file(saved_dir), engine._resumer.cache.key)
    assert any(isinstance(i, ImageItem) and i.key == picture.key for i in head.items)
    with open_engine(saved_dir, tiny_model_path, tiny_mmproj_path) as engine:
        _, restored = await turn(engine, history, "What colour is it?")
    (warm,) = results
    assert restored.metrics.restored == head.cells > 16  # the image's 16 cells among them
    assert restored.metrics.images == 1  # the prompt holds it, read from the saved state
    assert restored.metrics.evaluated == warm.metrics.evaluated
    assert restored.text == warm.text


async def test_a_new_conversation_with_the_same_setup_starts_warm(tmp_path, tiny_model_path):
    with open_engine(tmp_path, tiny_model_path) as engine:
        await conversation(engine, LINES[:1])
    setups = list((tmp_path / "kv-state").glob("*-setup-*.kvstate"))
    assert len(setups) == 1
    with open_engine(tmp_path, tiny_model_path) as engine:
        history = (SYSTEM, ChatMessage("user", "Hello!", name=USER))
        result = await engine.start(ask(history, "conversation-2")).result()
        setup_cells = read_head(setups[0], engine._resumer.cache.key).cells
    assert result.metrics.restored == result.metrics.reused == setup_cells > 0


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40  # in the KV bytes: only the digest can tell
    path.write_bytes(bytes(data))


def cut_short(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])


def other_bytes(path: Path) -> None:
    path.write_bytes(b"GGUF" + bytes(4096))  # not a saved state at all, under a state's name


@pytest.mark.parametrize(
    "damage", [flip_a_byte, cut_short, other_bytes], ids=["flipped", "truncated", "not-a-state"]
)
async def test_a_damaged_state_is_removed_and_the_turn_runs_cold(
    tmp_path, tiny_model_path, damage, caplog
):
    with open_engine(tmp_path, tiny_model_path) as engine:
        history = await conversation(engine, LINES[:2])
    damaged = {}
    for path in (tmp_path / "kv-state").glob("*.kvstate"):
        damage(path)  # the setup's state too: nothing on disk can be trusted now
        damaged[path.name] = path.read_bytes()
    assert len(damaged) == 2
    caplog.set_level(logging.WARNING, logger="kotonia_tui.engine.state_cache")
    with open_engine(tmp_path, tiny_model_path) as engine:
        _, result = await turn(engine, history, "Still there?", settle=False)
        removed = [r.getMessage() for r in caplog.records if "removed" in r.getMessage()]
        assert sorted(name for name in damaged if any(name in m for m in removed)) == sorted(
            damaged
        )
        # What is on disk now was written afresh (the setup, saved on the way) and checks out.
        for path in (tmp_path / "kv-state").glob("*.kvstate"):
            assert path.read_bytes() != damaged.get(path.name)
            head = read_head(path, engine._resumer.cache.key)
            assert engine._resumer.cache.read(head) is not None
    assert result.metrics.restored == result.metrics.reused == 0
    assert result.metrics.evaluated == result.metrics.prompt_positions


async def test_a_state_whose_items_do_not_match_its_kv_is_removed_never_trusted(
    tmp_path, tiny_model_path, caplog
):
    """A well-formed file (its digest right, its key this engine's) that lists more items than
    its KV holds: llama.cpp would accept the bytes, but the positions tell. The setup's state,
    which checks out, is loaded instead."""
    with open_engine(tmp_path, tiny_model_path) as engine:
        history = await conversation(engine, LINES[:2])
        key = engine._resumer.cache.key
    path = saved_file(tmp_path)
    head = read_head(path, key)
    state = bytearray(head.state_bytes)
    read_state(head, state)
    longer = (*head.items, *head.items[-8:])  # what a longer history would hold
    with path.open("wb") as out:
        write_state(out, key, longer, memoryview(state))
    (setup,) = (tmp_path / "kv-state").glob("*-setup-*.kvstate")
    setup_cells = read_head(setup, key).cells
    caplog.set_level(logging.WARNING, logger="kotonia_tui.engine.state_cache")
    with open_engine(tmp_path, tiny_model_path) as engine:
        _, result = await turn(engine, history, "Still there?", settle=False)
        assert not path.exists()
    assert any(path.name in r.getMessage() and "refused" in r.getMessage() for r in caplog.records)
    assert result.metrics.restored == result.metrics.reused == setup_cells > 0


async def test_closing_saves_a_turn_no_settle_followed(tmp_path, tiny_model_path):
    """The app quits right after a reply, before the model was idle long enough to settle:
    closing the engine saves the context as the conversation's state, and the next start
    resumes from it."""
    with open_engine(tmp_path, tiny_model_path) as engine:
        history, first = await turn(engine, (SYSTEM,), LINES[0], settle=False)
        engine._resumer.cache.flush()
        assert not list((tmp_path / "kv-state").glob("*-conversation-1.kvstate"))
    head = read_head(saved_file(tmp_path), engine._resumer.cache.key)
    assert head.cells > first.metrics.prompt_positions  # the prompt and the reply's tokens
    with open_engine(tmp_path, tiny_model_path) as engine:
        _, resumed = await turn(engine, history, LINES[1], settle=False)
    # At least the whole first prompt came from disk (the setup's state holds less); how much
    # of the reply too depends on how its text tokenizes again.
    assert resumed.metrics.restored == resumed.metrics.reused >= first.metrics.prompt_positions


async def test_another_models_or_profiles_state_is_removed_never_loaded(
    tmp_path, tiny_model_path, tiny_eos_model_path
):
    with open_engine(tmp_path / "a", tiny_model_path) as engine:
        history = await conversation(engine, LINES[:2])
        key_a = engine._resumer.cache.key
    source = saved_file(tmp_path / "a")
    for other_model, profile in ((tiny_eos_model_path, "tiny"), (tiny_model_path, "other")):
        folder = tmp_path / f"{other_model.stem}-{profile}"
        with open_engine(folder, other_model, profile=profile) as engine:
            key = engine._resumer.cache.key
            assert key != key_a
            # The file as this engine would look for it: same name, same place.
            target = engine._resumer.cache.path("conversation-1")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
            _, result = await turn(engine, history, "Still there?", settle=False)
            assert not target.exists()
        assert result.metrics.restored == result.metrics.reused == 0


async def test_the_cache_dir_keeps_under_its_cap_evicting_the_least_recently_used(
    tmp_path, tiny_model_path
):
    with open_engine(tmp_path, tiny_model_path) as engine:
        await conversation(engine, LINES[:1])
        cache = engine._resumer.cache
    folder = tmp_path / "kv-state"
    size = saved_file(tmp_path).stat().st_size
    setup = next(folder.glob("*-setup-*.kvstate"))
    # Three conversations' states, last used in this order: conversation-1, -2, -3.
    now = time.time()
    for index, name in enumerate(("conversation-2", "conversation-3")):
        shutil.copy(saved_file(tmp_path), cache.path(name))
        os.utime(cache.path(name), (now - 50 + index, now - 50 + index))
    os.utime(cache.path("conversation-1"), (now - 100, now - 100))
    os.utime(setup, (now - 110, now - 110))
    # Room for two: the setup and conversation-1, used longest ago, go.
    small = StateCache(StateCacheConfig(folder, 2 * size + 1, "tiny"), cache.key)
    removed = small.evict()
    small.close()
    assert {p.name for p in removed} == {setup.name, cache.path("conversation-1").name}
    assert sorted(p.name for p in folder.glob("*.kvstate")) == sorted(
        cache.path(n).name for n in ("conversation-2", "conversation-3")
    )
    # Loading a state makes it the most recently used: a cap for one keeps that one.
    with open_engine(tmp_path, tiny_model_path, cap_bytes=2 * size + 1) as engine:
        history = (SYSTEM, ChatMessage("user", LINES[0], name=USER))
        result = await engine.start(ask(history, "conversation-2")).result()
        assert result.metrics.restored > 0
    kept = cache.path("conversation-2")
    smaller = StateCache(StateCacheConfig(folder, kept.stat().st_size + 1, "tiny"), cache.key)
    smaller.evict()
    smaller.close()
    assert [p.name for p in folder.glob("*.kvstate")] == [kept.name]


async def test_writes_are_atomic_and_a_state_over_the_cap_is_not_written(
    tmp_path, tiny_model_path, caplog
):
    folder = tmp_path / "kv-state"
    folder.mkdir()
    # A crashed write's temporary file is cleaned up once it is old.
    leftover = folder / ".x.kvstate.abc.partial"
    leftover.write_bytes(b"half a state")
    os.utime(leftover, (time.time() - 7200, time.time() - 7200))
    caplog.set_level(logging.INFO, logger="kotonia_tui.engine.state_cache")
    with open_engine(tmp_path, tiny_model_path) as engine:
        assert not leftover.exists()
        await conversation(engine, LINES[:1])
    written = sorted(p.name for p in folder.iterdir())
    assert len(written) == 2 and all(n.endswith(".kvstate") for n in written)  # no temporary
    for path in folder.iterdir():
        path.unlink()
    with open_engine(tmp_path, tiny_model_path, cap_bytes=4096) as engine:
        await conversation(engine, LINES[:1])
    assert not list(folder.iterdir())  # every state was over the 4 KB cap: none written
    assert any("more than the cap" in r.getMessage() for r in caplog.records)


def test_a_sliding_window_state_is_only_extended(tmp_path):
    key = StateKey("m", "", "p", "v", "l")
    config = StateCacheConfig(tmp_path, 1 << 20, "p")
    swa, full = Resumer(StateCache(config, key), n_swa=4), Resumer(StateCache(config, key), n_swa=0)
    saved = [1, 2, 3, 4, 5, 6]
    assert swa.usable(saved, [1, 2, 3, 4, 5, 6, 7]) == 6
    assert swa.usable(saved, [1, 2, 3, 4, 5, 9]) == 5  # all but the last: re-evaluated
    assert swa.usable(saved, [1, 2, 3, 9]) == 0  # its window before 4 is gone
    assert full.usable(saved, [1, 2, 3, 9]) == 3  # any other model keeps the shared prefix
    assert full.usable(saved, saved) == swa.usable(saved, saved) == 5  # the last: evaluated


@pytest.mark.default_model
@pytest.mark.slow
async def test_a_sliding_window_model_starts_a_new_conversation_from_the_setup(tmp_path):
    """Gemma 3 (the embedded default): a saved state holds its sliding-window layers only for
    the last 512 positions. A context loaded from a long conversation's state cannot be cut
    back to the setup it shares with the next conversation: that one must load the setup's
    saved state, not evaluate its whole prompt again (it did, when the context was taken to
    hold the setup still)."""
    profile = default_model_settings(n_ctx=4096).active_profile()
    config = states(tmp_path, profile="gemma")
    history: tuple[ChatMessage, ...] = (SYSTEM,)
    for index in range(14):
        history += (
            ChatMessage("user", f"{LINES[index % 3]} I ask again, the {index}th time.", name=USER),
            ChatMessage(
                "assistant",
                "The lamp turns all night; the keeper's log has a page for every ship "
                f"that passed, and this is page {index}, in a careful hand.",
                name=CHAR,
            ),
        )
    with LlamaEngine.open(profile, cache_dir=tmp_path / "cache", states=config) as engine:
        n_swa = engine._slots[Slot.CHAT].n_swa
        assert n_swa > 0
        history, first = await turn(engine, history, "And the storm tonight?")
    (setup,) = (tmp_path / "kv-state").glob("*-setup-*.kvstate")
    with LlamaEngine.open(profile, cache_dir=tmp_path / "cache", states=config) as engine:
        setup_cells = read_head(setup, engine._resumer.cache.key).cells
        assert first.metrics.prompt_positions > setup_cells + n_swa  # the window moved on
        _, again = await turn(engine, history, "Is the lamp lit?", settle=False)
        assert again.metrics.restored > first.metrics.prompt_positions  # a restart, resumed
        hello = (SYSTEM, ChatMessage("user", "Hello! Is this the lighthouse?", name=USER))
        second = await engine.start(ask(hello, "conversation-2")).result()
    assert second.metrics.restored == second.metrics.reused == setup_cells > 0
    assert second.metrics.evaluated == second.metrics.prompt_positions - setup_cells


@pytest.mark.default_model
async def test_opening_a_conversation_on_a_sliding_window_model_loads_its_own_state(tmp_path):
    """Gemma 3 (the embedded default): opening a conversation (the app does it while the user
    reads) must load the conversation's saved state, not the setup's. The history rendered
    whole ends with the reply's name, which the saved state (ending where the user's next
    message starts) does not hold, and a sliding-window state must match all but its last
    item: the setup's state was loaded, and the first turn read the conversation's again."""
    profile = default_model_settings(n_ctx=2048).active_profile()
    config = states(tmp_path, profile="gemma")
    with LlamaEngine.open(profile, cache_dir=tmp_path / "cache", states=config) as engine:
        assert engine._slots[Slot.CHAT].n_swa > 0
        history = await conversation(engine, LINES[:2])
    with LlamaEngine.open(profile, cache_dir=tmp_path / "cache", states=config) as engine:
        saved = read_head(saved_file(tmp_path), engine._resumer.cache.key).cells
        opened = await engine.restore(ask(history)).result()
        _, first = await turn(engine, history, LINES[2], settle=False)
    assert opened.metrics.restored >= saved - 1 > 0  # its last item is read with the turn
    assert first.metrics.restored == saved  # reported by the turn that used it, not read again
    assert first.metrics.evaluated == first.metrics.prompt_positions - saved


def test_the_fingerprint_tells_models_apart_without_reading_them_whole(tmp_path):
    a = write_tiny_llama(tmp_path / "a.gguf", seed=1)
    b = write_tiny_llama(tmp_path / "b.gguf", seed=2)
    assert a.stat().st_size == b.stat().st_size  # same shape, other weights
    assert fingerprint(a) != fingerprint(b)
    copy = tmp_path / "copy.gguf"
    shutil.copy(a, copy)
    assert fingerprint(copy) == fingerprint(a)  # a copied model keeps its saved states


async def test_settling_after_a_newer_turn_changes_nothing(tmp_path, tiny_model_path):
    """A settle that comes after a newer turn (it waited behind it) must not cut that turn's
    context back to the older history."""
    with open_engine(tmp_path, tiny_model_path) as engine:
        history: tuple[ChatMessage, ...] = (SYSTEM, ChatMessage("user", LINES[0], name=USER))
        first = engine.start(ask(history))
        reply = await first.result()
        older = (*history, ChatMessage("assistant", reply.text, name=CHAR))
        history, newer = await turn(engine, older, LINES[1], settle=False)
        held = engine._slots[Slot.CHAT].items
        late = await engine.settle(ask(older), first).result()
        assert late.metrics.evaluated == 0
        assert engine._slots[Slot.CHAT].items == held
        _, after = await turn(engine, history, LINES[2], settle=False)
    assert after.metrics.reused >= newer.metrics.prompt_positions - 1
