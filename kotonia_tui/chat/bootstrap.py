"""Opening everything a session needs: settings -> store, character library, engine, service.

The service and the memory code are imported where they are used, not at the top: a listing,
an import or an export opens only the store and the cards, and a `kotonia conversations`
process should not spend half its start importing the turn machinery it never runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from kotonia_tui.chat.library import CharacterLibrary, shipped_characters_dir
from kotonia_tui.config import AppDirs, Settings, app_dirs
from kotonia_tui.engine.state_cache import FOLDER_NAME, StateCacheConfig
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.store import Store

if TYPE_CHECKING:
    from kotonia_tui.chat.memory_snapshot import LedgerFitter
    from kotonia_tui.chat.service import ChatService
    from kotonia_tui.domain import StoredLedgerEntry
    from kotonia_tui.engine import Engine
    from kotonia_tui.engine.default_model import Progress
    from kotonia_tui.memory.ledger import LedgerFit

FOLD_PROMPT_OVERHEAD = 1024  # the chronicler's instructions and the chapter header


def open_store(
    settings: Settings,
    db: Path | None = None,
    dirs: AppDirs | None = None,
    *,
    read_only: bool = False,
) -> Store:
    return Store.open(db or settings.db_path(dirs or app_dirs()), read_only=read_only)


def open_library(settings: Settings, dirs: AppDirs | None = None) -> CharacterLibrary:
    dirs = dirs or app_dirs()
    return CharacterLibrary([shipped_characters_dir(), settings.user_characters_dir(dirs)])


def fold_context_size(settings: Settings, n_ctx: int, reply_reserve: int) -> int:
    """The fold slot holds one chapter's source, the instructions and the summary's ceiling."""
    budgets = Budgets.for_window(n_ctx, reply_reserve, settings)
    wanted = budgets.chapter_source + budgets.summary_max_tokens + FOLD_PROMPT_OVERHEAD
    return min(n_ctx, wanted)


def state_cache_config(settings: Settings, dirs: AppDirs | None = None) -> StateCacheConfig:
    """Where the saved KV states go, their cap, and the profile they are saved for."""
    return StateCacheConfig(
        folder=(dirs or app_dirs()).cache / FOLDER_NAME,
        cap_bytes=settings.state_cache_mb << 20,
        profile=settings.profile,
    )


def open_engine(settings: Settings, progress: Progress | None = None) -> Engine:
    profile = settings.active_profile()
    states = state_cache_config(settings)

    def fold_ctx_for(n_ctx: int) -> int:
        # Sized from the window the engine ends up with (a server's may differ from the
        # profile's).
        return fold_context_size(settings, n_ctx, profile.reply_max_tokens)

    # The backend is imported here, not at the top: llama_cpp (with numpy) or httpx load when a
    # model is opened, so nothing that only reads cards or the database waits for them.
    if profile.backend == "server":
        from kotonia_tui.engine.schema_grammar import schema_grammar
        from kotonia_tui.engine.server.engine import ServerEngine

        return ServerEngine.open(
            profile, fold_ctx_for=fold_ctx_for, states=states, schema_grammar=schema_grammar
        )
    from kotonia_tui.engine.llama_engine import LlamaEngine

    return LlamaEngine.open(
        profile,
        cache_dir=app_dirs().cache,
        progress=progress,
        fold_ctx_for=fold_ctx_for,
        states=states,
    )


@contextmanager
def ledger_fitter(settings: Settings) -> Iterator[LedgerFitter]:
    """Fits a live ledger to its share of the window as a turn of this profile would, opening
    the model's vocabulary (or the server) only when first asked: a command that finds no
    landed memory to fit never loads anything."""
    from kotonia_tui.memory.ledger import LedgerFit, fit_ledger, render_ledger

    profile = settings.active_profile()
    opened: list[Callable[[], None]] = []
    counter: list[tuple[Callable[[str], int], int]] = []

    def count_and_window() -> tuple[Callable[[str], int], int]:
        if counter:
            return counter[0]
        if profile.backend == "server":
            engine = open_engine(settings)
            opened.append(engine.close)
            counter.append((engine.count_tokens, engine.n_ctx))
        else:
            from kotonia_tui.engine.default_model import default_model_path
            from kotonia_tui.engine.vocab import VocabCounter

            path = profile.model_path or default_model_path(app_dirs().cache)
            vocab = VocabCounter(path)
            opened.append(vocab.close)
            counter.append((vocab.count_tokens, profile.n_ctx))
        return counter[0]

    def fit(live: Sequence[StoredLedgerEntry]) -> LedgerFit:
        if profile.backend != "server":
            budget = Budgets.for_window(profile.n_ctx, profile.reply_max_tokens, settings).ledger
            # A token holds at least one byte of the text (no BOS is counted), so a ledger of
            # no more bytes than its budget fits without opening the vocabulary.
            if len(render_ledger(live).encode("utf-8")) <= budget:
                return LedgerFit(tuple(live), ())
        count, n_ctx = count_and_window()
        budget = Budgets.for_window(n_ctx, profile.reply_max_tokens, settings).ledger
        return fit_ledger(live, budget, count)

    try:
        yield fit
    finally:
        for close in opened:
            close()


def open_service(
    settings: Settings,
    *,
    db: Path | None = None,
    progress: Progress | None = None,
) -> ChatService:
    """Open the store, the cards and the model (blocking: call from a worker in a UI)."""
    from kotonia_tui.chat.semantic import SemanticRecall
    from kotonia_tui.chat.service import ChatService

    store = open_store(settings, db)
    try:
        library = open_library(settings)
        engine = open_engine(settings, progress)
    except BaseException:
        store.close()
        raise
    try:
        semantic = SemanticRecall.from_settings(store, settings, progress)
    except BaseException:
        engine.close()
        store.close()
        raise
    return ChatService(settings, store, engine, library, semantic)
