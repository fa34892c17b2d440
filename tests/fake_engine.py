"""An in-process fake of the `Engine` protocol, for chat and memory scenarios that do not depend
on the model: deterministic and instant.

What it models, and how:

* **Tokens.** A simple, stable tokenizer (`pieces`): a special marker (`<|user|>`, `<s>`,
  `</s>`), a run of up to six letters or digits with the space before it, one character of a
  script written without spaces (CJK, kana, Hangul), one mark, one space or line break: each is
  one token. That is about four characters a token in English, as real tokenizers give; the
  counts are the fake's own, never a real model's.
* **Prompts.** Rendered by the app's own formats (engine/formats.py): the tiny test models'
  chat template (tests/tiny_models.py) or the transcript. A prompt takes BOS and its pieces.
* **KV contexts.** Each slot (chat, fold, prewarm) holds the pieces of its last prompt and
  reply; a call evaluates only what differs from what its context holds (the `reused` and
  `evaluated` figures the real engine reports, the last piece evaluated again), a chat call
  takes the prewarmed context when that shares more with its prompt, a prewarm the chat context
  already holds is skipped, and a call whose context another call changed between two of its
  steps stops with `SlotTakenError`, as in engine/llama_engine.py and engine/kv_slot.py.
* **Calls.** Step generators on the real owner thread (engine/owner.py), so the priorities (a
  user turn before a prewarm before a fold), the one-call-at-a-time lock, cancellation within a
  token (and between two batches of a prompt) and the `work()` counters behave as in the real
  engine. A step evaluates `BATCH` pieces
  of a prompt, or writes one token. `on_step` (if set) hears each step, on the owner thread: a
  test that drives a clock makes a step cost clock time there; `hold(which)` makes the calls it
  picks take steps that do nothing (a stuck or very slow call) until `release`.
* **Answers.** Scripted: `answer(request)` is the text a call writes (by default one text for
  every prompt, as a scripted tiny GGUF). It streams a piece per token through the real
  engine's reply reader (stop strings, thinking tags), and is cut at `max_tokens` or at the
  window (finish "length") like a real reply. Under a JSON schema (a structured chapter) the
  answer is an instance of the schema, as a grammar makes it: a scripted JSON answer is made to
  conform to it (`conform`) and prose is put into its strings (`fill_schema`).
* **Saved states.** None are written or read. `settle` does what the real one does to the chat
  context (brings it to the history's stable prefix, at background priority, when no call used
  it since the turn) and saves nothing; `restore` answers at once and restores nothing. Both
  record the request they were given (`settled`, `restored`).

What it does not model: what a model writes (quality, sampling, temperature), images (there is
no projector), saved states on disk, and time (every step is instant).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kotonia_tui.config import ModelProfile, PromptFormat, Settings
from kotonia_tui.engine.base import EngineBase, call_metrics, fold_window
from kotonia_tui.engine.calls import EngineCall, EngineInfo, queue_call
from kotonia_tui.engine.errors import ImageError, PromptTooLongError, SlotTakenError
from kotonia_tui.engine.formats import RenderedPrompt, make_formatter, render_request
from kotonia_tui.engine.owner import OwnerThread
from kotonia_tui.engine.streaming import ReplyText
from kotonia_tui.engine.types import (
    ChatMessage,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    ImageInput,
    Priority,
    Slot,
    StreamEvent,
    Work,
)
from tests.tiny_models import DEFAULT_TEMPLATE

if TYPE_CHECKING:
    from kotonia_tui.chat.fold.wait import Clock
    from kotonia_tui.chat.service import ChatService

BATCH = 64  # prompt pieces evaluated per step (the real engine: 512 tokens per batch)
PREWARM_MIN_GAIN = 32  # as engine/llama_engine.py: a prewarm that would gain less is skipped
BOS, EOS = "<s>", "</s>"

_SPACELESS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_PIECE = re.compile(
    rf"<\|\w+\|>|</?s>|[{_SPACELESS}]| ?[^\W{_SPACELESS}]{{1,6}}| ?[^\w\s]|\s", re.UNICODE
)


def pieces(text: str) -> list[str]:
    """The fake tokenizer: `text` in tokens (every character belongs to exactly one)."""
    return _PIECE.findall(text)


Answer = Callable[[GenerationRequest], str]


def scripted(text: str) -> Answer:
    """Every call writes `text`, whatever the prompt (a scripted tiny GGUF does the same)."""
    return lambda _request: text


def by_kind(*, chat: str, chapter: str | None = None, prose: str | None = None) -> Answer:
    """One text for chat turns, one for structured chapters (JSON or prose put into the
    schema) and one for the chronicler's prose (synopsis); each defaults to `chat`."""

    def answer(request: GenerationRequest) -> str:
        if request.json_schema is not None:
            return chapter if chapter is not None else chat
        if request.slot is Slot.FOLD:
            return prose if prose is not None else chat
        return chat

    return answer


# ---- answers under a JSON schema (what a grammar makes of a model's words) ------------------


class SchemaMismatchError(AssertionError):
    """A scripted answer the fake cannot write under the request's schema (the grammar would
    need words the script does not give), or an answer that breaks it: the fake never pretends
    a model wrote what a grammar would not let through."""


def _ends_string(char: str) -> bool:
    # A string holds no quote, backslash or control character (memory/chapter_schema.py); a
    # model that writes a quote there closes the string.
    return char in '"\\' or ord(char) < 0x20


def _fits(value: str, schema: dict[str, Any]) -> bool:
    pattern = schema.get("pattern")
    if pattern is not None:
        # llama.cpp's converter follows the pattern and ignores maxLength when both are given.
        return re.fullmatch(pattern.removeprefix("^").removesuffix("$"), value) is not None
    return len(value) <= int(schema.get("maxLength", len(value)))


def fit_string(text: str, schema: dict[str, Any]) -> str:
    """`text` as a grammar lets it into a string of `schema`: up to the first character the
    string cannot hold, starting as the pattern demands (with a name it allows when it must
    start with one), written again while it is too short, and cut where it is too long."""
    if not (schema.get("pattern") or "").startswith("^ ?") and "maxLength" not in schema:
        raise SchemaMismatchError(f"the fake cannot fill this string schema: {schema}")
    pattern = schema.get("pattern", "")
    if pattern.startswith("^("):  # optional (in fact, because, time): a model may leave it
        return ""
    cut = next((i for i, char in enumerate(text) if _ends_string(char)), len(text))
    words = text[:cut].strip()
    while words and not words[0].isalpha():
        words = words[1:]  # the pattern starts a string with a letter
    named = re.match(r"\^ \?\(([^()]*)\) ", pattern)
    if named is not None:
        names = named.group(1).split("|")
        if not any(words.startswith(f"{name} ") for name in names):
            words = f"{names[0]} {words}"
    if not words:
        raise SchemaMismatchError(f"nothing of {text!r} can go into a string of {schema}")
    while len(words) < 2 * int(schema.get("maxLength", 0)) and not _fits(words, schema):
        words = f"{words} {words}"  # too short: a scripted model starts its script over
    for end in range(len(words), 0, -1):
        if _fits(words[:end], schema):
            return words[:end]
    raise SchemaMismatchError(f"no part of {words!r} fits a string of {schema}")


def fill_schema(schema: dict[str, Any], text: str) -> Any:
    """An instance of `schema` whose strings carry `text`, as a model writing `text` under the
    schema's grammar would produce: an object holds its required properties in their order, a
    list its fewest items (`minItems`), an enum its first value, a string `fit_string`."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        required = schema.get("required", list(schema["properties"]))
        return {
            name: fill_schema(sub, text)
            for name, sub in schema["properties"].items()
            if name in required
        }
    if kind == "array":
        return [fill_schema(schema["items"], text) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "string":
        return fit_string(text, schema)
    raise SchemaMismatchError(f"the fake cannot fill this schema: {schema}")


def check_instance(schema: dict[str, Any], value: Any, where: str = "$") -> None:
    """Raise SchemaMismatchError where `value` breaks `schema` (the keywords the chapter's
    schema uses: type, properties, required, additionalProperties, items, minItems, maxItems,
    enum, pattern, maxLength)."""
    if "enum" in schema:
        if value not in schema["enum"]:
            raise SchemaMismatchError(f"{where}: {value!r} is not one of {schema['enum']}")
        return
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            raise SchemaMismatchError(f"{where}: not an object")
        properties = schema["properties"]
        missing = [name for name in schema.get("required", []) if name not in value]
        extra = [name for name in value if name not in properties]
        if missing or (extra and schema.get("additionalProperties") is False):
            raise SchemaMismatchError(f"{where}: missing {missing}, not allowed {extra}")
        # The grammar writes the properties in the schema's order.
        order = [name for name in properties if name in value]
        if list(value) != order:
            raise SchemaMismatchError(f"{where}: properties out of order: {list(value)}")
        for name, item in value.items():
            check_instance(properties[name], item, f"{where}.{name}")
    elif kind == "array":
        if not isinstance(value, list):
            raise SchemaMismatchError(f"{where}: not a list")
        if not int(schema.get("minItems", 0)) <= len(value) <= int(schema["maxItems"]):
            raise SchemaMismatchError(f"{where}: {len(value)} items, outside the schema's bounds")
        for index, item in enumerate(value):
            check_instance(schema["items"], item, f"{where}[{index}]")
    elif kind == "string":
        if not isinstance(value, str) or not _fits(value, schema):
            raise SchemaMismatchError(f"{where}: {value!r} does not fit {schema}")
    else:
        raise SchemaMismatchError(f"{where}: the fake does not know this schema: {schema}")


def conform(schema: dict[str, Any], value: Any) -> Any:
    """A scripted JSON `value` as a grammar lets a model write it under `schema`: an object's
    properties in the schema's order, those it does not allow left out, required lists it left
    out written empty; a list ended at its most items; an enum value it does not allow, its
    first; a string that does not fit, fitted (`fit_string`). What the grammar would need words
    for that the script does not give (a required string, a list's first item) is an error."""
    if "enum" in schema:
        return value if value in schema["enum"] else schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        given = value if isinstance(value, dict) else {}
        properties = schema["properties"]
        required = schema.get("required", list(properties))
        out = {}
        for name, sub in properties.items():
            if name in given:
                out[name] = conform(sub, given[name])
            elif name in required:
                if sub.get("type") != "array" or int(sub.get("minItems", 0)):
                    raise SchemaMismatchError(f"the scripted answer has no {name!r}: {value!r}")
                out[name] = []
        return out
    if kind == "array":
        items = value if isinstance(value, list) else []
        if len(items) < int(schema.get("minItems", 0)):
            raise SchemaMismatchError(f"too few items for {schema}: {value!r}")
        return [conform(schema["items"], item) for item in items[: int(schema["maxItems"])]]
    if kind == "string":
        text = value if isinstance(value, str) else str(value)
        return text if _fits(text, schema) else fit_string(text, schema)
    raise SchemaMismatchError(f"the fake cannot write this schema: {schema}")


def answer_in_schema(text: str, schema_text: str) -> str:
    """The JSON a call under `schema_text` writes for the scripted `text`: a JSON script made
    to conform, prose put into the schema's strings."""
    schema = json.loads(schema_text)
    try:
        value = conform(schema, json.loads(text))
    except ValueError:
        value = fill_schema(schema, text)
    check_instance(schema, value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# ---- KV contexts ------------------------------------------------------------------------------


def _common(held: list[str], items: list[str]) -> int:
    """How many pieces the two lists start with alike."""
    keep = 0
    for mine, theirs in zip(held, items, strict=False):
        if mine != theirs:
            break
        keep += 1
    return keep


@dataclass
class _Context:
    """What one KV context holds, in pieces (the KV itself is not modelled: only its items)."""

    n_ctx: int
    held: list[str] = field(default_factory=list)
    version: int = 0

    def common(self, items: list[str]) -> int:
        """Pieces of `items` this context keeps (the last one is always evaluated again)."""
        return min(_common(self.held, items), len(items) - 1) if items else 0

    def changed(self) -> None:
        self.version += 1


@dataclass
class Step:
    """What `on_step` hears: the request, and whether the step evaluated prompt pieces
    ("prompt") or wrote a token ("token")."""

    request: GenerationRequest
    what: str


class FakeEngine(EngineBase):
    """The engine surface over scripted answers (see the module docstring)."""

    def __init__(
        self,
        profile: ModelProfile,
        answer: Answer,
        *,
        fold_ctx_for: Callable[[int], int] | None = None,
        name: str = "fake-engine",
    ) -> None:
        self.profile = profile
        self.answer = answer
        self._owner = OwnerThread(name="kotonia-fake-model")
        self._work = {}
        self._formatter = make_formatter(
            profile.prompt_format,
            chat_template=DEFAULT_TEMPLATE,
            bos_token=BOS,
            eos_token=EOS,
            thinking=profile.thinking,
            reasoning_tags=profile.reasoning_tags,
            model_name=name,
        )
        n_ctx = profile.n_ctx
        self.info = EngineInfo(
            model_path=Path(f"{name}.gguf"),
            model_name=name,
            model_key=f"{name}:{n_ctx}",
            mmproj_path=None,
            n_ctx=n_ctx,
            n_ctx_train=n_ctx,
            fold_n_ctx=fold_window(n_ctx, fold_ctx_for),
            n_gpu_layers=0,
            gpu_offload=False,
            threads=1,
            prompt_format=profile.prompt_format,
            has_chat_template=profile.prompt_format is PromptFormat.TEMPLATE,
            load_ms=0.0,
            llama_cpp_version="none (a fake engine)",
        )
        self._contexts: dict[Slot, _Context] = {}
        self.on_step: Callable[[Step], None] | None = None
        self.requests: list[GenerationRequest] = []  # every call started, in order
        self.settled: list[GenerationRequest] = []
        self.restored: list[GenerationRequest] = []
        # A waiting turn reads `work` each time it looks at the fold (chat/fold/worker.py);
        # a test that paces the fold waits for those looks (`looked_since`).
        self._looks = 0
        self._looked = threading.Condition()
        self._holding: Callable[[GenerationRequest], bool] | None = None

    @classmethod
    def for_settings(cls, settings: Settings, answer: Answer) -> FakeEngine:
        """Sized as `chat.bootstrap.open_engine` sizes a real one (the fold context too)."""
        from kotonia_tui.chat.bootstrap import fold_context_size

        profile = settings.active_profile()
        return cls(
            profile,
            answer,
            fold_ctx_for=lambda n_ctx: fold_context_size(settings, n_ctx, profile.reply_max_tokens),
        )

    # ---- what the model is -------------------------------------------------------------------

    @property
    def has_vision(self) -> bool:
        return False

    @property
    def busy(self) -> bool:
        return self._owner.busy

    def count_tokens(self, text: str) -> int:
        return len(pieces(text))

    def work(self, slot: Slot) -> Work:
        with self._looked:
            self._looks += 1
            self._looked.notify_all()
        return super().work(slot)

    @property
    def looks(self) -> int:
        """How many times `work` has been read."""
        return self._looks

    def looked_since(self, looks: int, timeout: float) -> bool:
        """Wait (on any thread) until `work` has been read after the `looks`-th time; False
        when `timeout` real seconds pass first (nobody is looking)."""
        with self._looked:
            return self._looked.wait_for(lambda: self._looks > looks, timeout)

    def image_cells(self, image: ImageInput) -> int:
        del image
        return 0  # no projector: an image is not sent

    def render(self, request: GenerationRequest) -> RenderedPrompt:
        return render_request(self._formatter, request)

    def prompt_cells(self, request: GenerationRequest) -> int:
        return len(self._items(self.render(request)))

    def _items(self, rendered: RenderedPrompt) -> list[str]:
        if rendered.images:
            raise ImageError(
                "this model has no vision projector (mmproj_path), so it cannot see images"
            )
        return [BOS, *pieces(rendered.text)]

    def _context(self, slot: Slot) -> _Context:
        if slot not in self._contexts:
            n_ctx = self.info.fold_n_ctx if slot is Slot.FOLD else self.info.n_ctx
            self._contexts[slot] = _Context(n_ctx)
        return self._contexts[slot]

    def hold(self, which: Callable[[GenerationRequest], bool]) -> None:
        """From their next step on, the calls `which` picks make no progress (a stuck or very
        slow call) until `release` or until they are cancelled: each step does nothing for a
        millisecond, so other calls still run between them, a user turn first, as they would
        beside a slow call on the real owner thread."""
        self._holding = which

    def release(self) -> None:
        self._holding = None

    def _held(self, request: GenerationRequest, call: EngineCall) -> Iterator[None]:
        while not call.cancel_flag.is_set():
            holding = self._holding
            if holding is None or not holding(request):
                return
            time.sleep(0.001)
            yield None

    # ---- calls ---------------------------------------------------------------------------------

    def start(self, request: GenerationRequest) -> EngineCall:
        self.requests.append(request)
        return queue_call(
            self._owner, lambda call: self._generate(request, call), priority=int(request.priority)
        )

    def prewarm(self, request: GenerationRequest) -> EngineCall:
        return self.start(
            replace(request, slot=Slot.PREWARM, priority=Priority.PREWARM, prefill_only=True)
        )

    def settle(self, request: GenerationRequest, after: Any) -> EngineCall:
        """As engine/llama_states.py's, without the saving: the chat context is brought to
        the stable prefix of the history (what every next prompt starts with, found by
        rendering two different next messages), if no call used it since `after`."""
        self.settled.append(request)
        background = replace(request, priority=Priority.BACKGROUND, prefill_only=True)
        version = after.slot_version if isinstance(after, EngineCall) else None
        return queue_call(
            self._owner,
            lambda call: self._settle(background, version, call),
            priority=int(Priority.BACKGROUND),
        )

    def _settle(
        self, request: GenerationRequest, version: int | None, call: EngineCall
    ) -> Generator[StreamEvent | None, None, GenerationResult]:
        context = self._contexts.get(Slot.CHAT)
        stats: dict[str, Any] = {}
        if request.state is not None and context is not None and context.version == version:
            variants = [
                self._items(
                    self.render(
                        replace(
                            request,
                            messages=(
                                *request.messages,
                                ChatMessage("user", probe, name=request.user_name),
                            ),
                            prefill="",
                        )
                    )
                )
                for probe in ("A", "B")
            ]
            stable = variants[0][: _common(variants[0], variants[1])]
            try:
                stats = yield from self._prefill(context, stable, request, call)
            except SlotTakenError:
                stats = {}  # a chat call came first; its own settle follows
        result = GenerationResult(
            "", "", FinishReason.STOP, call_metrics(request, FinishReason.STOP, **stats)
        )
        yield result
        return result

    def restore(self, request: GenerationRequest) -> EngineCall:
        self.restored.append(request)
        return self._at_once(request)

    def _at_once(self, request: GenerationRequest) -> EngineCall:
        """A background call that does nothing and says so (no state saved or loaded)."""
        background = replace(request, priority=Priority.BACKGROUND, prefill_only=True)

        def nothing(_call: EngineCall) -> Generator[StreamEvent | None, None, GenerationResult]:
            result = GenerationResult(
                "", "", FinishReason.STOP, call_metrics(background, FinishReason.STOP)
            )
            yield result
            return result

        return queue_call(self._owner, nothing, priority=int(Priority.BACKGROUND))

    def _step(self, request: GenerationRequest, what: str) -> None:
        if self.on_step is not None:
            self.on_step(Step(request, what))

    def _generate(
        self, request: GenerationRequest, call: EngineCall
    ) -> Generator[StreamEvent | None, None, GenerationResult]:
        rendered = self.render(request)
        items = self._items(rendered)
        context = self._choose(request.slot, items)
        stats = yield from self._prefill(context, items, request, call)
        if request.prefill_only:
            result = GenerationResult(
                "", "", FinishReason.STOP, call_metrics(request, FinishReason.STOP, **stats)
            )
            yield result
            return result
        text = self.answer(request)
        if request.json_schema is not None:
            text = answer_in_schema(text, request.json_schema)
        reply = ReplyText(
            stops=tuple(rendered.stops) + tuple(request.extra_stops),
            reasoning_tags=self.profile.reasoning_tags,
            starts_in_reasoning=rendered.starts_in_reasoning,
            continues=bool(request.prefill),
        )
        generated = 0
        finish = FinishReason.STOP
        for piece in pieces(text):
            yield from self._held(request, call)
            if call.cancel_flag.is_set():
                finish = FinishReason.CANCELLED
                break
            generated += 1
            call.tokens_generated = generated
            self._add_work(request.slot, generated=1)
            yield from reply.events(piece)
            if reply.stops.stopped_by is not None:
                break
            if generated >= request.max_tokens or len(context.held) + 1 > context.n_ctx:
                finish = FinishReason.LENGTH
                break
            context.held.append(piece)  # evaluated, so the next piece can be written
            context.changed()
            self._step(request, "token")
            yield from self._boundary(context)
        yield from reply.events("", final=True)
        metrics = call_metrics(request, finish, generated=generated, **stats)
        result = GenerationResult(
            reply.text, reply.reasoning, finish, metrics, stop_string=reply.stops.stopped_by
        )
        call.slot_version = context.version
        yield result
        return result

    def _choose(self, slot: Slot, items: list[str]) -> _Context:
        """A chat call takes the prewarmed context when it shares the longer prefix."""
        if slot is Slot.CHAT and Slot.PREWARM in self._contexts:
            chat, spare = self._context(Slot.CHAT), self._contexts[Slot.PREWARM]
            if spare.common(items) > chat.common(items):
                self._contexts[Slot.CHAT], self._contexts[Slot.PREWARM] = spare, chat
        return self._context(slot)

    def _prefill(
        self, context: _Context, items: list[str], request: GenerationRequest, call: EngineCall
    ) -> Generator[None, None, dict[str, Any]]:
        if len(items) + request.max_tokens > context.n_ctx:
            raise PromptTooLongError(len(items), request.max_tokens, context.n_ctx)
        chat = self._contexts.get(Slot.CHAT)
        if request.prefill_only and chat is not None and chat is not context:
            held = chat.common(items)
            if len(items) - held <= PREWARM_MIN_GAIN:
                return {"positions": len(items), "reused": held, "evaluated": 0}
        keep = context.common(items)
        if keep < len(context.held):
            del context.held[keep:]
            context.changed()
        index = keep
        while index < len(items):
            yield from self._held(request, call)
            batch = items[index : index + BATCH]
            context.held.extend(batch)
            context.changed()
            index += len(batch)
            self._add_work(request.slot, evaluated=len(batch))
            self._step(request, "prompt")
            yield from self._boundary(context)
            if call.cancel_flag.is_set() and index < len(items):
                break  # Esc while the prompt is read: stopped between two batches
        return {"positions": len(items), "reused": keep, "evaluated": index - keep}

    @staticmethod
    def _boundary(context: _Context) -> Iterator[None]:
        """A step of the owner thread; after it, stop if another call changed the context."""
        version = context.version
        yield None
        if context.version != version:
            raise SlotTakenError("another call used this context meanwhile")

    # ---- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        self._owner.close()


def open_fake_service(
    settings: Settings, answer: Answer, *, db: Path | None = None, clock: Clock | None = None
) -> ChatService:
    """`chat.bootstrap.open_service` with the fake engine in place of the model: the real
    store file, cards, fold worker and service (`clock`: the system's unless given)."""
    from kotonia_tui.chat.bootstrap import open_library, open_store
    from kotonia_tui.chat.fold.wait import SYSTEM_CLOCK
    from kotonia_tui.chat.service import ChatService

    store = open_store(settings, db)
    engine = FakeEngine.for_settings(settings, answer)
    return ChatService(settings, store, engine, open_library(settings), clock=clock or SYSTEM_CLOCK)
