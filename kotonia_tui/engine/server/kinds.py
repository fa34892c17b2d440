"""The kinds of server, one small object each: what differs between them and nothing else.

How to recognise it, where it counts tokens, which request fields it takes beyond the OpenAI
ones, and how it reports its figures. The base class is the plain OpenAI-compatible server
(no tokenizer, no context size); `detect` tries the kinds in `KINDS` order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from kotonia_tui.engine.errors import EngineError
from kotonia_tui.engine.sampling import Sampling
from kotonia_tui.engine.server.http import ServerHttp
from kotonia_tui.engine.types import GenerationRequest, Slot


class ServerKind(StrEnum):
    LLAMA_SERVER = "llama-server"
    VLLM = "vllm"
    LLAMA_CPP_PYTHON = "llama-cpp-python"
    OPENAI = "openai-compatible"  # anything else: no tokenizer, no context size


@dataclass(frozen=True)
class Detected:
    """What probing learned about the server beyond its kind. `detect` gives `n_ctx` and
    `slots` as the server sent them; the prober checks them and keeps only usable values."""

    source: str = ""  # the endpoint the figures came from, for messages
    n_ctx: Any = None
    n_ctx_field: str = ""  # the field it came in
    slots: Any = 1
    template: str | None = None
    bos: str = ""
    eos: str = ""
    vision: bool = False
    tokenize_baseline: int = 0  # tokens the tokenize endpoint adds to any text (a BOS)


class OpenAICompatible:
    """Any OpenAI-compatible server: the fields every such server takes."""

    kind: ClassVar[ServerKind] = ServerKind.OPENAI
    tokenize_path: ClassVar[str | None] = None
    max_stops: ClassVar[int | None] = 4  # the OpenAI API's limit
    usage_in_stream: ClassVar[bool] = True  # `stream_options.include_usage` is understood
    # Ends a stream when another request arrives (a tokenize would cut the user's reply).
    ends_stream_for_any_request: ClassVar[bool] = False

    def __init__(self, detected: Detected | None = None) -> None:
        self.detected = detected or Detected()
        # JSON schema text -> GBNF, for a server that takes only a grammar (set by the app:
        # engine/schema_grammar.py; this package never imports llama_cpp).
        self.schema_grammar: Callable[[str], str] | None = None

    @classmethod
    def detect(cls, http: ServerHttp, entry: dict[str, Any], model_id: str) -> Detected | None:
        del http, entry, model_id
        return Detected()

    @property
    def tokenizer(self) -> str:
        """The endpoint token counts come from, or "estimate"."""
        return self.tokenize_path or "estimate"

    def tokenize_body(self, text: str, model_id: str) -> dict[str, Any]:
        raise NotImplementedError(f"{self.kind} has no tokenize endpoint")

    def token_count(self, answer: Any) -> int | None:
        """The count in a tokenize answer; None when it holds none."""
        if not isinstance(answer, dict):
            return None
        tokens = answer.get("tokens")
        if isinstance(tokens, list):
            return len(tokens)
        count = answer.get("count")
        return count if type(count) is int and count >= 0 else None

    def sampling_fields(self, sampling: Sampling) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "min_p": sampling.min_p,
            "top_k": sampling.top_k,
        }
        if sampling.seed is not None:
            fields["seed"] = sampling.seed
        return fields

    def schema_fields(self, schema: dict[str, Any], *, chat: bool) -> dict[str, Any]:
        """The fields that make the server keep its reply to a JSON schema (OpenAI's form)."""
        del chat
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema, "strict": True},
            }
        }

    def request_fields(self, request: GenerationRequest) -> dict[str, Any]:
        """Fields about caching and slots."""
        del request
        return {"stream_options": {"include_usage": True}} if self.usage_in_stream else {}

    def continue_fields(self) -> dict[str, Any]:
        """On the chat path, what makes the last (assistant) message one to continue."""
        return {}

    def server_figures(self, timings: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
        """The call's figures the server reported (raw), by `call_metrics` field name."""
        del timings
        details = usage.get("prompt_tokens_details")
        return {
            "positions": usage.get("prompt_tokens"),
            "reused": details.get("cached_tokens") if isinstance(details, dict) else None,
            "generated": usage.get("completion_tokens"),
        }


class LlamaServer(OpenAICompatible):
    """llama.cpp's `llama-server`: `/props` (context, slots, chat template), `/tokenize`, its
    own `timings`, a prompt cache and slots."""

    kind = ServerKind.LLAMA_SERVER
    tokenize_path = "/tokenize"
    max_stops = None

    @classmethod
    def detect(cls, http: ServerHttp, entry: dict[str, Any], model_id: str) -> Detected | None:
        props = http.optional_json("/props", http.get("/props"))
        if not isinstance(props, dict) or "default_generation_settings" not in props:
            return None
        settings = props.get("default_generation_settings")
        settings = settings if isinstance(settings, dict) else {}
        modalities = props.get("modalities")
        template = props.get("chat_template")
        # Per slot: with --parallel N each slot holds n_ctx / N.
        in_settings = settings.get("n_ctx") is not None
        return Detected(
            source="/props",
            n_ctx=settings.get("n_ctx") if in_settings else props.get("n_ctx"),
            n_ctx_field="default_generation_settings.n_ctx" if in_settings else "n_ctx",
            slots=props.get("total_slots") or 1,
            template=template if isinstance(template, str) and template else None,
            bos=str(props.get("bos_token") or ""),
            eos=str(props.get("eos_token") or ""),
            vision=isinstance(modalities, dict) and bool(modalities.get("vision")),
        )

    def tokenize_body(self, text: str, model_id: str) -> dict[str, Any]:
        return {"content": text, "add_special": False, "parse_special": True}

    def sampling_fields(self, sampling: Sampling) -> dict[str, Any]:
        return super().sampling_fields(sampling) | {
            "repeat_penalty": sampling.repeat_penalty,
            "repeat_last_n": sampling.repeat_last_n,
        }

    def schema_fields(self, schema: dict[str, Any], *, chat: bool) -> dict[str, Any]:
        # Both of its paths take the schema itself and build the grammar from it.
        return {"json_schema": schema}

    def request_fields(self, request: GenerationRequest) -> dict[str, Any]:
        fields = super().request_fields(request) | {"cache_prompt": True}
        if self.detected.slots >= 2:
            # Folds on their own slot, like the in-process fold context: they never evict the
            # chat's cached prefix.
            fields["id_slot"] = 1 if request.slot is Slot.FOLD else 0
        return fields

    def server_figures(self, timings: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
        if not timings:
            return super().server_figures(timings, usage)
        return {
            "evaluated": timings.get("prompt_n"),
            "reused": timings.get("cache_n"),
            "prompt_ms": timings.get("prompt_ms"),
            "generated": timings.get("predicted_n"),
            "gen_ms": timings.get("predicted_ms"),
            "rate": timings.get("predicted_per_second"),
        }


class Vllm(OpenAICompatible):
    """vLLM: `max_model_len` in `/v1/models`, `/tokenize`, its own penalty and continuation
    fields."""

    kind = ServerKind.VLLM
    tokenize_path = "/tokenize"
    max_stops = None

    @classmethod
    def detect(cls, http: ServerHttp, entry: dict[str, Any], model_id: str) -> Detected | None:
        if entry.get("owned_by") != "vllm" and "max_model_len" not in entry:
            return None
        return Detected(
            source="/v1/models", n_ctx=entry.get("max_model_len"), n_ctx_field="max_model_len"
        )

    def tokenize_body(self, text: str, model_id: str) -> dict[str, Any]:
        return {"model": model_id, "prompt": text, "add_special_tokens": False}

    def sampling_fields(self, sampling: Sampling) -> dict[str, Any]:
        fields = super().sampling_fields(sampling)
        fields["repetition_penalty"] = sampling.repeat_penalty
        if sampling.top_k == 0:
            fields["top_k"] = -1  # vLLM's "no cut"
        return fields

    def continue_fields(self) -> dict[str, Any]:
        return {"continue_final_message": True, "add_generation_prompt": False}


class LlamaCppPython(OpenAICompatible):
    """llama-cpp-python's server: `/extras/tokenize/count` (which adds a BOS, measured once),
    no figures in the stream, and a new request ends the stream it is sending."""

    kind = ServerKind.LLAMA_CPP_PYTHON
    tokenize_path = "/extras/tokenize/count"
    max_stops = None
    usage_in_stream = False
    ends_stream_for_any_request = True

    @classmethod
    def detect(cls, http: ServerHttp, entry: dict[str, Any], model_id: str) -> Detected | None:
        path = "/extras/tokenize/count"
        answer = http.optional_json(path, http.post(path, {"input": "", "model": model_id}))
        baseline = cls().token_count(answer)
        return None if baseline is None else Detected(tokenize_baseline=baseline)

    def tokenize_body(self, text: str, model_id: str) -> dict[str, Any]:
        return {"input": text, "model": model_id}

    def sampling_fields(self, sampling: Sampling) -> dict[str, Any]:
        return super().sampling_fields(sampling) | {"repeat_penalty": sampling.repeat_penalty}

    def schema_fields(self, schema: dict[str, Any], *, chat: bool) -> dict[str, Any]:
        if chat:
            return {"response_format": {"type": "json_object", "schema": schema}}
        # Its completions path takes only a grammar: the same one the in-process engine uses.
        if self.schema_grammar is None:
            raise EngineError(
                "llama-cpp-python's server takes a JSON schema on its completions path only as "
                "a grammar, and this engine was opened without a schema converter"
            )
        return {"grammar": self.schema_grammar(json.dumps(schema))}


# Tried in this order; the last one always answers.
KINDS: tuple[type[OpenAICompatible], ...] = (Vllm, LlamaServer, LlamaCppPython, OpenAICompatible)
