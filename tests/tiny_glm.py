"""GLM-4.6V-Flash in miniature: a random-weight ``glm4`` text model with M-RoPE, its ``glm4v``
vision projector, the chat template the model ships and its special tokens, written with the
``gguf`` package in milliseconds (see docs/glm-4.6v-flash.md for what each part mirrors).

The real pair is a 9B ``glm4`` GGUF (40 blocks, n_embd 4096, 523 tensors) and an F16 ``glm4v``
mmproj (24 ViT blocks, 182 tensors). These have the same metadata keys, tensor names and tensor
roles, tiny dimensions and random weights; llama-cpp-python loads them through the same code
paths (llama.cpp's ``glm4`` graph with ``ggml_rope_multi``, mtmd's ``glm4v`` graph and its
``<|begin_of_image|>`` / ``<|end_of_image|>`` wrapping, the dyn-size image preprocessor).

* Vocabulary: a byte-level BPE (``tokenizer.ggml.model = gpt2``, pre-tokenizer
  ``chatglm-bpe``) over the 256 byte symbols plus word pieces, then GLM-4.6V's 36 added tokens
  in their real order and kinds: ``<|...|>``, ``[gMASK]``, ``<sop>`` ... are control tokens,
  ``<think>``, ``</think>``, ``/nothink``, ``<tool_call>`` ... user-defined (printed as text).
  ``<|endoftext|>`` is BOS/EOS/UNK and ``<|user|>`` the end-of-turn token, as the converter sets
  them; llama.cpp drops the BOS for ``chatglm-bpe`` (the template writes ``[gMASK]<sop>``).
* ``eot_bias`` / ``favour_token``: as in tests/tiny_models.py, but the stop token a reply ends
  with is ``<|user|>`` (the real model ends its turn by starting the next user turn).
* ``think_tags_control=True`` writes ``<think>`` and ``</think>`` as control tokens (a converter
  that marks them special would do that), for the engine's "tags are text" guarantee.
* :func:`write_scripted_glm`: built weights whose greedy reply is exactly a script, like
  :func:`tests.tiny_models.write_scripted_llama` (same design, adapted to GLM's post-norms and
  fused SwiGLU); a script may contain the thinking tags.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from pathlib import Path

import gguf
import numpy as np

from tests.tiny_models import (
    as_f16,
    as_f32,
    carrier_weights,
    clip_writer,
    f32_ones,
    f32_zeros,
    finish_gguf,
    normal_f32,
    script_design,
    short_script,
    vocab_only_model,
    vocabulary_words,
)

__all__ = [
    "ENDOFTEXT",
    "GLM_SPECIAL_TOKENS",
    "GLM_TEMPLATE",
    "USER_TOKEN",
    "build_glm_vocab",
    "glm_script_tokens",
    "write_scripted_glm",
    "write_tiny_glm",
    "write_tiny_glm_mmproj",
]

ENDOFTEXT = "<|endoftext|>"
USER_TOKEN = "<|user|>"

_CONTROL = gguf.TokenType.CONTROL
_USER = gguf.TokenType.USER_DEFINED

#: GLM-4.6V-Flash's added tokens, in id order (151329 ... 151364 in the real vocabulary), with
#: the kind the GGUF converter gives them: "special" tokens and ``<|...|>`` are control tokens.
GLM_SPECIAL_TOKENS: tuple[tuple[str, gguf.TokenType], ...] = (
    (ENDOFTEXT, _CONTROL),
    ("[MASK]", _CONTROL),
    ("[gMASK]", _CONTROL),
    ("[sMASK]", _CONTROL),
    ("<sop>", _CONTROL),
    ("<eop>", _CONTROL),
    ("<|system|>", _CONTROL),
    (USER_TOKEN, _CONTROL),
    ("<|assistant|>", _CONTROL),
    ("<|observation|>", _CONTROL),
    ("<|begin_of_image|>", _CONTROL),
    ("<|end_of_image|>", _CONTROL),
    ("<|begin_of_video|>", _CONTROL),
    ("<|end_of_video|>", _CONTROL),
    ("<|begin_of_audio|>", _CONTROL),
    ("<|end_of_audio|>", _CONTROL),
    ("<|begin_of_transcription|>", _CONTROL),
    ("<|end_of_transcription|>", _CONTROL),
    ("<|code_prefix|>", _CONTROL),
    ("<|code_middle|>", _CONTROL),
    ("<|code_suffix|>", _CONTROL),
    ("<think>", _USER),
    ("</think>", _USER),
    ("<tool_call>", _USER),
    ("</tool_call>", _USER),
    ("<tool_response>", _USER),
    ("</tool_response>", _USER),
    ("<arg_key>", _USER),
    ("</arg_key>", _USER),
    ("<arg_value>", _USER),
    ("</arg_value>", _USER),
    ("/nothink", _USER),
    ("<|begin_of_box|>", _CONTROL),
    ("<|end_of_box|>", _CONTROL),
    ("<|image|>", _CONTROL),
    ("<|video|>", _CONTROL),
)

#: The chat template GLM-4.6V-Flash ships (tokenizer.chat_template), minus its tool-calling
#: branches, which Kotonia never uses: ``[gMASK]<sop>`` first; ``<|system|>``, ``<|user|>``,
#: ``<|assistant|>`` turns with no end-of-turn marker; every past reply rendered with a thinking
#: block (``<think></think>`` unless it is after the last user turn and carries reasoning);
#: with ``enable_thinking=false`` every user turn ends in ``/nothink`` and the generation prompt
#: closes an empty thinking block; an image item becomes
#: ``<|begin_of_image|><|image|><|end_of_image|>`` (mtmd adds the begin/end tokens itself).
GLM_TEMPLATE = """[gMASK]<sop>
{%- macro visible_text(content) -%}
    {%- if content is string -%}
        {{- content }}
    {%- elif content is iterable and content is not mapping -%}
        {%- for item in content -%}
            {%- if item is mapping and item.type == 'text' -%}
                {{- item.text }}
            {%- elif item is mapping and (item.type == 'image' or 'image' in item) -%}
                <|begin_of_image|><|image|><|end_of_image|>
            {%- elif item is string -%}
                {{- item }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{- content }}
    {%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(last_user_index=-1) %}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {% set ns.last_user_index = loop.index0 -%}
    {%- endif %}
{%- endfor %}
{% for m in messages %}
{%- if m.role == 'user' -%}<|user|>
{% if m.content is string %}
{{ m.content }}
{%- else %}
{%- for item in m.content %}
{% if item.type == 'image' or 'image' in item %}
<|begin_of_image|><|image|><|end_of_image|>{% elif item.type == 'text' %}
{{ item.text }}
{%- endif %}
{%- endfor %}
{%- endif %}
{{- '/nothink' if (enable_thinking is defined and not enable_thinking and not \
visible_text(m.content).endswith("/nothink")) else '' -}}
{%- elif m.role == 'assistant' -%}
<|assistant|>
{%- set reasoning_content = '' %}
{%- set content = visible_text(m.content) %}
{%- if m.reasoning_content is string %}
    {%- set reasoning_content = m.reasoning_content %}
{%- else %}
    {%- if '</think>' in content %}
        {%- set reasoning_content = \
content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
        {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
    {%- endif %}
{%- endif %}
{%- if loop.index0 > ns.last_user_index and reasoning_content -%}
{{ '\\n<think>' + reasoning_content.strip() +  '</think>'}}
{%- else -%}
{{ '\\n<think></think>' }}
{%- endif -%}
{%- if content.strip() -%}
{{ '\\n' + content.strip() }}
{%- endif -%}
{%- elif m.role == 'system' -%}
<|system|>
{{ visible_text(m.content) }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|assistant|>
{{'<think></think>\\n' if (enable_thinking is defined and not enable_thinking) else ''}}
{%- endif -%}""".replace("\\\n", "")


# --- vocabulary --------------------------------------------------------------------------------


@cache
def _byte_symbols() -> tuple[str, ...]:
    """The byte-level BPE alphabet: printable bytes stand for themselves, the others are moved
    to code points from 256 up (so a space is "Ġ" and a newline "Ċ")."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    symbols: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in symbols:
            symbols[b] = chr(256 + extra)
            extra += 1
    return tuple(symbols[b] for b in range(256))


def _encode_bytes(text: str) -> str:
    table = _byte_symbols()
    return "".join(table[b] for b in text.encode("utf-8"))


def _word_pieces(words: Iterable[str]) -> list[str]:
    pieces: list[str] = []
    seen: set[str] = set()
    for word in words:
        for form in (word, word.capitalize()):
            for full in (_encode_bytes(" " + form), _encode_bytes(form)):
                for end in range(2, len(full) + 1):
                    piece = full[:end]
                    if piece not in seen:
                        seen.add(piece)
                        pieces.append(piece)
    return pieces


@cache
def build_glm_vocab(
    think_tags_control: bool = False,
) -> tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]]:
    """(tokens, token types, merges): the byte alphabet, word pieces (each reachable by merging
    its prefix and last symbol), then :data:`GLM_SPECIAL_TOKENS` at the end, as in the real
    vocabulary."""
    tokens: list[str] = list(_byte_symbols())
    types: list[int] = [int(gguf.TokenType.NORMAL)] * 256
    merges: list[str] = []
    for piece in _word_pieces(vocabulary_words()):
        merges.append(f"{piece[:-1]} {piece[-1]}")
        tokens.append(piece)
        types.append(int(gguf.TokenType.NORMAL))
    for text, kind in GLM_SPECIAL_TOKENS:
        if think_tags_control and text in ("<think>", "</think>"):
            kind = _CONTROL
        tokens.append(text)
        types.append(int(kind))
    assert len(set(tokens)) == len(tokens), "duplicate vocabulary piece"
    return tuple(tokens), tuple(types), tuple(merges)


def _token_id(text: str) -> int:
    return build_glm_vocab()[0].index(text)


def _rope_sections(n_rot: int) -> list[int]:
    """M-RoPE sections (temporal, height, width, unused) over the n_rot / 2 rotated pairs, in
    about the real model's proportions (8, 12, 12 of 32)."""
    pairs = n_rot // 2
    temporal = max(1, pairs // 4)
    height = (pairs - temporal) // 2
    return [temporal, height, pairs - temporal - height, 0]


def _glm_writer(
    path: Path,
    *,
    name: str,
    n_ctx: int,
    n_embd: int,
    n_layer: int,
    n_head: int,
    n_head_kv: int,
    n_ff: int,
    n_rot: int,
    rope_freq_base: float,
    chat_template: str | None,
    think_tags_control: bool,
    mrope: bool = True,
) -> gguf.GGUFWriter:
    """A GGUFWriter with the glm4 hyper-parameters and the GLM vocabulary, no tensors yet."""
    tokens, types, merges = build_glm_vocab(think_tags_control)
    w = gguf.GGUFWriter(str(path), "glm4")
    w.add_name(name)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(n_embd // n_head)
    w.add_value_length(n_embd // n_head)
    # GLM rotates half of each head (partial_rotary_factor 0.5), with M-RoPE sections: without
    # them llama.cpp aborts the process on the first image embedding.
    w.add_rope_dimension_count(n_rot)
    if mrope:
        w.add_rope_dimension_sections(_rope_sections(n_rot))
    w.add_rope_freq_base(rope_freq_base)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("chatglm-bpe")
    w.add_token_list(list(tokens))
    w.add_token_types(list(types))
    w.add_token_merges(list(merges))
    endoftext = tokens.index(ENDOFTEXT)
    w.add_bos_token_id(endoftext)
    w.add_eos_token_id(endoftext)
    w.add_unk_token_id(endoftext)
    w.add_eot_token_id(tokens.index(USER_TOKEN))
    if chat_template is not None:
        w.add_chat_template(chat_template)
    return w


def write_tiny_glm(
    path: Path,
    *,
    n_ctx: int = 131072,  # the real model's trained window (GLM-4.6V: 128K)
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    chat_template: str | None = GLM_TEMPLATE,
    seed: int = 0,
    eot_bias: float = 0.0,
    favour_token: str | None = None,
    favour_bias: float = 20.0,
    think_tags_control: bool = False,
    mrope: bool = True,
    name: str = "tiny-glm-4.6v-flash",
) -> Path:
    """Write a random-weight ``glm4`` GGUF (about 0.7 MB at the defaults) and return ``path``.

    ``eot_bias``: logits added to ``<|user|>`` (20 makes greedy decoding stop at once; negative
    suppresses it, and ``<|endoftext|>`` is suppressed too). ``favour_token``: a vocabulary
    piece (byte-level, e.g. ``"Ġhello"``) greedy decoding then repeats. ``mrope=False`` leaves
    out ``glm4.rope.dimension_sections``, as GGUFs converted before GLM-4.1V support did.
    """
    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError("n_embd must be a multiple of n_head, n_head of n_head_kv")
    head_dim = n_embd // n_head
    if head_dim % 4:
        raise ValueError("the head size must be a multiple of 4 (half of it is rotated)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tokens = build_glm_vocab(think_tags_control)[0]
    n_vocab = len(tokens)
    n_ff = 2 * n_embd
    n_kv = n_head_kv * head_dim
    w = _glm_writer(
        path,
        name=name,
        n_ctx=n_ctx,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        n_rot=head_dim // 2,
        rope_freq_base=10000.0,
        chat_template=chat_template,
        think_tags_control=think_tags_control,
        mrope=mrope,
    )
    # The bias carrier of tests/tiny_models.py: one column of the output matrix adds a fixed
    # number of logits to chosen tokens.
    biases: dict[int, float] = {}
    if eot_bias:
        biases[tokens.index(USER_TOKEN)] = eot_bias
        if eot_bias < 0:
            biases[tokens.index(ENDOFTEXT)] = eot_bias
    if favour_token is not None:
        if favour_token not in tokens:
            raise ValueError(f"favour_token {favour_token!r} is not in the vocabulary")
        biases[tokens.index(favour_token)] = favour_bias
    embd, out = carrier_weights(rng, n_vocab, n_embd, biases)
    w.add_tensor("token_embd.weight", as_f16(embd))
    w.add_tensor("output_norm.weight", as_f32(np.ones(n_embd)))
    w.add_tensor("output.weight", as_f16(out))

    def mat(rows: int, cols: int) -> np.ndarray:
        return as_f16(rng.normal(0.0, 0.02, size=(rows, cols)))

    def vec(n: int, value: float = 0.0) -> np.ndarray:
        return as_f32(np.full(n, value))

    # The post-norms rescale a block's output to unit RMS; a small weight keeps the blocks'
    # updates small, so the bias carrier survives them.
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", vec(n_embd, 1.0))
        w.add_tensor(p + "attn_q.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_q.bias", vec(n_embd))
        w.add_tensor(p + "attn_k.weight", mat(n_kv, n_embd))
        w.add_tensor(p + "attn_k.bias", vec(n_kv))
        w.add_tensor(p + "attn_v.weight", mat(n_kv, n_embd))
        w.add_tensor(p + "attn_v.bias", vec(n_kv))
        w.add_tensor(p + "attn_output.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "post_attention_norm.weight", vec(n_embd, 0.01))
        w.add_tensor(p + "ffn_norm.weight", vec(n_embd, 1.0))
        w.add_tensor(p + "ffn_up.weight", mat(2 * n_ff, n_embd))  # gate and up, fused
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
        w.add_tensor(p + "post_ffw_norm.weight", vec(n_embd, 0.01))
    finish_gguf(w)
    return path


# --- the vision projector ----------------------------------------------------------------------


def write_tiny_glm_mmproj(
    path: Path,
    *,
    text_n_embd: int = 64,
    image_size: int = 32,
    patch_size: int = 4,
    n_embd: int = 32,
    n_layer: int = 2,
    n_head: int = 4,
    seed: int = 0,
) -> Path:
    """Write a random-weight ``glm4v`` mmproj GGUF and return ``path``.

    mtmd resizes an image so both sides are multiples of ``patch_size * 2`` (the 2x2 patch
    merger) within its token limits; a 32x32 image at the defaults becomes 8x8 patches, merged
    to 4x4 = 16 embeddings (16 KV cells) that take 4 positions (M-RoPE: max(4, 4)). Their width
    is ``text_n_embd``, which must equal the text model's ``glm4.embedding_length``.
    """
    head_dim = n_embd // n_head
    if n_embd % n_head or head_dim % 4:
        raise ValueError("the vision head size must be a multiple of 4 (2-D rotary sections)")
    if image_size % (2 * patch_size):
        raise ValueError("image_size must be a multiple of 2 * patch_size")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed + 1)
    n_ff = 2 * n_embd
    merger_ff = 2 * text_n_embd
    n_positions = (image_size // patch_size) ** 2

    w = clip_writer(
        path,
        name="tiny-glm-4.6v-flash-mmproj",
        projector="glm4v",
        activation="silu",
        n_embd=n_embd,
        n_ff=n_ff,
        n_layer=n_layer,
        n_head=n_head,
        projection_dim=text_n_embd,
        eps=1e-5,
        image_size=image_size,
        patch_size=patch_size,
        image_mean=(0.48145466, 0.4578275, 0.40821073),
        image_std=(0.26862954, 0.26130258, 0.27577711),
    )
    rnd, ones, zeros = normal_f32(rng), f32_ones, f32_zeros

    # The real Conv3d patch embedding (temporal patch 2) is stored as two Conv2d kernels.
    w.add_tensor("v.patch_embd.weight", rnd(n_embd, 3, patch_size, patch_size))
    w.add_tensor("v.patch_embd.weight.1", rnd(n_embd, 3, patch_size, patch_size))
    w.add_tensor("v.patch_embd.bias", zeros(n_embd))
    w.add_tensor("v.pre_ln.weight", ones(n_embd))  # the post-convolution RMS norm
    w.add_tensor("v.position_embd.weight", rnd(n_positions, n_embd))
    for i in range(n_layer):
        p = f"v.blk.{i}."
        w.add_tensor(p + "attn_qkv.weight", rnd(3 * n_embd, n_embd))
        w.add_tensor(p + "attn_out.weight", rnd(n_embd, n_embd))
        w.add_tensor(p + "ln1.weight", ones(n_embd))
        w.add_tensor(p + "ln2.weight", ones(n_embd))
        w.add_tensor(p + "ffn_gate.weight", rnd(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", rnd(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", rnd(n_embd, n_ff))
    w.add_tensor("v.post_ln.weight", ones(n_embd))
    # The merger: a 2x2 patch merge (Conv2d, with bias) to the text width, a projection with a
    # LayerNorm and GELU, then a SwiGLU.
    w.add_tensor("mm.patch_merger.weight", rnd(text_n_embd, n_embd, 2, 2))
    w.add_tensor("mm.patch_merger.bias", zeros(text_n_embd))
    w.add_tensor("mm.model.fc.weight", rnd(text_n_embd, text_n_embd))
    w.add_tensor("mm.post_norm.weight", ones(text_n_embd))
    w.add_tensor("mm.post_norm.bias", zeros(text_n_embd))
    w.add_tensor("mm.gate.weight", rnd(merger_ff, text_n_embd))
    w.add_tensor("mm.up.weight", rnd(merger_ff, text_n_embd))
    w.add_tensor("mm.down.weight", rnd(text_n_embd, merger_ff))
    finish_gguf(w)
    return path


# --- scripted models ---------------------------------------------------------------------------


def glm_script_tokens(script: str, *, think_tags_control: bool = False) -> list[int]:
    """The token ids of ``script`` in the GLM vocabulary, special tokens parsed (so ``<think>``
    is one token, as the real model writes it)."""
    if not script:
        raise ValueError("script must not be empty")
    model = vocab_only_model(
        f"glm-{think_tags_control}",
        lambda tmp: write_tiny_glm(
            tmp / "vocab.gguf", n_embd=16, n_layer=1, think_tags_control=think_tags_control
        ),
    )
    ids = model.tokenize(script.encode(), add_bos=False, special=True)
    if model.detokenize(ids, special=True).decode("utf-8", "replace") != script:
        raise ValueError(f"the script {short_script(script)} does not survive tokenization")
    return ids


def write_scripted_glm(
    path: Path,
    script: str,
    *,
    n_ctx: int = 131072,  # the real model's trained window (GLM-4.6V: 128K)
    min_n_embd: int = 64,
    n_layer: int = 2,
    chat_template: str | None = GLM_TEMPLATE,
    think_tags_control: bool = False,
    name: str = "tiny-glm-4.6v-flash-scripted",
) -> Path:
    """Write a ``glm4`` GGUF whose greedy reply to any prompt is ``script`` and then
    ``<|user|>`` (the end of the turn), with the same metadata as :func:`write_tiny_glm`.

    The weights are :func:`tests.tiny_models.script_design`'s with GLM's post-norms and half
    rotary heads; layer 0's gate and up projections are fused into ``ffn_up`` (gate first).
    The same limits apply as for :func:`tests.tiny_models.write_scripted_llama`.
    """
    if n_layer < 1:
        raise ValueError("n_layer must be >= 1")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens = build_glm_vocab(think_tags_control)[0]
    design = script_design(
        glm_script_tokens(script, think_tags_control=think_tags_control),
        script,
        n_vocab=len(tokens),
        stop_id=tokens.index(USER_TOKEN),
        n_ctx=n_ctx,
        min_n_embd=min_n_embd,
        post_norms=True,
        half_rotary=True,
    )
    assert design.attn_post_norm is not None and design.ffn_post_norm is not None
    n_embd, n_ff = design.n_embd, design.n_ff
    w = _glm_writer(
        path,
        name=name,
        n_ctx=n_ctx,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=design.n_head,
        n_head_kv=design.n_head,
        n_ff=n_ff,
        n_rot=design.n_rot,
        rope_freq_base=design.rope_base,
        chat_template=chat_template,
        think_tags_control=think_tags_control,
    )
    w.add_tensor("token_embd.weight", as_f16(design.embd))
    w.add_tensor("output_norm.weight", as_f32(np.ones(n_embd)))
    w.add_tensor("output.weight", as_f16(design.output))
    zero_sq = np.zeros((n_embd, n_embd))
    zero = np.zeros(n_embd)
    for layer in range(n_layer):
        p = f"blk.{layer}."
        first = layer == 0
        w.add_tensor(p + "attn_norm.weight", as_f32(np.ones(n_embd)))
        for part, weight in (("q", design.wq), ("k", design.wk), ("v", design.wv)):
            w.add_tensor(p + f"attn_{part}.weight", as_f16(weight if first else zero_sq))
            w.add_tensor(p + f"attn_{part}.bias", as_f32(zero))
        w.add_tensor(p + "attn_output.weight", as_f16(design.wo if first else zero_sq))
        w.add_tensor(p + "post_attention_norm.weight", as_f32(design.attn_post_norm * first))
        w.add_tensor(p + "ffn_norm.weight", as_f32(np.ones(n_embd)))
        fused = np.concatenate([design.gate, design.up]) if first else np.zeros((2 * n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", as_f16(fused))
        w.add_tensor(
            p + "ffn_down.weight", as_f16(design.down if first else np.zeros((n_embd, n_ff)))
        )
        w.add_tensor(p + "post_ffw_norm.weight", as_f32(design.ffn_post_norm * first))
    finish_gguf(w)
    return path
