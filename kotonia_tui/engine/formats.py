"""Prompt formats: how a list of chat messages becomes the text a model reads.

`template` renders through the GGUF's own chat template (instruct models). `transcript` writes a
story transcript, "Name: line", and stops when the model starts someone else's line (base models,
such as the embedded Gemma 3 270M, which has no usable template).

Both formats are prefix-stable: rendering messages[:k] + more starts with the rendering of
messages[:k] (up to the generation prompt), which is what lets the KV cache be reused.
Images are written as the projector's media marker; the multimodal path splits on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date
from typing import Any

import jinja2
import jinja2.ext

from kotonia_tui.config import PromptFormat
from kotonia_tui.engine.errors import ModelFileError
from kotonia_tui.engine.template_limits import (
    MIN_OUTPUT_CHARS,
    BoundedEnvironment,
    TemplateLimitError,
)
from kotonia_tui.engine.types import ChatMessage, GenerationRequest, ImageInput

MEDIA_MARKER = "<__media__>"


@dataclass(frozen=True)
class RenderedPrompt:
    """The prompt as text with media markers, the images in marker order, and stop strings."""

    text: str
    images: tuple[ImageInput, ...]
    stops: tuple[str, ...]
    starts_in_reasoning: bool = False


def _content_with_markers(message: ChatMessage) -> str:
    if not message.images:
        return message.content
    markers = "\n".join(MEDIA_MARKER for _ in message.images)
    return f"{markers}\n{message.content}" if message.content else markers


def _images(messages: Sequence[ChatMessage]) -> tuple[ImageInput, ...]:
    return tuple(image for message in messages for image in message.images)


class TranscriptFormat:
    """A story transcript for base models: "Name: line" per message, the reply's name last."""

    def render(
        self,
        messages: Sequence[ChatMessage],
        *,
        reply_name: str,
        user_name: str,
        prefill: str = "",
    ) -> RenderedPrompt:
        parts: list[str] = []
        for message in messages:
            body = _content_with_markers(message).strip("\n")
            if message.role == "system" or not message.name:
                parts.append(f"{body}\n\n")
            else:
                parts.append(f"{message.name}: {body}\n")
        # The reply starts right after "Name:"; models put the space themselves.
        parts.append(f"{reply_name}:{(' ' + prefill) if prefill else ''}")
        stops = tuple(
            dict.fromkeys(s for s in (f"\n{user_name}:", f"\n{reply_name}:") if s != "\n:")
        )
        return RenderedPrompt("".join(parts), _images(messages), stops)


def _alternating(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as strict templates accept them: one leading system message, then turns.

    A system note later in the conversation joins the user side, and consecutive messages of
    one role are joined (many templates raise on two user or two assistant turns in a row).
    """
    payload: list[dict[str, Any]] = []
    for message in messages:
        role = message.role if (message.role != "system" or not payload) else "user"
        content = _content_with_markers(message)
        if payload and payload[-1]["role"] == role and role != "system":
            payload[-1]["content"] += "\n\n" + content
        else:
            payload.append({"role": role, "content": content})
    return payload


class TemplateFormat:
    """The model's own Jinja chat template, rendered in a sandbox."""

    def __init__(
        self,
        template: str,
        *,
        bos_token: str,
        eos_token: str,
        thinking: bool,
        reasoning_tags: tuple[str, str],
        source: str = "the model",
    ) -> None:
        # The sandbox with a budget: a template from a model file is untrusted code.
        self._environment = BoundedEnvironment(
            loader=jinja2.BaseLoader(),
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[jinja2.ext.loopcontrols],
        )
        self._source = source
        try:
            self._template = self._environment.from_string(template)
        except jinja2.TemplateError as exc:
            raise ModelFileError(f"{source}: the chat template does not parse: {exc}") from exc
        self._bos = bos_token
        self._eos = eos_token
        self._thinking = thinking
        self._tags = reasoning_tags
        # Templates that print today's date would change the prompt prefix at midnight; pin the
        # date for the life of the engine so the prefix stays stable within a session.
        self._today = date.today()

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        def raise_exception(message: str) -> None:
            raise ValueError(message)

        text = sum(len(str(m.get("content", ""))) for m in messages)
        return self._environment.render(
            self._template,
            MIN_OUTPUT_CHARS + 4 * text,
            messages=messages,
            bos_token=self._bos,
            eos_token=self._eos,
            add_generation_prompt=add_generation_prompt,
            raise_exception=raise_exception,
            strftime_now=self._today.strftime,
            enable_thinking=self._thinking,
            tools=None,
        )

    @property
    def reasoning_close(self) -> str:
        return self._tags[1]

    def render(
        self,
        messages: Sequence[ChatMessage],
        *,
        reply_name: str = "",
        user_name: str = "",
        prefill: str = "",
    ) -> RenderedPrompt:
        del reply_name, user_name  # the template knows its own roles
        payload = _alternating(messages)
        try:
            text = self._render(payload, add_generation_prompt=True)
        except RecursionError as exc:
            raise ModelFileError(
                f"{self._source}: the chat template was stopped: it calls itself too deeply"
            ) from exc
        except TemplateLimitError as exc:
            raise ModelFileError(
                f"{self._source}: the chat template was stopped: {exc}; the template is broken "
                'or hostile (use another model file, or prompt_format = "transcript")'
            ) from exc
        except (
            jinja2.TemplateError,
            ValueError,
            TypeError,
            LookupError,  # "{}".format() with no argument, a missing key
            ArithmeticError,  # 1 / 0, an overflow
            MemoryError,
        ) as exc:
            raise ModelFileError(
                f"{self._source}: the chat template failed to render: {exc}"
            ) from exc
        # A BOS the template prints is added again by the tokenizer; keep only one.
        if self._bos and text.startswith(self._bos):
            text = text[len(self._bos) :]
        open_tag, close_tag = self._tags
        tail = text.rstrip()
        starts_in_reasoning = tail.endswith(open_tag)
        if not self._thinking and starts_in_reasoning:
            # The template opened a thinking block although thinking is off: close it empty.
            text = tail + close_tag
            starts_in_reasoning = False
        return RenderedPrompt(text + prefill, _images(messages), (), starts_in_reasoning)


PromptFormatter = TranscriptFormat | TemplateFormat


def render_request(formatter: PromptFormatter, request: GenerationRequest) -> RenderedPrompt:
    """A request's prompt in `formatter`'s format (both backends render through this)."""
    rendered = formatter.render(
        request.messages,
        reply_name=request.reply_name,
        user_name=request.user_name,
        prefill=request.prefill,
    )
    if request.json_schema is not None and rendered.starts_in_reasoning:
        # The schema's grammar starts the answer at its first brace, inside the thinking block
        # the template opened, where it would be read as reasoning: close the block empty.
        assert isinstance(formatter, TemplateFormat)  # only a template opens one
        return replace(
            rendered,
            text=rendered.text.rstrip() + formatter.reasoning_close,
            starts_in_reasoning=False,
        )
    return rendered


def make_formatter(
    prompt_format: PromptFormat,
    *,
    chat_template: str | None,
    bos_token: str,
    eos_token: str,
    thinking: bool,
    reasoning_tags: tuple[str, str],
    model_name: str,
) -> PromptFormatter:
    if prompt_format is PromptFormat.TRANSCRIPT:
        return TranscriptFormat()
    if not chat_template:
        raise ModelFileError(
            f"{model_name}: the GGUF has no chat template (tokenizer.chat_template); "
            'set prompt_format = "transcript" for a base model'
        )
    return TemplateFormat(
        chat_template,
        bos_token=bos_token,
        eos_token=eos_token,
        thinking=thinking,
        reasoning_tags=reasoning_tags,
        source=model_name,
    )
