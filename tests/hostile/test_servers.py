"""A server backend that misbehaves (tests/hostile/servers.py, a hand-written server on
loopback): every turn ends, as cut or failed with the reason, nothing stored is lost, and the
`kotonia` process stays under 1 GB while it talks to the server.

Before the bounds: a gzip bomb grew the process to 23.6 GB; keep-alives, empty events and a
server that ignores the cap kept the turn running for good; a 300 MB reply was stored whole
and then `search` and the next turn did not finish in 120 s.

The profile sets `server_timeout_s` to 3 s, so a stall is seen in seconds: it is the bound
until the first token, and the bound between tokens is the smaller of it and 60 s
(`engine/server/stream.py`). With the default read timeout (two minutes or more, a cold read
of the whole window) the mechanism is the same.
"""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from kotonia_tui.config import ModelProfile, PromptFormat, app_dirs
from kotonia_tui.engine.errors import (
    BackendUnavailableError,
    CallPreemptedError,
    ServerResponseError,
    StreamInterruptedError,
)
from kotonia_tui.engine.server import ServerEngine
from kotonia_tui.engine.types import ChatMessage, GenerationRequest, Priority

from .harness import Run, assert_no_crash, assert_ok, assert_refused, kotonia
from .servers import (
    EVENTS,
    GZIP,
    REPLY,
    Behaviour,
    MisbehavingServer,
    answers,
    drips,
    empty_deltas,
    gzip_bomb,
    huge_body,
    keep_alives,
    never_stops,
    stalls_mid_reply,
)

PEAK_MB = 1024  # the bound for talking to a hostile server
STALL_S = 3.0  # the profile's read timeout in these tests
RUN_S = 60.0  # start-up, probing, the bound itself and the rest, on a loaded machine


def chat(server: MisbehavingServer, *more: str) -> Run:
    server.write_config(server_timeout_s=STALL_S)
    run = kotonia("chat", "wren", "--say", "Is the lamp lit?", *more, timeout=RUN_S,
                  measure_peak=True)  # fmt: skip
    assert_no_crash(run)
    assert run.peak_mb is not None and run.peak_mb < PEAK_MB, run.peak_mb
    print(f"peak resident memory {run.peak_mb:.0f} MB in {run.seconds:.1f} s")
    return run


def stored_replies() -> list[tuple[str, str, str | None]]:
    with sqlite3.connect(app_dirs().default_db) as conn:
        rows = conn.execute("SELECT role, text, status_reason FROM messages ORDER BY id").fetchall()
    return [(role, text, reason) for role, text, reason in rows]


def user_line_kept() -> None:
    assert ("user", "Is the lamp lit?", None) in stored_replies()


# (route, behaviour, what the one error line names)
FAILING = {
    "gzip-bomb-stream": (
        "/v1/completions",
        Behaviour(gzip_bomb, **EVENTS, **GZIP),
        "the server sent more than",
    ),
    "keep-alives-only": ("/v1/completions", Behaviour(keep_alives, **EVENTS), "no token within"),
    "empty-deltas-only": ("/v1/completions", Behaviour(empty_deltas, **EVENTS), "no token within"),
}


@pytest.mark.parametrize("name", FAILING, ids=FAILING)
def test_a_stream_that_gives_no_tokens_fails_the_turn_with_the_reason(name, card):
    route, behaviour, named = FAILING[name]
    with MisbehavingServer({route: behaviour}) as server:
        run = chat(server)
    line = assert_refused(run, "/v1/completions", named)
    assert "stream was closed" in line or "rest was not read" in line
    user_line_kept()  # the user's message stays; no reply is made up
    assert [role for role, *_ in stored_replies()] == ["character", "user"]


def test_a_gzip_bomb_as_the_model_list_is_one_line(card):
    """Probing reads /v1/models first: 16 MB decoded is the most an answer may be."""
    bomb = Behaviour(gzip_bomb, **GZIP)
    with MisbehavingServer({"/v1/models": bomb}) as server:
        run = chat(server)
        server.write_config(server_timeout_s=STALL_S)
        doctor = kotonia("doctor", timeout=RUN_S, measure_peak=True)
    assert_refused(run, "/v1/models", "more than 16.00 MB")
    assert_no_crash(doctor)
    assert doctor.code == 1 and "/v1/models" in doctor.err
    assert doctor.peak_mb is not None and doctor.peak_mb < PEAK_MB


@pytest.mark.slow
def test_an_answer_that_drips_for_ever_ends_at_its_read_timeout(card):
    """Probing waits 10 s for a model list (`PROBE_TIMEOUT_S`): the whole answer, not each
    read, so a byte every 0.2 s ends there too."""
    with MisbehavingServer({"/v1/models": Behaviour(drips)}) as server:
        run = chat(server)
    assert_refused(run, "/v1/models", "kept coming for more than 10 s")


def test_a_server_that_never_stops_is_cut_at_the_cap(card):
    with MisbehavingServer({"/v1/completions": Behaviour(never_stops, **EVENTS)}) as server:
        run = chat(server)
    assert_ok(run)
    assert run.out.strip() == ("lamp " * 32).strip()
    assert "[cut: the reply reached its cap of 32 tokens]" in run.err
    assert stored_replies()[-1] == ("character", run.out.strip(), "cut: the reply reached its "
                                    "cap of 32 tokens")  # fmt: skip


def test_a_stall_part_way_keeps_what_came_and_says_why(card):
    with MisbehavingServer({"/v1/completions": Behaviour(stalls_mid_reply, **EVENTS)}) as server:
        run = chat(server)
    line = assert_refused(run, "no token for 3 s after the last one")
    assert run.out.strip() == "The lamp is"
    role, text, reason = stored_replies()[-1]
    assert (role, text) == ("character", "The lamp is")
    assert reason is not None and "no token for 3 s" in reason and line.endswith("arrived)")


@pytest.mark.slow
def test_a_300_mb_reply_is_cut_and_search_and_the_next_turn_still_work(card):
    with MisbehavingServer({"/v1/completions": Behaviour(huge_body, **EVENTS)}) as server:
        run = chat(server)
        assert_refused(run, "the server sent more than", "a reply of at most 32 tokens")
        role, text, reason = stored_replies()[-1]
        assert role == "character" and reason is not None and "more than" in reason
        assert 0 < len(text) <= 2**20  # a bounded part of it, marked as cut
        found = kotonia("search", "lamp", timeout=RUN_S)
        assert_ok(found)
        assert found.out.count("\n") >= 1
        server.routes["/v1/completions"] = Behaviour(answers, **EVENTS)
        conv = found.out.split("\t")[1]
        following = chat(server, "--conversation", conv)
    assert_ok(following)
    assert following.out.strip() == REPLY


@pytest.mark.parametrize(
    ("chunks", "error", "said"),
    [
        (stalls_mid_reply, BackendUnavailableError, "no token for 3 s after the last one"),
        (huge_body, ServerResponseError, "the server sent more than"),
    ],
    ids=["stall", "300-mb"],
)
async def test_a_background_call_keeps_nothing_in_part(chunks, error, said):
    """A fold's call: a stall waits for the server as a server that is down does (the fold
    worker defers it without counting an attempt), an oversized answer is a failed attempt;
    neither is a 'gave way to a user turn' retried at once."""
    with MisbehavingServer({"/v1/completions": Behaviour(chunks, **EVENTS)}) as server:
        profile = ModelProfile(
            backend="server",
            server_url=server.url,
            prompt_format=PromptFormat.TEMPLATE,
            n_ctx=1024,
            server_timeout_s=STALL_S,
        )
        engine = ServerEngine.open(profile)
        try:
            ask = GenerationRequest(
                messages=(ChatMessage("user", "Fold this."),),
                max_tokens=32,
                priority=Priority.BACKGROUND,
            )
            with pytest.raises(error, match=said) as caught:
                await asyncio.wait_for(engine.generate(ask), RUN_S)
        finally:
            engine.close()
    assert not isinstance(caught.value, CallPreemptedError | StreamInterruptedError)
