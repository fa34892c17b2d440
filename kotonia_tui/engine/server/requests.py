"""One generation request as it goes over the wire: which endpoint, which body, which stops.

The prompt is rendered here and sent as text to `/v1/completions` whenever a formatter exists
(the bytes the server reads are the bytes the in-process engine would read, so the memory's
placement rules carry over); otherwise, and for any prompt with images, the messages go to
`/v1/chat/completions` and the server applies the model's template. The body is the OpenAI
fields, the sampling as this kind of server takes it, and its cache and slot fields.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kotonia_tui.engine.formats import (
    MEDIA_MARKER,
    PromptFormatter,
    RenderedPrompt,
    render_request,
)
from kotonia_tui.engine.sampling import Sampling
from kotonia_tui.engine.server.kinds import OpenAICompatible
from kotonia_tui.engine.types import ChatMessage, GenerationRequest, ImageInput

COMPLETIONS = "/v1/completions"
CHAT_COMPLETIONS = "/v1/chat/completions"


@dataclass(frozen=True)
class WireRequest:
    """The endpoint, the JSON body, and what the client needs to read the answer."""

    path: str
    payload: dict[str, Any]
    stops: tuple[str, ...]
    starts_in_reasoning: bool
    images: int
    rendered: RenderedPrompt | None  # set on the client-rendered path

    @property
    def max_tokens(self) -> int:
        """The cap the server is asked to keep (the client holds it to it as well)."""
        return int(self.payload["max_tokens"])


def build_request(
    request: GenerationRequest,
    *,
    kind: OpenAICompatible,
    sampling: Sampling,
    formatter: PromptFormatter | None,
    model_id: str,
    images: int,
) -> WireRequest:
    """`images`: how many of the request's images the server will see (0 without vision)."""
    payload: dict[str, Any] = {
        "model": model_id,
        # A prewarm reads the prompt into the server's cache; one token is the least a server
        # accepts (llama-cpp-python takes 0 as "no limit").
        "max_tokens": 1 if request.prefill_only else request.max_tokens,
        "stream": True,
        **kind.sampling_fields(sampling),
        **kind.request_fields(request),
    }
    if formatter is not None and not images:
        rendered = render_request(formatter, request)
        text = rendered.text
        if rendered.images:
            # No vision on this path: the markers would be read as literal text.
            text = text.replace(f"{MEDIA_MARKER}\n", "").replace(MEDIA_MARKER, "")
        stops = tuple(dict.fromkeys(rendered.stops + request.extra_stops))
        payload["prompt"] = text
        wire = WireRequest(COMPLETIONS, payload, stops, rendered.starts_in_reasoning, 0, rendered)
    else:
        stops = tuple(dict.fromkeys(request.extra_stops))
        payload["messages"] = chat_messages(
            request.messages, images=bool(images), prefill=request.prefill
        )
        if request.prefill:
            payload.update(kind.continue_fields())
        wire = WireRequest(CHAT_COMPLETIONS, payload, stops, False, images, None)
    if request.json_schema is not None:
        schema = json.loads(request.json_schema)
        payload.update(kind.schema_fields(schema, chat=wire.path == CHAT_COMPLETIONS))
    if stops:
        # The server stops there too (saves its time); the client still cuts exactly.
        payload["stop"] = list(stops[: kind.max_stops])
    return wire


def _data_uri(image: ImageInput) -> str:
    return f"data:{image.mime};base64,{base64.b64encode(image.data).decode('ascii')}"


def chat_messages(
    messages: Sequence[ChatMessage], *, images: bool, prefill: str = ""
) -> list[dict[str, Any]]:
    """Messages as the chat endpoint takes them, in the shape strict templates accept.

    The same joining as the in-process template path: one leading system message (a later one
    joins the user side), consecutive messages of one role joined. Images become data URIs.
    """
    payload: list[dict[str, Any]] = []
    for message in messages:
        role = message.role if (message.role != "system" or not payload) else "user"
        parts: list[dict[str, Any]] = []
        if images:
            parts.extend(
                {"type": "image_url", "image_url": {"url": _data_uri(image)}}
                for image in message.images
            )
        if message.content or not parts:
            parts.append({"type": "text", "text": message.content})
        if payload and payload[-1]["role"] == role and role != "system":
            payload[-1]["parts"].append({"type": "text", "text": "\n\n"})
            payload[-1]["parts"].extend(parts)
        else:
            payload.append({"role": role, "parts": parts})
    if prefill:
        payload.append({"role": "assistant", "parts": [{"type": "text", "text": prefill}]})
    out: list[dict[str, Any]] = []
    for entry in payload:
        parts = entry["parts"]
        if all(p["type"] == "text" for p in parts):
            # Plain strings where there is no image: every server and template takes those.
            out.append({"role": entry["role"], "content": "".join(p["text"] for p in parts)})
        else:
            out.append({"role": entry["role"], "content": parts})
    return out
