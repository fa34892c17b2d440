"""Real inference servers for the server-backend tests: llama-cpp-python's own server
(`python -m llama_cpp.server`) on the tiny GGUF models, on a free loopback port.

Each server is a subprocess; the fixture waits (bounded) until `/v1/models` answers and kills
it at teardown. The model alias is fixed ("tiny"), so a server restarted on the same port with
another model file looks like the same model to the client.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kotonia_tui.config import ModelProfile, PromptFormat, Settings, app_dirs, load_settings
from kotonia_tui.engine import LlamaEngine
from tests.chat.conftest import make_service  # noqa: F401  (a fixture the tests here use)
from tests.settings import engine_threads
from tests.tiny_models import write_tiny_llama

pytest.importorskip("uvicorn", reason="llama-cpp-python's server extra is not installed")

CHAPTER = "Ann visited Wren at the lighthouse and they talked about the storm lamps."
START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TinyServer:
    """One llama-cpp-python server process; `start` again (same port) after `kill`."""

    def __init__(self, model: Path, port: int | None = None) -> None:
        self.model = model
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, model: Path | None = None) -> TinyServer:
        self.model = model or self.model
        command = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model),
            "--model_alias",
            "tiny",
            "--n_ctx",
            "2048",
            # One thread: llama.cpp's threads spin while they wait, and on a small machine a
            # second one starves the test process that reads the stream.
            "--n_threads",
            "1",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the test server exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/v1/models", timeout=1) as response:
                    json.loads(response.read())
                return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"the test server did not answer within {START_TIMEOUT_S} s")

    def kill(self) -> None:
        """SIGKILL: the server dies as a crashed one would, mid-stream if it is streaming."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None


@pytest.fixture(scope="session")
def scripted_model_file(tiny_models_dir: Path) -> Path:
    """Greedy output is exactly CHAPTER: replies and chronicler chapters are known text."""
    return write_tiny_llama(tiny_models_dir / "tiny-scripted-server.gguf", script=CHAPTER)


@pytest.fixture(scope="session")
def scripted_server(scripted_model_file: Path) -> Iterator[TinyServer]:
    server = TinyServer(scripted_model_file).start()
    yield server
    server.kill()


@pytest.fixture(scope="session")
def noeos_server(tiny_noeos_model_path: Path) -> Iterator[TinyServer]:
    """Never stops by itself: every reply runs to its cap (long enough to cancel)."""
    server = TinyServer(tiny_noeos_model_path).start()
    yield server
    server.kill()


@pytest.fixture
def own_server(tiny_noeos_model_path: Path) -> Iterator[TinyServer]:
    """A server this test may kill and restart."""
    server = TinyServer(tiny_noeos_model_path).start()
    yield server
    server.kill()


def server_profile(url: str, **values: Any) -> ModelProfile:
    values.setdefault("n_ctx", 1024)
    values.setdefault("temperature", 0.0)
    values.setdefault("reply_max_tokens", 32)
    values.setdefault("prompt_format", PromptFormat.TEMPLATE)
    values.setdefault("seed", 7)
    return ModelProfile(backend="server", server_url=url, **values)


def server_settings(url: str, **values: Any) -> Settings:
    """Settings whose active profile uses the server backend; profile fields go to the profile."""
    fields = set(ModelProfile.model_fields)
    profile = server_profile(url, **{k: v for k, v in values.items() if k in fields})
    rest = {k: v for k, v in values.items() if k not in fields}
    rest.setdefault("fold_delay_s", 0.0)
    rest.setdefault("prewarm_after_fold", False)
    return load_settings(profile="srv", profiles={"srv": profile}, **rest)


def write_server_config(url: str) -> None:
    """A config file whose active profile is the server at `url` (for `kotonia` commands)."""
    config = app_dirs().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        'profile = "srv"\n[profiles.srv]\nbackend = "server"\n'
        f'server_url = "{url}"\nprompt_format = "template"\n'
    )


@pytest.fixture
def local_tokenizer(scripted_model_file: Path) -> Iterator[LlamaEngine]:
    """The scripted model in-process: the counts the server's tokenizer must match."""
    profile = server_profile("unused", n_ctx=256).model_copy(
        update={
            "backend": "inprocess",
            "model_path": scripted_model_file,
            "threads": engine_threads(),
        }
    )
    engine = LlamaEngine.open(profile, cache_dir=scripted_model_file.parent)
    yield engine
    engine.close()


async def poll(predicate, timeout_s=15.0, step_s=0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(step_s)
    raise AssertionError("the condition never held")
