"""Unusable credentials and hostile answers on the server backend: a clear one-line error (or
a warning and a safe default), never a traceback, and no secret ever shown or logged.

The credential tests run against the real llama-cpp-python server. The hostile answers come
from tests/server/hostile.py, a small local HTTP app: a fake, because no real server here can be
made to send a model list as a JSON list, a context of 10^30 or a count that is not a number.
"""

from __future__ import annotations

import base64

import pytest

from kotonia_tui.cli import main
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import ChatMessage
from kotonia_tui.engine.errors import CredentialError, EngineError, ServerResponseError
from kotonia_tui.engine.server import ServerEngine
from kotonia_tui.engine.types import FinishReason, GenerationRequest
from tests.cards import write_short_card

from .conftest import CHAPTER, free_port, server_profile
from .hostile import Answer, HostileServer, llama_server, vllm

MARK = "S3CRETMARK"  # in every secret below; must never be seen


def write_config(url: str, **fields: str) -> None:
    config = app_dirs().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    extra = "".join(f'{name} = "{value}"\n' for name, value in fields.items())
    config.write_text(
        'profile = "srv"\nfold_delay_s = 0.0\n[profiles.srv]\nbackend = "server"\n'
        f'server_url = "{url}"\nprompt_format = "template"\nn_ctx = 1024\n{extra}'
    )


def log_text() -> str:
    path = app_dirs().data / "kotonia.log"
    return path.read_text(encoding="utf-8") if path.exists() else ""


# ---- credentials ------------------------------------------------------------------------------

UNUSABLE_KEYS = {
    "line break": f"sk-{MARK}\nX-Injected: yes",
    "carriage return": f"sk-{MARK}\rmore",
    "non-ASCII": f"sk-caf\u00e9-{MARK}",
    "tab": f"sk-\t{MARK}",
    "space": f"sk-{MARK} more",
    "line separator": f"sk-\u2028{MARK}",
}


@pytest.mark.parametrize("key", UNUSABLE_KEYS.values(), ids=UNUSABLE_KEYS.keys())
def test_an_unusable_api_key_is_refused_by_name_and_never_shown(
    key, scripted_server, monkeypatch, capsys
):
    monkeypatch.setenv("KOTONIA_SERVER_KEY", key)
    profile = server_profile(scripted_server.url, api_key_env="KOTONIA_SERVER_KEY")
    with pytest.raises(CredentialError) as caught:
        ServerEngine.open(profile)
    message = str(caught.value)
    assert "KOTONIA_SERVER_KEY" in message and "\n" not in message
    assert MARK not in message

    write_config(scripted_server.url, api_key_env="KOTONIA_SERVER_KEY")
    assert main(["doctor"]) == 1
    out, err = capsys.readouterr()
    assert "KOTONIA_SERVER_KEY" in err
    for seen in (out, err, log_text()):
        assert MARK not in seen


def test_a_usable_key_is_sent_and_an_echo_of_it_is_not_shown(monkeypatch):
    """A server that repeats the key in its refusal (some do) must not get it printed."""
    monkeypatch.setenv("KOTONIA_API_KEY", f"sk-{MARK}")
    refusal = Answer.of({"error": {"message": f"Invalid API key sk-{MARK}"}}, status=401)
    with (
        HostileServer({"/v1/models": refusal}) as server,
        pytest.raises(ServerResponseError) as caught,
    ):
        ServerEngine.open(server_profile(server.url))
    assert server.seen[0].headers["Authorization"] == f"Bearer sk-{MARK}"
    assert "refused the API key" in str(caught.value) and MARK not in str(caught.value)


def test_credentials_in_server_url_are_used_and_never_shown(scripted_server, capsys):
    url = scripted_server.url.replace("http://", f"http://ann:pw{MARK}@") + f"/v1?key=t{MARK}"
    write_config(url)
    assert main(["doctor"]) == 0
    out, err = capsys.readouterr()
    shown = scripted_server.url.replace("http://", "http://ann:***@")
    assert shown in out and "key=***" in out

    key = write_short_card()
    assert main(["chat", key, "--say", "Good evening."]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == CHAPTER

    gone = url.replace(str(scripted_server.port), str(free_port()))
    write_config(gone)
    assert main(["doctor"]) == 1
    out2, err2 = capsys.readouterr()
    assert "ann:***@127.0.0.1" in err2 and "does not answer" in err2
    for seen in (out, err, out2, err2, log_text()):
        assert MARK not in seen

    # They still reach the server: basic auth from the URL, the query on every request.
    with HostileServer(llama_server({})) as server:
        own = server.url.replace("http://", f"http://ann:pw{MARK}@") + f"?key=t{MARK}"
        ServerEngine.open(server_profile(own)).close()
    expected = "Basic " + base64.b64encode(f"ann:pw{MARK}".encode()).decode()
    assert {seen.headers.get("Authorization") for seen in server.seen} == {expected}
    assert all(seen.path.endswith(f"?key=t{MARK}") for seen in server.seen)


# ---- hostile answers --------------------------------------------------------------------------

BROKEN = {
    "models is a list": ({"/v1/models": Answer.of([{"id": "m"}])}, "/v1/models"),
    "models data is text": ({"/v1/models": Answer.of({"data": "m"})}, "/v1/models"),
    "models is not JSON": ({"/v1/models": Answer(b"{'data': [")}, "/v1/models"),
    "models is HTML": ({"/v1/models": Answer(b"<html>", content_type="text/html")}, "/v1/models"),
    "models without ids": ({"/v1/models": Answer.of({"data": [{"name": "m"}]})}, "/v1/models"),
}


@pytest.mark.parametrize("routes, endpoint", BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_answer_is_one_line_naming_the_server_and_endpoint(routes, endpoint):
    with HostileServer(routes) as server, pytest.raises(ServerResponseError) as caught:
        ServerEngine.open(server_profile(server.url))
    message = str(caught.value)
    assert message.startswith(f"{server.url}{endpoint}: ") and "\n" not in message


NOT_THIS_KIND = {
    "props is not JSON": {"/props": Answer(b"{")},
    "props is a list": {"/props": Answer.of([1])},
    "props of another app": {"/props": Answer(b"<html>", content_type="text/html")},
    "count probe is not JSON": {"/extras/tokenize/count": Answer(b"x")},
    "count probe is a list": {"/extras/tokenize/count": Answer.of([0])},
}


@pytest.mark.parametrize("routes", NOT_THIS_KIND.values(), ids=NOT_THIS_KIND.keys())
def test_an_odd_answer_from_an_optional_endpoint_means_not_that_kind_of_server(routes):
    """Only llama-server has /props and only llama-cpp-python /extras/tokenize/count: a
    server answering them with something else is served as a plain OpenAI-compatible one."""
    with HostileServer({"/v1/models": Answer.of({"data": [{"id": "m"}]}), **routes}) as server:
        engine = ServerEngine.open(server_profile(server.url))
    engine.close()
    assert engine.info.kind == "openai-compatible" and engine.info.tokenizer == "estimate"


NONSENSE_SIZES = {
    "text": "8k",
    "fraction": 8192.5,
    "bool": True,
    "list": [4096],
    "negative": -5,
    "zero": 0,
    "10^30": 10**30,
}


@pytest.mark.parametrize("size", NONSENSE_SIZES.values(), ids=NONSENSE_SIZES.keys())
@pytest.mark.parametrize("where", ["vllm max_model_len", "llama-server n_ctx"])
def test_a_nonsense_context_size_is_ignored_with_a_warning(size, where, caplog):
    routes = (
        vllm({"max_model_len": size})
        if where.startswith("vllm")
        else llama_server({"default_generation_settings": {"n_ctx": size}})
    )
    with HostileServer(routes) as server:
        engine = ServerEngine.open(server_profile(server.url, n_ctx=1024))
    engine.close()
    info = engine.info
    assert info.n_ctx == 1024 and info.n_ctx_source == "profile"
    (warning,) = info.warnings
    assert warning.startswith(server.url) and "context" in warning and "n_ctx 1024" in warning
    assert warning in caplog.text


def test_a_real_but_too_small_context_is_a_clear_error():
    too_small = pytest.raises(ServerResponseError, match=r"max_model_len.*100.*at least 256")
    with HostileServer(vllm({"max_model_len": 100})) as server, too_small:
        ServerEngine.open(server_profile(server.url))


@pytest.mark.parametrize("slots", ["two", -5, 2.5, 10**30])
def test_a_nonsense_slot_count_is_ignored_with_a_warning(slots):
    with HostileServer(llama_server({"total_slots": slots})) as server:
        engine = ServerEngine.open(server_profile(server.url))
    engine.close()
    assert engine.info.slots == 1 and "total_slots" in engine.info.warnings[0]


BAD_COUNTS = {
    "a list": Answer.of([1, 2]),
    "tokens as text": Answer.of({"tokens": "123"}),
    "no tokens": Answer.of({"n": 3}),
    "not JSON": Answer(b"[1, 2"),
}


@pytest.mark.parametrize("answer", BAD_COUNTS.values(), ids=BAD_COUNTS.keys())
async def test_a_broken_token_count_is_a_clear_error(answer):
    with HostileServer({**llama_server({}), "/tokenize": answer}) as server:
        engine = ServerEngine.open(server_profile(server.url))
        try:
            for count in (
                lambda: engine.count_tokens("hello"),
                lambda: engine.count_tokens_many(["a", "b"]),
            ):
                with pytest.raises(ServerResponseError) as caught:
                    result = count()
                    if not isinstance(result, int):
                        await result
                assert str(caught.value).startswith(f"{server.url}/tokenize: ")
        finally:
            engine.close()


def sse(*chunks: str) -> Answer:
    body = "".join(f"data: {chunk}\n\n" for chunk in chunks)
    return Answer(body.encode(), content_type="text/event-stream")


async def test_nonsense_figures_in_a_stream_are_ignored():
    end = '{"choices": [{"index": 0, "text": "Hello.", "finish_reason": "stop"}], '
    routes = llama_server({"chat_template": "{{ messages[0].content }}"})
    routes["/v1/completions"] = sse(
        end + '"timings": {"prompt_n": "x", "cache_n": [], "predicted_n": 1e400}}', "[DONE]"
    )
    with HostileServer(routes) as server:
        engine = ServerEngine.open(server_profile(server.url))
        try:
            ask = GenerationRequest(messages=(ChatMessage("user", "Hi."),), max_tokens=8)
            result = await engine.generate(ask)
        finally:
            engine.close()
    assert result.text == "Hello." and result.finish_reason is FinishReason.STOP
    assert result.metrics.generated == 1  # counted here: the server's figures were nonsense


async def test_a_broken_stream_chunk_names_the_endpoint():
    routes = llama_server({"chat_template": "{{ messages[0].content }}"})
    routes["/v1/completions"] = sse("{oops", "[DONE]")
    with HostileServer(routes) as server:
        engine = ServerEngine.open(server_profile(server.url))
        try:
            ask = GenerationRequest(messages=(ChatMessage("user", "Hi."),), max_tokens=8)
            with pytest.raises(EngineError, match=r"/v1/completions: .*not JSON"):
                await engine.generate(ask)
        finally:
            engine.close()
