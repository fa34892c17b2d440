"""Asking a server what it is and what it serves, once, when the engine opens.

`/v1/models` names the model; each kind in `kinds.KINDS` then checks whether the server is
one of its own (vLLM by its model entry, llama-server by `/props`, llama-cpp-python's server by
its tokenize endpoint). The context size is the server's where it reports it, the profile's
otherwise. The prompt is rendered here when a formatter can be made (a transcript profile, or
a chat template the server hands out).

Whatever the server answers is checked before it is used: a model list of the wrong shape is
an error naming the endpoint; a context size or slot count that is not a usable whole number
is set aside with a warning (logged, and shown by `kotonia doctor`), and the profile's value
or one slot is used instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kotonia_tui.config import ModelProfile, PromptFormat
from kotonia_tui.engine.base import fold_window
from kotonia_tui.engine.errors import ModelFileError, ServerResponseError
from kotonia_tui.engine.formats import PromptFormatter, TranscriptFormat, make_formatter
from kotonia_tui.engine.server import http
from kotonia_tui.engine.server.kinds import KINDS, Detected, OpenAICompatible, ServerKind
from kotonia_tui.engine.types import ChatMessage

log = logging.getLogger(__name__)

MODELS = "/v1/models"
MIN_CONTEXT = 256  # the least any profile may set
MAX_CONTEXT = 2**26  # 67M tokens: past every model there is; a larger figure is a bug
MAX_SLOTS = 4096


@dataclass(frozen=True)
class ServerInfo:
    """What `kotonia doctor` and the inspector show about the server and its model."""

    url: str
    kind: ServerKind
    model_id: str
    model_name: str
    model_key: str
    n_ctx: int
    n_ctx_source: str  # "server" or "profile"
    fold_n_ctx: int
    prompt_format: PromptFormat
    client_renders: bool  # the prompt is rendered here and sent to /v1/completions
    has_chat_template: bool
    tokenizer: str  # the endpoint, or "estimate"
    slots: int
    read_timeout_s: float
    load_ms: float
    warnings: tuple[str, ...] = ()  # what the server reported that was set aside

    @property
    def n_ctx_train(self) -> int:
        return self.n_ctx


@dataclass(frozen=True)
class Probed:
    info: ServerInfo
    kind: OpenAICompatible
    formatter: PromptFormatter | None
    vision: bool


def probe(
    connection: http.ServerHttp,
    profile: ModelProfile,
    fold_ctx_for: Callable[[int], int] | None,
) -> Probed:
    """Blocking requests: call it off the event loop in a UI."""
    started = time.perf_counter()
    url = connection.url
    models = connection.json(MODELS, connection.get(MODELS))
    if not isinstance(models, dict) or not isinstance(models.get("data"), list):
        raise http.not_the_answer(connection.where(MODELS), 'a model list ("data": [...])', models)
    entries = [m for m in models["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]
    if not entries:
        raise ServerResponseError(f"{connection.where(MODELS)}: the server lists no model")
    entry = next((m for m in entries if m["id"] == profile.server_model), entries[0])
    model_id = profile.server_model or entry["id"]
    kind_class, raw = _detect(connection, entry, model_id)
    warnings: list[str] = []
    detected = _checked(raw, connection.where(raw.source), profile.n_ctx, warnings)
    kind = kind_class(detected)
    n_ctx = detected.n_ctx
    vision = detected.vision if profile.server_vision is None else profile.server_vision
    n_ctx_source = "server" if n_ctx else "profile"
    window = n_ctx or profile.n_ctx
    if n_ctx and n_ctx != profile.n_ctx:
        log.info(
            "%s reports n_ctx %s (the profile says %s); using the server's",
            url,
            n_ctx,
            profile.n_ctx,
        )
    formatter = _formatter(profile, detected, model_id)
    read_s = http.read_timeout_s(window, profile.server_prompt_rate, profile.server_timeout_s)
    connection.set_read_timeout(read_s)
    info = ServerInfo(
        url=url,
        kind=kind.kind,
        model_id=model_id,
        model_name=model_id.rstrip("/").rsplit("/", 1)[-1],
        # Token counts cached on message rows are valid for this tokenizer only.
        model_key=f"server:{kind.kind}:{model_id}",
        n_ctx=window,
        n_ctx_source=n_ctx_source,
        fold_n_ctx=fold_window(window, fold_ctx_for),
        prompt_format=profile.prompt_format,
        client_renders=formatter is not None,
        has_chat_template=bool(detected.template),
        tokenizer=kind.tokenizer,
        slots=detected.slots,
        read_timeout_s=read_s,
        load_ms=(time.perf_counter() - started) * 1000,
        warnings=tuple(warnings),
    )
    log.info(
        "server backend: %s (%s), model %s, n_ctx %s (%s), %s",
        url,
        kind.kind,
        model_id,
        window,
        n_ctx_source,
        "prompt rendered here" if formatter else "server applies the chat template",
    )
    return Probed(info, kind, formatter, vision)


def _detect(
    connection: http.ServerHttp, entry: dict[str, Any], model_id: str
) -> tuple[type[OpenAICompatible], Detected]:
    for kind in KINDS:
        detected = kind.detect(connection, entry, model_id)
        if detected is not None:
            return kind, detected
    raise AssertionError("the last kind always answers")  # pragma: no cover


def _whole(value: Any, low: int, high: int) -> int | None:
    """`value` if it is a whole number from `low` to `high` (JSON true is not 1)."""
    return value if type(value) is int and low <= value <= high else None


def _shown(value: Any) -> str:
    """A server's value as a message quotes it: escaped, and never long."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _checked(raw: Detected, where: str, profile_n_ctx: int, warnings: list[str]) -> Detected:
    """`raw` with its context size and slot count checked: unusable ones are set aside with
    a warning; a real context too small for this app is an error."""

    def warn(message: str) -> None:
        warnings.append(f"{where}: {message}")
        log.warning("%s: %s", where, message)

    n_ctx = None
    if raw.n_ctx is not None:
        n_ctx = _whole(raw.n_ctx, 1, MAX_CONTEXT)
        if n_ctx is None:
            warn(
                f"{raw.n_ctx_field} {_shown(raw.n_ctx)} is not a usable context size; "
                f"using the profile's n_ctx {profile_n_ctx}"
            )
        elif n_ctx < MIN_CONTEXT:
            raise ServerResponseError(
                f"{where}: {raw.n_ctx_field} is {n_ctx}: the server's context holds {n_ctx} "
                f"tokens, and this app needs at least {MIN_CONTEXT}"
            )
    slots = _whole(raw.slots, 1, MAX_SLOTS)
    if slots is None:
        warn(f"total_slots {_shown(raw.slots)} is not a slot count; assuming one slot")
        slots = 1
    return replace(raw, n_ctx=n_ctx, slots=slots)


def _formatter(profile: ModelProfile, detected: Detected, name: str) -> PromptFormatter | None:
    """A formatter when the prompt can be rendered here; None: the chat endpoint renders."""
    if profile.prompt_format is PromptFormat.TRANSCRIPT:
        return TranscriptFormat()
    if not detected.template:
        return None  # the chat endpoint applies the template on the server
    try:
        formatter = make_formatter(
            PromptFormat.TEMPLATE,
            chat_template=detected.template,
            bos_token=detected.bos,
            eos_token=detected.eos,
            thinking=profile.thinking,
            reasoning_tags=profile.reasoning_tags,
            model_name=name,
        )
        formatter.render(
            (ChatMessage("system", "s"), ChatMessage("user", "u")),
            reply_name="",
            user_name="",
        )
    except ModelFileError as exc:
        # A template our sandbox cannot run is still the server's to apply: chat path.
        log.warning(
            "the server's chat template cannot be rendered here (%s); using the chat endpoint",
            exc,
        )
        return None
    return formatter
