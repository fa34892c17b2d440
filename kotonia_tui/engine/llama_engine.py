"""The in-process engine: one llama.cpp model, two KV slots, an owner thread, async streams.

Public surface: `LlamaEngine.open(profile, cache_dir)`, `start(request) -> EngineCall`,
`generate(request)`, `count_tokens(text)`, `count_tokens_many(texts)`, `prompt_cells(request)`,
`image_cells(image)`, `info`, `close()` (what it shares with the server backend is in
`engine/base.py`), and `settle(request, after)`, `restore(request)` for the saved KV states
(`engine/llama_states.py`). Everything that touches the model runs on the owner thread;
tokenizing only reads the vocabulary, so `count_tokens` runs on the caller's thread, even
while a reply streams.
"""

from __future__ import annotations

import ctypes
import logging
import random
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import llama_cpp
from llama_cpp import _internals as internals
from llama_cpp import llama_chat_format

from kotonia_tui.config import ModelProfile
from kotonia_tui.engine import native_logs
from kotonia_tui.engine.base import EngineBase, call_metrics, fold_window
from kotonia_tui.engine.calls import EngineCall, EngineInfo, queue_call
from kotonia_tui.engine.default_model import Progress, default_model_path
from kotonia_tui.engine.errors import (
    EngineClosedError,
    ImageError,
    ModelFileError,
    PromptTooLongError,
)
from kotonia_tui.engine.formats import RenderedPrompt, make_formatter, render_request
from kotonia_tui.engine.grammar_sampler import GrammarSampler
from kotonia_tui.engine.items import (
    ImageItem,
    PromptItem,
    cells_of,
    item_cells,
)
from kotonia_tui.engine.kv_slot import KvSlot
from kotonia_tui.engine.llama_states import SavedStates
from kotonia_tui.engine.model_files import check_context, check_gguf, model_facts
from kotonia_tui.engine.multimodal import Projector
from kotonia_tui.engine.native_logs import quiet_python_prints
from kotonia_tui.engine.owner import OwnerThread
from kotonia_tui.engine.resume import Resumer
from kotonia_tui.engine.sampling import Sampling
from kotonia_tui.engine.state_cache import StateCache, StateCacheConfig
from kotonia_tui.engine.state_file import StateKey, fingerprint
from kotonia_tui.engine.streaming import ReplyText, Utf8Stream
from kotonia_tui.engine.threads import usable_cores
from kotonia_tui.engine.types import (
    FinishReason,
    GenerationRequest,
    GenerationResult,
    ImageInput,
    Priority,
    Slot,
    StreamEvent,
    Work,
)
from kotonia_tui.engine.weight_layout import plain_weights_on_amx

log = logging.getLogger(__name__)

# A prewarm whose prompt the chat context already holds but for this many cells is skipped.
PREWARM_MIN_GAIN = 32


def gpu_offload_supported() -> bool:
    return bool(llama_cpp.llama_supports_gpu_offload())


def llama_cpp_version() -> str:
    return str(getattr(llama_cpp, "__version__", "unknown"))


def token_piece(vocab: llama_cpp.llama_vocab_p, token: int, *, special: bool = False) -> bytes:
    """The bytes of one token (llama-cpp-python's wrapper returns its whole padded buffer)."""
    size = 64
    while True:
        buffer = ctypes.create_string_buffer(size)
        written = llama_cpp.llama_token_to_piece(vocab, token, buffer, size, 0, special)
        if written >= 0:
            return buffer.raw[:written]
        size = -written  # a negative count is the size the piece needs


class _UnusedChatHandler:
    """Stands in for llama-cpp-python's own chat handlers, which Kotonia never calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def to_chat_handler(self) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("Kotonia renders chat templates itself (engine/formats.py)")

        return refuse


@contextmanager
def _templates_left_alone() -> Iterator[None]:
    """Load a model without llama-cpp-python compiling the chat templates in its file.

    `Llama()` builds a chat handler from every template it finds, in a stock Jinja sandbox
    whose optimizer folds constant expressions at compile time: a template holding
    `{{ 9 ** 99999999 }}` or a folded `join` of gigabytes stalled or killed the process while
    loading. Kotonia renders templates itself, with limits (formats.py), so those handlers are
    never used; they are not built. Only the owner thread loads models.
    """
    original = llama_chat_format.Jinja2ChatFormatter
    llama_chat_format.Jinja2ChatFormatter = _UnusedChatHandler  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        llama_chat_format.Jinja2ChatFormatter = original  # type: ignore[misc]


class LlamaEngine(SavedStates, EngineBase):
    """One model in-process. Create with `open`; close when done."""

    def __init__(
        self,
        profile: ModelProfile,
        *,
        model_path: Path,
        fold_ctx_for: Callable[[int], int] | None,
        states: StateCacheConfig | None = None,
    ) -> None:
        self.profile = profile
        self._model_path = model_path
        self._fold_ctx_for = fold_ctx_for
        self._states = states
        self._resumer: Resumer | None = None  # set by _load when saved states are on
        self._owner = OwnerThread()
        # Token counts run on any thread (lorebook matching counts on a worker thread); the
        # model is freed only when none is in flight, and none starts after.
        self._tokenizer_lock = threading.Lock()
        self._llama: llama_cpp.Llama | None = None
        self._slots: dict[Slot, KvSlot] = {}
        self._work: dict[Slot, Work] = {}
        self._projector: Projector | None = None
        self._image_cells: dict[str, int] = {}
        self._shown_specials: frozenset[int] = frozenset()
        self._stable: dict[tuple[str, ...], tuple[PromptItem, ...]] = {}  # setup prefixes
        self.info: EngineInfo

    # ---- loading -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        profile: ModelProfile,
        *,
        cache_dir: Path,
        progress: Progress | None = None,
        fold_ctx_for: Callable[[int], int] | None = None,
        states: StateCacheConfig | None = None,
    ) -> LlamaEngine:
        """Resolve, check and load the model (blocking; call it from a worker thread in a UI).

        `fold_ctx_for(n_ctx)` sizes the fold slot from the window (default: the whole window);
        `states` says where the chat context's saved KV states live (None: nothing is saved).
        """
        native_logs.install()
        if profile.model_path is None:
            model_path = default_model_path(cache_dir, progress)
        else:
            model_path = profile.model_path
        # The header is checked before llama.cpp reads it: some values abort the process.
        facts = model_facts(model_path, check_gguf(model_path, "model"))
        check_context(facts, profile.n_ctx)
        if profile.mmproj_path is not None:
            check_gguf(profile.mmproj_path, "mmproj")
        engine = cls(profile, model_path=model_path, fold_ctx_for=fold_ctx_for, states=states)
        if progress is not None:
            progress(f"loading {model_path.name}", 0, 1)
        try:
            engine._owner.call(engine._load).result()
        except BaseException:
            engine.close()
            raise
        if progress is not None:
            progress(f"loaded {model_path.name}", 1, 1)
        return engine

    def _load(self) -> None:
        profile = self.profile
        started = time.perf_counter()
        threads = profile.threads or usable_cores()
        gpu = gpu_offload_supported()
        n_gpu_layers = profile.n_gpu_layers
        if n_gpu_layers is None:
            n_gpu_layers = -1 if gpu else 0
        try:
            # verbose=True, because verbose=False makes llama-cpp-python point the process's
            # file descriptors 1 and 2 at /dev/null while the model loads: a TUI drawing on
            # the terminal then loses every frame of that moment (the picker stayed blank
            # until a key was pressed). llama.cpp's own logs already go to the log file
            # (native_logs); the library's Python prints go there too, not to the terminal.
            with _templates_left_alone(), quiet_python_prints(), plain_weights_on_amx() as plain:
                llama = llama_cpp.Llama(
                    model_path=str(self._model_path),
                    n_ctx=profile.n_ctx,
                    n_gpu_layers=n_gpu_layers,
                    n_threads=threads,
                    n_threads_batch=threads,
                    n_batch=512,
                    seed=profile.seed if profile.seed is not None else random.randrange(2**31),
                    verbose=True,
                )
            llama.verbose = False  # later calls print nothing (their prints need no redirect)
            if plain:
                log.info("weights kept in the plain CPU layout: llama.cpp's AMX repacking crashes")
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelFileError(
                f"{self._model_path}: llama.cpp could not load this model ({exc}); check that "
                "it is a complete GGUF for a supported architecture"
            ) from exc
        self._llama = llama
        if profile.mmproj_path is not None:
            self._projector = Projector(
                profile.mmproj_path, llama.model, n_threads=threads, model_path=self._model_path
            )
        n_swa = int(llama_cpp.llama_model_n_swa(llama.model))
        self._slots[Slot.CHAT] = KvSlot(
            llama._ctx, n_batch=llama.n_batch, projector=self._projector, n_swa=n_swa
        )
        if self._states is not None and self._states.cap_bytes > 0:
            self._resumer = Resumer(StateCache(self._states, self._state_key()), n_swa=n_swa)
            self._resumer.cache.evict()  # the cap may have been lowered since the last run
        # A converter that marks the thinking tags special makes them control tokens, which
        # print as nothing; printed as text, the reply's splitter can keep the reasoning apart.
        self._shown_specials = self._single_tokens(profile.reasoning_tags)
        metadata = llama.metadata
        template = metadata.get("tokenizer.chat_template")
        self._formatter = make_formatter(
            profile.prompt_format,
            chat_template=template,
            bos_token=self._piece(llama.token_bos()),
            eos_token=self._piece(llama.token_eos()),
            thinking=profile.thinking,
            reasoning_tags=profile.reasoning_tags,
            model_name=self._model_path.name,
        )
        n_ctx = int(llama.n_ctx())
        stat = self._model_path.stat()
        self.info = EngineInfo(
            model_path=self._model_path,
            model_name=metadata.get("general.name") or self._model_path.stem,
            model_key=f"{self._model_path.name}:{stat.st_size}",
            mmproj_path=profile.mmproj_path,
            n_ctx=n_ctx,
            n_ctx_train=int(llama._model.n_ctx_train()),
            fold_n_ctx=fold_window(n_ctx, self._fold_ctx_for),
            n_gpu_layers=n_gpu_layers,
            gpu_offload=gpu,
            threads=threads,
            prompt_format=profile.prompt_format,
            has_chat_template=bool(template),
            load_ms=(time.perf_counter() - started) * 1000,
            llama_cpp_version=llama_cpp_version(),
        )

    def _state_key(self) -> StateKey:
        """What the chat context's KV depends on besides its items (saved states' key)."""
        assert self._llama is not None and self._states is not None
        params = self._llama.context_params
        layout = ",".join(
            f"{name}={getattr(params, name, '')}"
            for name in ("flash_attn_type", "type_k", "type_v", "swa_full")
        )
        mmproj = self.profile.mmproj_path
        return StateKey(
            model=fingerprint(self._model_path),
            mmproj=fingerprint(mmproj) if mmproj is not None else "",
            profile=self._states.profile,
            llama_cpp=llama_cpp_version(),
            kv_layout=layout,
        )

    def _piece(self, token: int) -> str:
        assert self._llama is not None
        if token < 0:
            return ""
        return token_piece(self._llama._model.vocab, token, special=True).decode("utf-8", "replace")

    def _single_tokens(self, texts: tuple[str, ...]) -> frozenset[int]:
        """The ids of those `texts` that are one token each in this vocabulary."""
        assert self._llama is not None
        ids = (self._llama._model.tokenize(t.encode("utf-8"), False, True) for t in texts if t)
        return frozenset(tokens[0] for tokens in ids if len(tokens) == 1)

    def _slot(self, slot: Slot) -> KvSlot:
        if slot not in self._slots:
            # The fold slot is a second context on the same weights: folding never evicts the
            # chat's KV cache, so the turn after a fold still evaluates only its new tokens.
            assert self._llama is not None
            params = llama_cpp.llama_context_default_params()
            base = self._llama.context_params
            for name in ("n_batch", "n_ubatch", "n_threads", "n_threads_batch", "flash_attn_type"):
                if hasattr(base, name):
                    setattr(params, name, getattr(base, name))
            params.n_ctx = self.info.fold_n_ctx if slot is Slot.FOLD else self.info.n_ctx
            ctx = internals.LlamaContext(model=self._llama._model, params=params, verbose=False)
            self._slots[slot] = KvSlot(
                ctx,
                n_batch=self._llama.n_batch,
                projector=self._projector,
                n_swa=self._slots[Slot.CHAT].n_swa,
            )
        return self._slots[slot]

    # ---- properties -----------------------------------------------------------------------

    @property
    def has_vision(self) -> bool:
        return self._projector is not None

    @property
    def busy(self) -> bool:
        return self._owner.busy

    # ---- tokens ---------------------------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        """Exact token count of `text` as it appears inside a prompt (no BOS added)."""
        if not text:
            return 0
        with self._tokenizer_lock:
            if self._llama is None:
                raise EngineClosedError("the model was closed")
            return len(self._llama._model.tokenize(text.encode("utf-8"), False, True))

    def image_cells(self, image: ImageInput) -> int:
        """KV cells an image takes in a prompt (0 without a projector: it is not sent)."""
        if self._projector is None:
            return 0
        if image.key not in self._image_cells:
            projector = self._projector
            cells = self._owner.call(lambda: projector.image_cells(image)).result()
            self._image_cells[image.key] = cells
        return self._image_cells[image.key]

    def render(self, request: GenerationRequest) -> RenderedPrompt:
        return render_request(self._formatter, request)

    def prompt_cells(self, request: GenerationRequest) -> int:
        """Exact KV cells the request's prompt takes (text tokens + image cells)."""
        rendered = self.render(request)
        if not rendered.images or self._projector is None:
            return len(self._tokenize_prompt_text(rendered.text))
        projector = self._projector

        def count() -> int:
            with projector.tokenize(rendered.text, rendered.images) as items:
                return sum(item_cells(i) for i in items)

        # The projector lives on the owner thread; this waits for at most one model step.
        return int(self._owner.call(count).result())

    def _tokenize_prompt_text(self, text: str) -> list[int]:
        assert self._llama is not None
        tokens: list[int] = self._llama._model.tokenize(text.encode("utf-8"), True, True)
        return tokens

    # ---- generation -----------------------------------------------------------------------

    def start(self, request: GenerationRequest) -> EngineCall:
        """Start a call; must be called from a running asyncio loop."""
        return queue_call(
            self._owner, lambda call: self._generate(request, call), priority=int(request.priority)
        )

    def _generate(
        self, request: GenerationRequest, call: EngineCall
    ) -> Generator[StreamEvent | None, None, GenerationResult]:
        assert self._llama is not None
        rendered = self.render(request)
        with self._items_of(rendered) as items:
            slot = self._choose_slot(request.slot, items)
            # Esc while the prompt is read stops between two of its batches, not after the
            # whole prompt (a 4,000-token prompt is minutes on a loaded 2-core machine);
            # sampling then ends at once, cancelled, with nothing written.
            stats = yield from self._prefill(slot, items, request, stop=call.cancel_flag.is_set)
        if request.prefill_only:
            metrics = call_metrics(request, FinishReason.STOP, **stats)
            result = GenerationResult("", "", FinishReason.STOP, metrics)
            yield result
            return result
        result = yield from self._sample(slot, rendered, request, call, stats)
        return result

    @contextmanager
    def _items_of(self, rendered: RenderedPrompt) -> Iterator[list[PromptItem]]:
        """The prompt's items: text tokens, and image chunks valid inside the block (they
        point into mtmd's buffers). Owner thread only when there are images."""
        if not rendered.images:
            yield list(self._tokenize_prompt_text(rendered.text))
            return
        if self._projector is None:
            raise ImageError(
                "this model has no vision projector (mmproj_path), so it cannot see images"
            )
        with self._projector.tokenize(rendered.text, rendered.images) as items:
            yield items

    def _choose_slot(self, wanted: Slot, items: list[PromptItem]) -> KvSlot:
        """A chat call takes the prewarmed context when it shares the longer prefix."""
        if wanted is Slot.CHAT and Slot.PREWARM in self._slots:
            chat, spare = self._slots[Slot.CHAT], self._slots[Slot.PREWARM]
            if spare.common_prefix_cells(items) > chat.common_prefix_cells(items):
                self._slots[Slot.CHAT], self._slots[Slot.PREWARM] = spare, chat
        return self._slot(wanted)

    def prewarm(self, request: GenerationRequest) -> EngineCall:
        """Evaluate a prompt the next chat call is expected to start with, in the background.

        It runs before background folds. A chat call that arrives first does not redo it: a
        prewarm part way through is taken over by the chat call (which keeps what it has
        evaluated, see KvSlot), and a prewarm that finds the chat context already holding its
        prompt evaluates nothing.
        """
        return self.start(
            replace(
                request,
                slot=Slot.PREWARM,
                priority=Priority.PREWARM,
                prefill_only=True,
            )
        )

    def _prefill(
        self,
        slot: KvSlot,
        items: list[PromptItem],
        request: GenerationRequest,
        stop: Callable[[], bool] | None = None,
    ) -> Generator[None, None, dict[str, Any]]:
        """Evaluate the prompt into the slot, from a saved state when one gives it a longer
        prefix than the slot holds; returns its figures (`call_metrics` fields)."""
        cells = cells_of(items)
        if cells + request.max_tokens > slot.n_ctx:
            raise PromptTooLongError(cells, request.max_tokens, slot.n_ctx)
        images = sum(1 for i in items if isinstance(i, ImageItem))
        chat = self._slots.get(Slot.CHAT)
        if request.prefill_only and chat is not None and chat is not slot:
            held = chat.common_prefix_cells(items)
            if cells - held <= PREWARM_MIN_GAIN:
                # The chat context already holds this prompt (the turn it was for came first):
                # nothing to evaluate, and no saved state to read for it.
                return {
                    "positions": cells,
                    "reused": held,
                    "evaluated": 0,
                    "prompt_ms": 0.0,
                    "images": images,
                }
        started = time.perf_counter()  # a state read from disk counts in the prompt's time
        mark: int | None = None
        on_mark: Callable[[], None] | None = None
        resumer, ref = self._resumer, request.state
        if resumer is not None and ref is not None and request.slot is not Slot.FOLD:
            setup = self._setup_state(request, items)
            if slot.state_name != ref.name:
                names = [ref.name] + ([setup[0]] if setup is not None else [])
                resumer.restore(slot, items, names)
            slot.state_name = ref.name
            if setup is not None and not resumer.setup_saved(setup[0]):
                name, mark = setup[0], len(setup[1])

                def on_mark() -> None:
                    resumer.save_setup(slot, name)

        def evaluated(cells: int) -> None:
            self._add_work(request.slot, evaluated=cells)

        stats = yield from slot.prefill(
            items, mark=mark, on_mark=on_mark, on_evaluated=evaluated, stop=stop
        )
        return {
            "positions": stats.prompt_cells,
            "reused": stats.reused,
            "evaluated": stats.evaluated,
            "prompt_ms": (time.perf_counter() - started) * 1000,
            "images": images,
            "restored": stats.restored,
        }

    def _sampler(self, sampling: Sampling) -> internals.LlamaSampler | GrammarSampler:
        """The sampler chain; under a JSON schema, checked by its grammar token by token (the
        reply is well-formed JSON when the model ends it: it can end only at the root)."""
        assert self._llama is not None
        sampler = internals.LlamaSampler()
        sampler.add_penalties(
            n_vocab=self._llama.n_vocab(),
            penalty_last_n=sampling.repeat_last_n,
            penalty_repeat=sampling.repeat_penalty,
            penalty_freq=0.0,
            penalty_present=0.0,
        )
        if sampling.greedy:
            sampler.add_greedy()
        else:
            if sampling.top_k > 0:
                sampler.add_top_k(sampling.top_k)
            sampler.add_top_p(sampling.top_p, 1)
            sampler.add_min_p(sampling.min_p, 1)
            sampler.add_temp(sampling.temperature)
            seed = sampling.seed if sampling.seed is not None else random.randrange(2**31)
            sampler.add_dist(seed)
        if sampling.json_schema is not None:
            return GrammarSampler(sampler, self._llama._model, sampling.json_schema)
        return sampler

    def _sample(
        self,
        slot: KvSlot,
        rendered: RenderedPrompt,
        request: GenerationRequest,
        call: EngineCall,
        stats: dict[str, Any],
    ) -> Generator[StreamEvent | None, None, GenerationResult]:
        assert self._llama is not None
        vocab = self._llama._model.vocab
        sampler = self._sampler(Sampling.of(self.profile, request))
        utf8 = Utf8Stream()
        reply = ReplyText(
            stops=tuple(rendered.stops) + tuple(request.extra_stops),
            reasoning_tags=self.profile.reasoning_tags,
            starts_in_reasoning=rendered.starts_in_reasoning,
            continues=bool(request.prefill),
        )
        started = time.perf_counter()
        generated = 0
        finish = FinishReason.STOP
        try:
            while True:
                if call.cancel_flag.is_set():
                    finish = FinishReason.CANCELLED
                    break
                token = sampler.sample(slot.ctx)
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    break
                generated += 1
                call.tokens_generated = generated
                self._add_work(request.slot, generated=1)
                piece = token_piece(vocab, token, special=token in self._shown_specials)
                for event in reply.events(utf8.feed(piece)):
                    yield event
                if reply.stops.stopped_by is not None:
                    break
                if generated >= request.max_tokens or slot.cells + 1 > slot.n_ctx:
                    finish = FinishReason.LENGTH
                    break
                slot.accept(token)
                yield None  # a step boundary: cancel and more urgent calls are checked here
        finally:
            sampler.close()
        for event in reply.events(utf8.flush(), final=True):
            yield event
        gen_ms = (time.perf_counter() - started) * 1000
        metrics = call_metrics(request, finish, generated=generated, gen_ms=gen_ms, **stats)
        result = GenerationResult(
            text=reply.text,
            reasoning=reply.reasoning,
            finish_reason=finish,
            metrics=metrics,
            stop_string=reply.stops.stopped_by,
        )
        # Before the result goes out: a settle asked for on seeing it checks that nothing
        # touched the context since.
        call.slot_version = slot.version
        yield result
        return result

    # ---- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        def release() -> None:
            own = self._llama._ctx if self._llama is not None else None
            for slot in self._slots.values():
                slot.close(context_too=slot.ctx is not own)
            self._slots.clear()
            if self._projector is not None:
                self._projector.close()
                self._projector = None
            with self._tokenizer_lock:
                if self._llama is not None:
                    self._llama.close()
                    self._llama = None

        self._save_before_closing()
        # Calls still running are stopped first; the model is released last, on its thread.
        self._owner.close(final=release)
        if self._resumer is not None:
            self._resumer.cache.close()  # the writes already asked for finish
