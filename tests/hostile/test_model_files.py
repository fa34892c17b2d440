"""Hostile model files, written with the suite's tiny-model writer: each one is refused with a
line naming the file and the key (or the setting) before llama.cpp can abort the process, and
hostile chat templates are stopped by their limits instead of hanging a chat."""

from __future__ import annotations

from pathlib import Path

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from kotonia_tui.domain import ChatRole
from kotonia_tui.engine.formats import TemplateFormat
from kotonia_tui.engine.template_limits import BoundedEnvironment
from kotonia_tui.engine.types import ChatMessage

from .corpus import (
    HOSTILE_MODELS,
    HOSTILE_PROJECTORS,
    HOSTILE_TEMPLATES,
    damaged_gguf_variants,
    write_hostile_model,
    write_hostile_projector,
    write_template_model,
)
from .harness import assert_no_crash, assert_refused, kotonia

SAY = ("chat", "wren", "--say", "hi")


def env_for(model: Path, mmproj: Path | None = None, n_ctx: int = 2048) -> dict[str, str]:
    env = {"KOTONIA_MODEL_PATH": str(model), "KOTONIA_N_CTX": str(n_ctx)}
    if mmproj is not None:
        env["KOTONIA_MMPROJ_PATH"] = str(mmproj)
    return env


@pytest.mark.parametrize(
    ("name", "metadata", "named"), HOSTILE_MODELS, ids=[m[0] for m in HOSTILE_MODELS]
)
def test_impossible_model_metadata_is_refused_naming_the_key(name, metadata, named, card, tmp_path):
    model = write_hostile_model(tmp_path, name, metadata)
    assert_refused(kotonia(*SAY, env=env_for(model)), model.name, *named)


@pytest.mark.parametrize(
    ("name", "metadata", "named"), HOSTILE_PROJECTORS, ids=[m[0] for m in HOSTILE_PROJECTORS]
)
def test_impossible_projector_metadata_is_refused_naming_the_key(
    name, metadata, named, card, tiny_model_path, tmp_path
):
    mmproj = write_hostile_projector(tmp_path, name, metadata)
    run = kotonia(*SAY, env=env_for(tiny_model_path, mmproj))
    assert_refused(run, mmproj.name, *named)


@pytest.mark.parametrize("variant", range(7))
def test_a_damaged_header_is_refused_before_llama_cpp_reads_it(
    variant, card, tiny_model_path, tmp_path
):
    name, content, said = damaged_gguf_variants(tiny_model_path.read_bytes())[variant]
    model = tmp_path / f"{name}.gguf"
    model.write_bytes(content)
    assert_refused(kotonia(*SAY, env=env_for(model)), model.name, said)


def test_doctor_names_the_impossible_key_and_exits_1(card, tmp_path):
    model = write_hostile_model(tmp_path, "blocks", {"llama.block_count": 100_000})
    run = kotonia("doctor", env=env_for(model))
    assert_no_crash(run)
    assert run.code == 1
    assert any("llama.block_count" in line for line in run.err.splitlines()), run.err


@pytest.mark.parametrize(
    ("n_ctx", "named"),
    [
        (10**23, "more than llama.cpp can address"),
        (5 * 2048, "4 times"),  # the tiny model was trained on 2,048 tokens
    ],
    ids=["1e23", "5x-trained"],
)
def test_an_impossible_n_ctx_is_refused_naming_the_setting(n_ctx, named, card, tiny_model_path):
    """KOTONIA_N_CTX=10^23 took 43 s and 16.5 GB before an error that blamed the file."""
    run = kotonia(*SAY, env=env_for(tiny_model_path, n_ctx=n_ctx))
    assert_refused(run, "n_ctx", "KOTONIA_N_CTX", named)


def test_an_n_ctx_past_the_machines_memory_is_refused(card, tmp_path):
    """Within 4x the (declared) trained window, but its KV cache cannot fit in memory."""
    model = write_hostile_model(tmp_path, "wide", {"llama.context_length": 2**30})
    run = kotonia(*SAY, env=env_for(model, n_ctx=2**31 - 1))
    assert_refused(run, "n_ctx", "memory", "KOTONIA_N_CTX")


@pytest.mark.parametrize(
    ("name", "template", "said"), HOSTILE_TEMPLATES, ids=[t[0] for t in HOSTILE_TEMPLATES]
)
def test_a_hostile_chat_template_is_stopped_and_named(name, template, said, card, tmp_path):
    """Two nested range(100000) loops hung a chat at 6.6 GB for 120 s."""
    model = write_template_model(tmp_path, name, template)
    run = kotonia(*SAY, env={**env_for(model), "KOTONIA_PROMPT_FORMAT": "template"})
    line = assert_refused(run, model.name, "chat template")
    assert said in line, line


# A template in the shape real instruct models ship (macros, namespaces, loop variables, string
# methods, filters, tests): the limits must not change what it renders.
REAL_SHAPED = """{{ bos_token }}
{%- macro text(content) -%}
  {%- if content is string -%}{{ content }}
  {%- else -%}{% for part in content %}{% if part.type == 'text' %}{{ part.text }}{% endif %}
    {%- endfor %}
  {%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}
{%- endfor -%}
{%- for m in messages -%}
  {%- set body = text(m.content) -%}
  {%- if m.role == 'assistant' and '</think>' in body -%}
    {%- set body = body.split('</think>')[-1].lstrip('\\n') -%}
  {%- endif -%}
  <|{{ m.role }}|>{{ '\\n' + body.strip() }}{{ ' [last]' if loop.index0 == ns.last_user else '' }}
  {{- '\\n' if not loop.last }}
{%- endfor -%}
{%- if add_generation_prompt %}<|assistant|>{{ '%s-%d' % ('t', messages|length) }}{% endif -%}
{{ messages|map(attribute='role')|join(',')|upper ~ '' }}{{ range(3)|list|length }}
"""


def test_the_bounded_wordwrap_wraps_as_jinjas_own():
    source = "{{ text|wordwrap(12) }}|{{ text|wordwrap(5, false, '/') }}|{{ long|wordwrap(3) }}"
    variables = {
        "text": "The lamp is lit.\nThe tide-pool is deep, the storm\tcomes.",
        "long": "x" * 10,
    }
    plain = ImmutableSandboxedEnvironment().from_string(source).render(**variables)
    bounded = BoundedEnvironment()
    assert bounded.render(bounded.from_string(source), 10_000, **variables) == plain


def test_the_limits_do_not_change_what_a_real_template_renders():
    messages = [ChatMessage(role="system", content="Be Wren.")]
    for i in range(600):
        role: ChatRole = "user" if i % 2 == 0 else "assistant"
        content = f"<think>why {i}</think>Line {i} " * 3 if role == "assistant" else f"Say {i}"
        messages.append(ChatMessage(role=role, content=content))
    bounded = TemplateFormat(
        REAL_SHAPED,
        bos_token="<s>",
        eos_token="</s>",
        thinking=False,
        reasoning_tags=("<think>", "</think>"),
    ).render(messages)
    plain = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(),
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols],
    ).from_string(REAL_SHAPED)
    payload = [{"role": m.role, "content": m.content} for m in messages]
    expected = plain.render(
        messages=payload, bos_token="<s>", eos_token="</s>", add_generation_prompt=True
    )
    assert bounded.text == expected.removeprefix("<s>")
    assert "Line 599" in bounded.text and "why 599" not in bounded.text
