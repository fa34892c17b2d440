"""The server backend on its own, against a real llama-cpp-python server: one streamed turn,
cancel, a cut reply, priorities, token counts, and a server that is not there."""

from __future__ import annotations

import asyncio

import pytest

from kotonia_tui.config import PromptFormat
from kotonia_tui.domain import ChatMessage
from kotonia_tui.engine import StreamEvent
from kotonia_tui.engine.errors import BackendUnavailableError, CallPreemptedError
from kotonia_tui.engine.server import ServerEngine, ServerKind
from kotonia_tui.engine.types import (
    FinishReason,
    GenerationRequest,
    GenerationResult,
    Priority,
    Slot,
    TextDelta,
)

from .conftest import CHAPTER, free_port, server_profile, write_server_config


def request(**values) -> GenerationRequest:
    values.setdefault("max_tokens", 32)
    return GenerationRequest(
        messages=(
            ChatMessage("system", "Wren keeps the lighthouse."),
            ChatMessage("user", "Hello, Wren.", name="Ann"),
        ),
        reply_name="Wren",
        user_name="Ann",
        **values,
    )


@pytest.fixture(params=[PromptFormat.TEMPLATE, PromptFormat.TRANSCRIPT])
def scripted_engine(request, scripted_server):
    engine = ServerEngine.open(server_profile(scripted_server.url, prompt_format=request.param))
    yield engine
    engine.close()


@pytest.fixture
def noeos_engine(noeos_server):
    engine = ServerEngine.open(server_profile(noeos_server.url))
    yield engine
    engine.close()


async def test_one_turn_streams_deltas_that_join_to_the_result(scripted_engine):
    info = scripted_engine.info
    assert info.kind is ServerKind.LLAMA_CPP_PYTHON
    assert info.n_ctx == 1024 and info.n_ctx_source == "profile"  # this server does not say
    call = scripted_engine.start(request(max_tokens=64))
    deltas: list[StreamEvent] = []
    results: list[StreamEvent] = []
    async for event in call:
        (results if isinstance(event, GenerationResult) else deltas).append(event)
    assert len(results) == 1 and results[0] is await call.result()
    result = results[0]
    assert result.finish_reason is FinishReason.STOP
    assert result.text == CHAPTER
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)).rstrip() == result.text
    metrics = result.metrics
    assert metrics.prompt_positions > 10 and metrics.evaluated == metrics.prompt_positions
    assert metrics.generated >= 10 and metrics.tokens_per_s > 0 and metrics.prompt_ms > 0
    assert metrics.finish_reason == "stop" and metrics.slot == "chat"


async def test_cancel_closes_the_stream_and_the_next_call_works(noeos_engine):
    call = noeos_engine.start(request(max_tokens=96))
    seen = 0
    async for event in call:
        if isinstance(event, TextDelta):
            seen += 1
            call.cancel()
    result = await call.result()
    assert result.finish_reason is FinishReason.CANCELLED
    assert seen >= 1 and result.metrics.generated < 96
    after = await noeos_engine.generate(request(max_tokens=8))
    assert after.finish_reason is FinishReason.LENGTH and after.text


async def test_a_reply_stopped_by_its_cap_is_cut(noeos_engine):
    result = await noeos_engine.generate(request(max_tokens=8))
    assert result.cut and result.metrics.generated == 8  # the cap, so the service says so


async def test_a_user_turn_preempts_a_background_call(noeos_engine):
    background = noeos_engine.start(
        request(max_tokens=96, priority=Priority.BACKGROUND, slot=Slot.FOLD)
    )
    while background.tokens_generated == 0:  # streaming now (iterating it would own it)
        await asyncio.sleep(0.005)
    user = noeos_engine.start(request(max_tokens=8))
    with pytest.raises(CallPreemptedError, match="gave way to a user turn"):
        await background.result()
    assert (await user.result()).finish_reason is FinishReason.LENGTH
    assert not noeos_engine.busy


async def test_calls_queue_one_at_a_time_users_first(noeos_engine):
    order = []

    async def run(name, priority):
        result = await noeos_engine.generate(request(max_tokens=4, priority=priority))
        order.append((name, result.finish_reason))

    first = asyncio.create_task(run("first", Priority.INTERACTIVE))
    await asyncio.sleep(0)
    tasks = [
        asyncio.create_task(run("fold", Priority.BACKGROUND)),
        asyncio.create_task(run("user", Priority.INTERACTIVE)),
    ]
    await asyncio.gather(first, *tasks)
    assert [name for name, _ in order] == ["first", "user", "fold"]


async def test_the_profiles_top_k_reaches_the_server(noeos_server):
    async def reply(**values) -> str:
        engine = ServerEngine.open(server_profile(noeos_server.url, seed=3, **values))
        try:
            return (await engine.generate(request(max_tokens=24))).text
        finally:
            engine.close()

    greedy = await reply()
    hot = {"temperature": 5.0, "top_p": 1.0, "min_p": 0.0}
    assert await reply(**hot, top_k=0) != greedy
    assert await reply(**hot, top_k=1) == greedy


async def test_token_counts_match_the_in_process_tokenizer(scripted_server, local_tokenizer):
    engine = ServerEngine.open(server_profile(scripted_server.url))
    try:
        for text in ("", "hello world", "Ann: the lamps\nWren:", "月島 tea", CHAPTER):
            assert engine.count_tokens(text) == local_tokenizer.count_tokens(text), text
    finally:
        engine.close()


def test_a_server_that_is_not_there_is_named():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(BackendUnavailableError, match=r"127\.0\.0\.1.*does not answer"):
        ServerEngine.open(server_profile(url))


def test_the_server_backend_does_not_import_llama_cpp():
    """It talks HTTP: no chain of imports from it (or its helpers) reaches llama_cpp."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("kotonia_tui", include_external_packages=True)
    package = "kotonia_tui.engine.server"
    modules = {package, *graph.find_descendants(package)}
    assert {f"{package}.engine", f"{package}.http", f"{package}.kinds"} <= modules
    for module in modules:
        assert graph.find_shortest_chain(importer=module, imported="llama_cpp") is None, module


def test_doctor_shows_the_backend_and_checks_the_server(scripted_server, capsys):
    from kotonia_tui.cli import main

    write_server_config(f"{scripted_server.url}/v1")
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "backend" in out and "server" in out
    assert "yes, in" in out and "llama-cpp-python" in out and "/extras/tokenize/count" in out

    url = f"{scripted_server.url}/v1"
    write_server_config(url.replace(str(scripted_server.port), str(free_port())))
    assert main(["doctor"]) == 1
    assert "does not answer" in capsys.readouterr().err
