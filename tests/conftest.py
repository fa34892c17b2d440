"""Shared fixtures: tiny real GGUF models (see tests/tiny_models.py) and an isolated home."""

from __future__ import annotations

import faulthandler
import functools
import hashlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Before any test module loads llama_cpp: the engine package sets how llama.cpp's threads wait
# (engine/threads.py), which the OpenMP runtime reads once, when it loads.
import kotonia_tui.engine  # noqa: F401
from kotonia_tui.chat.fold.wait import Clock
from kotonia_tui.chat.service import ChatService
from kotonia_tui.config import Settings
from tests.fake_engine import Answer, open_fake_service
from tests.settings import engine_threads
from tests.tiny_models import write_tiny_llama, write_tiny_mmproj

_BYTECODE_CACHE = "KOTONIA_TEST_PYCACHE"  # set by the process that started the run
_CRASH_DUMPS = "KOTONIA_TEST_CRASHES"  # the folder where each worker's fatal-error dump goes
_crash_dump: Any = None  # this worker's dump file, open as long as the worker lives


def pytest_configure(config: pytest.Config) -> None:
    pin_time_zone()
    if not hasattr(config, "workerinput") and _CRASH_DUMPS not in os.environ:
        # Before pytest-xdist starts its workers, which inherit the folder's name.
        os.environ[_CRASH_DUMPS] = tempfile.mkdtemp(prefix="kotonia-test-crashes-")
    keep_bytecode()


def pin_time_zone() -> None:
    """The run's local time zone is UTC, whatever the machine's: a SillyTavern date without a
    zone is read as local time (chatfiles/sillytavern.py), so the tests that expect one in UTC
    hold on any machine, and `kotonia` subprocesses inherit it. A test of another zone uses
    `tests.zones.local_zone`, which puts this back."""
    os.environ["TZ"] = "UTC"
    time.tzset()


def keep_bytecode() -> None:
    """Where PYTHONDONTWRITEBYTECODE is set (this machine's image sets it), every `kotonia`
    subprocess and every pytest-xdist worker would compile the app's modules from source again:
    about 0.4 s of CPU each, hundreds of times a run. The run keeps their bytecode in one
    temporary folder of its own instead (removed at its end), so nothing is written beside the
    sources and each module is compiled once a run."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or _BYTECODE_CACHE in os.environ:
        return
    folder = tempfile.mkdtemp(prefix="kotonia-test-pycache-")
    os.environ[_BYTECODE_CACHE] = folder
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    sys.pycache_prefix = folder
    sys.dont_write_bytecode = False


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # the run's first process removes the run's folders, not a worker
    for name in (_BYTECODE_CACHE, _CRASH_DUMPS):
        if folder := os.environ.get(name):
            shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """A worker that dies in native code (a segfault in a library) takes its Python traceback
    with it: pytest-xdist says only "worker crashed", and the dump faulthandler writes to the
    worker's stderr scrolls far above the end of a CI log. Each worker writes its dump to a file
    of its own instead, and the first process prints them at the end of the run."""
    global _crash_dump
    folder, worker = os.environ.get(_CRASH_DUMPS), os.environ.get("PYTEST_XDIST_WORKER")
    if folder and worker:
        _crash_dump = open(Path(folder) / f"{worker}.txt", "a", encoding="utf-8")  # noqa: SIM115
        faulthandler.enable(file=_crash_dump, all_threads=True)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any) -> None:
    folder = os.environ.get(_CRASH_DUMPS)
    if not folder or "PYTEST_XDIST_WORKER" in os.environ:
        return
    for dump in sorted(Path(folder).glob("*.txt")):
        if text := dump.read_text(encoding="utf-8", errors="replace").strip():
            terminalreporter.section(f"fatal error in worker {dump.stem}", sep="!")
            terminalreporter.line("\n".join(_condensed(text)))


_RUNNER_FRAMES = ("/_pytest/", "/pluggy/", "/xdist/", "/execnet/", 'File "<string>"')


def _condensed(dump: str, frames: int = 8) -> Iterator[str]:
    """A faulthandler dump with each thread's innermost frames of its own (the test runner's
    are left out): short enough to stay in the tail of a CI log."""
    kept = 0
    for line in dump.splitlines():
        if line.startswith("Extension modules:"):
            continue
        if not line.startswith("  File "):
            kept = 0
            yield line
        elif kept < frames and not any(mark in line for mark in _RUNNER_FRAMES):
            kept += 1
            yield line


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `slow` run first, the rest keep their order. pytest-xdist's worksteal hands
    each worker a contiguous half of this list and, at the end, lets an idle worker take the
    pending tests of the other: a test of 20-80 s that starts late leaves one core idle while
    it runs, one that starts first is spread over by the short tests on the other core."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # a stable sort


@pytest.fixture(autouse=True)
def kotonia_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own KOTONIA_HOME, so no test touches the real config or data.

    Tests create the app's folders and files with the umask the app itself runs with (077,
    see cli.main), so a `kotonia` subprocess finds them private and has nothing to tighten.
    The app's engines run `engine_threads()` threads (KOTONIA_THREADS, read by the settings in
    this process and in `kotonia` subprocesses): the workers that run tests side by side share
    the cores instead of each taking them all.

    Semantic recall is off (KOTONIA_SEMANTIC_RECALL): on, every test that opens the app would
    convert and load the shipped embedding model and embed its messages beside the model
    under test. The tests of semantic recall turn it on (tests/settings.py does when a test
    names an embedding model; tests/engine/test_default_embedding.py for the shipped one).
    """
    home = tmp_path / "kotonia_home"
    home.mkdir()
    monkeypatch.setenv("KOTONIA_HOME", str(home))
    monkeypatch.setenv("KOTONIA_THREADS", str(engine_threads()))
    monkeypatch.setenv("KOTONIA_SEMANTIC_RECALL", "false")
    umask = os.umask(0o077)
    try:
        yield home
    finally:
        os.umask(umask)


@pytest.fixture(autouse=True)
def ctrl_c_handler_kept() -> Iterator[None]:
    """A test that leaves Ctrl-C ignored in its worker makes every `kotonia` child that worker
    starts later ignore it too (a child inherits an ignored SIGINT, and asyncio then installs
    no handler): the test that does it fails here, named, and the handler is put back."""
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"this test left the SIGINT handler changed: {before!r} became {after!r}")


@pytest.fixture(scope="session")
def tiny_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny_models")


@pytest.fixture(scope="session")
def tiny_model_path(tiny_models_dir: Path) -> Path:
    """Random-weight llama GGUF (n_embd 64, 2 layers, n_ctx 2048, chat template, BOS/EOS)."""
    return write_tiny_llama(tiny_models_dir / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def tiny_eos_model_path(tiny_models_dir: Path) -> Path:
    """Same shape, but </s> wins greedy decoding at once: finish_reason "stop" after 0 tokens."""
    return write_tiny_llama(tiny_models_dir / "tiny-llama-eos.gguf", eos_bias=20.0)


@pytest.fixture(scope="session")
def tiny_mmproj_path(tiny_models_dir: Path) -> Path:
    """mlp (llava) mmproj fitting tiny_model_path: a 32x32 image becomes 16 tokens."""
    return write_tiny_mmproj(tiny_models_dir / "tiny-mmproj.gguf", text_n_embd=64)


@pytest.fixture(scope="session")
def tiny_misfit_mmproj_path(tiny_models_dir: Path) -> Path:
    """mmproj whose output width (32) does not fit the 64-wide tiny model."""
    return write_tiny_mmproj(tiny_models_dir / "tiny-mmproj-misfit.gguf", text_n_embd=32)


@pytest.fixture(scope="session")
def tiny_noeos_model_path(tiny_models_dir: Path) -> Path:
    """Same shape, </s> suppressed: sampling never stops naturally (always "length")."""
    return write_tiny_llama(tiny_models_dir / "tiny-llama-noeos.gguf", eos_bias=-30.0)


def write_tiny_embedding(path: Path, n_embd: int = 64) -> Path:
    """A random-weight llama GGUF declaring mean pooling: llama.cpp loads it as an embedding
    model (one vector per text). Its vectors carry no meaning; the same text always gets the
    same vector, and a text nearly the same gets a nearly equal one."""
    return write_tiny_llama(
        path,
        n_embd=n_embd,
        chat_template=None,
        name="tiny-embed",
        metadata={"llama.pooling_type": 1},
    )


@pytest.fixture(scope="session")
def tiny_embedding_path(tiny_models_dir: Path) -> Path:
    """Tiny embedding model: 64-dimensional vectors (see write_tiny_embedding)."""
    return write_tiny_embedding(tiny_models_dir / "tiny-embed-64.gguf")


@pytest.fixture(scope="session")
def tiny_embedding_32_path(tiny_models_dir: Path) -> Path:
    """Another tiny embedding model, 32-dimensional: a model change with another dimension."""
    return write_tiny_embedding(tiny_models_dir / "tiny-embed-32.gguf", n_embd=32)


@pytest.fixture(scope="session")
def scripted_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Factory: ``scripted_model(text)`` is the path of a tiny llama GGUF whose greedy reply to
    ANY prompt is exactly ``text`` followed by ``</s>`` (finish_reason "stop"); see
    ``write_scripted_llama`` in tests/tiny_models.py. Written once per text per session."""
    directory = tmp_path_factory.mktemp("scripted_models")
    cache: dict[str, Path] = {}

    def make(text: str) -> Path:
        if text not in cache:
            digest = hashlib.sha256(text.encode()).hexdigest()[:16]
            cache[text] = write_tiny_llama(directory / f"scripted-{digest}.gguf", script=text)
        return cache[text]

    return make


SETTLED_POLL_S = 0.02


@pytest.fixture
async def make_fake_service() -> AsyncIterator[Callable[..., Any]]:
    """Like `make_service`, on the fake engine (tests/fake_engine.py): `make(settings, answer,
    db=None, clock=None)`."""
    opened: list[ChatService] = []

    async def make(
        settings: Settings, answer: Answer, db: Path | None = None, clock: Clock | None = None
    ) -> ChatService:
        service = open_fake_service(settings, answer, db=db, clock=clock)
        # The fake folds in milliseconds: a test waiting for the folds looks every 20 ms, not
        # every 200 (the worker's default, for scripts waiting on a real model).
        service.worker.wait_settled = functools.partial(  # type: ignore[method-assign]
            service.worker.wait_settled, poll_s=SETTLED_POLL_S
        )
        await service.start()
        opened.append(service)
        return service

    yield make
    for service in opened:
        await service.close()
