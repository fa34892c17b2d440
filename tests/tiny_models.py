"""Tiny, deterministic GGUF models for tests: a random-weight ``llama`` text model and an ``mlp``
(llava-graph) mmproj, written with the ``gguf`` package in a few milliseconds.

They are real models: llama-cpp-python loads them, tokenizes with their vocabulary, generates and
runs image turns through mtmd. Only the weights are random, so the output is random tokens.

Three knobs make the output predictable where a test needs it:

* ``eos_bias`` adds (about) that many logits to ``</s>``: with ``eos_bias=20`` greedy decoding
  stops on the first token (``finish_reason == "stop"``). A negative value suppresses ``</s>``
  so random sampling never stops naturally.
* ``favour_token`` + ``favour_bias`` do the same for one vocabulary piece (e.g. ``"▁hello"``):
  greedy decoding then repeats that piece forever (" hello hello hello ..."), handy for stop
  strings.
* without either, greedy decoding is deterministic for a given seed and prompt, and sampling is
  close to uniform over the ~2,100 pieces (``</s>`` came up in 3 of 20 runs of 300
  tokens at temperature 0.8; use a negative ``eos_bias`` where a test needs "length").

How the bias works: every token embedding has a constant ``1.0`` in dimension 0 while the other
dimensions are small noise; the blocks add only tiny updates to the residual stream, so after the
final RMS norm dimension 0 is an (almost) constant ~6. Column 0 of ``output.weight`` is zero
except for the biased tokens, whose entry is ``bias / 6``.

Scripted models (``write_tiny_llama(path, script="I cannot help with that.")`` or
:func:`write_scripted_llama`) are different: built, not random, weights whose greedy reply to any
prompt is exactly the script and then ``</s>`` (``finish_reason == "stop"``). Layer 0 copies the
last few tokens into the residual stream (RoPE heads that look exactly 1, 2, ... positions back)
and its FFN recognises where in the script those tokens are; see :func:`write_scripted_llama`
and :func:`script_design` for how, and for the limits (length, repeated runs, prompts ending
with a run of the script).

The mmproj's ``mm.2`` output width (GGUF key ``clip.vision.projection_dim``) must equal the text
model's ``llama.embedding_length``; ``write_tiny_mmproj(..., text_n_embd=32)`` against the default
64-wide model gives a mis-fitting pair for error-path tests.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

__all__ = [
    "BOS_ID",
    "DEFAULT_TEMPLATE",
    "EOS_ID",
    "MEDIA_MARKER",
    "UNK_ID",
    "ScriptedWeights",
    "as_f16",
    "as_f32",
    "build_vocab",
    "carrier_weights",
    "clip_writer",
    "f32_ones",
    "f32_zeros",
    "finish_gguf",
    "normal_f32",
    "png_bytes",
    "script_design",
    "script_tokens",
    "short_script",
    "vocab_only_model",
    "vocabulary_words",
    "write_scripted_llama",
    "write_tiny_llama",
    "write_tiny_mmproj",
    "write_tiny_png",
]

UNK_ID, BOS_ID, EOS_ID = 0, 1, 2

#: mtmd's default media marker (``mtmd_default_marker()``), used for images in prompts.
MEDIA_MARKER = "<__media__>"

#: Control tokens used by :data:`DEFAULT_TEMPLATE`; each tokenizes to one token when special
#: tokens are parsed (llama-cpp-python's ``tokenize(..., special=True)``, mtmd) and to its
#: characters otherwise. None of them is an end-of-generation token: only ``</s>`` is.
TURN_MARKERS = ("<|system|>", "<|user|>", "<|assistant|>")

#: A ChatML-like template with plain-text role markers; a turn ends with ``</s>`` (the EOS
#: token), so a reply ends when the model emits EOS. Content may be a string or a list of
#: OpenAI-style parts (``text`` / ``image_url``, the latter rendered as the media marker).
DEFAULT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] in ('image_url', 'image') %}" + MEDIA_MARKER + "{% endif %}"
    "{% endfor %}{% endif %}"
    "</s>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

# A few hundred common words; every one is added lower-case and Capitalized with the
# SentencePiece "▁" (word start) prefix, together with all its prefixes so that SPM's bigram
# merges can build it ("▁h" -> "▁he" -> "▁hel" -> ...).
_WORDS = """
the be to of and a in that have i it for not on with he as you do at this but his by from they
we say her she or an will my one all would there their what so up out if about who get which go
me when make can like time no just him know take people into year your good some could them see
other than then now look only come its over think also back after use two how our work first
well way even new want because any these give day most us is are was were been has had did
said hello hi hey yes okay please thank thanks sorry name friend love tell story talk ask
morning evening night today tomorrow here where why very much more little big small old young
long great right left still never always again once something nothing everything someone
anyone nobody home house room door window table chair book letter city town road river sea
sky sun moon star rain wind fire water tree flower garden forest mountain king queen prince
princess knight castle sword dragon magic witch wizard spell village tavern market ship
captain heart eyes hand hands face voice smile laugh cry feel felt heard saw looked turned
walked ran stood sat came went took gave told asked answered whispered shouted nodded
remember forget happy sad angry afraid tired quiet soft warm cold dark light bright red blue
green white black gold silver man woman child boy girl mother father sister brother teacher
doctor cat dog horse bird fish bread tea coffee wine food dinner breakfast must should may
might shall let put keep find found leave left call try help start stop open close end begin
run walk read write sing dance play wait watch listen speak meet met lost won every each few
many own same another such those through before under between around against during without
within along across behind beyond toward near far away off down
"""

_PUNCT = list(".,!?;:'\"-()[]*/&%$#@+=<>_~0123456789")


def vocabulary_words() -> list[str]:
    """The words the tiny vocabularies make whole pieces of (lower-case, in a fixed order)."""
    return _WORDS.split()


def _word_pieces(words: Iterable[str]) -> list[str]:
    pieces: list[str] = []
    seen: set[str] = set()
    for word in words:
        for form in (word, word.capitalize()):
            full = "▁" + form
            for end in range(2, len(full) + 1):
                piece = full[:end]
                if piece not in seen:
                    seen.add(piece)
                    pieces.append(piece)
    return pieces


def build_vocab() -> tuple[list[str], list[float], list[int]]:
    """The tiny model's vocabulary: (tokens, scores, token types), in id order.

    ids 0-2: ``<unk>``, ``<s>``, ``</s>``; ids 3-258: the byte tokens ``<0x00>``..``<0xFF>``;
    then the turn markers (control), ``▁``, single letters / punctuation and the word pieces.
    Any text tokenizes: characters outside the vocabulary fall back to byte tokens.
    """
    tokens: list[str] = []
    types: list[int] = []

    def add(text: str, kind: gguf.TokenType) -> None:
        tokens.append(text)
        types.append(int(kind))

    add("<unk>", gguf.TokenType.UNKNOWN)
    add("<s>", gguf.TokenType.CONTROL)
    add("</s>", gguf.TokenType.CONTROL)
    for b in range(256):
        add(f"<0x{b:02X}>", gguf.TokenType.BYTE)
    for marker in TURN_MARKERS:
        add(marker, gguf.TokenType.CONTROL)
    singles = ["▁", *"abcdefghijklmnopqrstuvwxyz", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ", *_PUNCT]
    for s in singles:
        add(s, gguf.TokenType.NORMAL)
    for piece in _word_pieces(vocabulary_words()):
        add(piece, gguf.TokenType.NORMAL)
    assert len(set(tokens)) == len(tokens), "duplicate vocabulary piece"
    # SPM merges the highest-scoring bigram first; every multi-character piece is reachable
    # only through its own prefix chain, so the exact values matter little. Longer is better.
    scores = [
        0.0 if t != gguf.TokenType.NORMAL else -1000.0 + len(tok)
        for tok, t in zip(tokens, types, strict=True)
    ]
    return tokens, scores, types


def as_f16(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float16)


def as_f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def carrier_weights(
    rng: np.random.Generator, n_vocab: int, n_embd: int, biases: dict[int, float]
) -> tuple[np.ndarray, np.ndarray]:
    """Random token embeddings with a constant 1.0 in dim 0 (the bias carrier) and an output
    matrix whose column 0 adds ``biases[token]`` logits to those tokens (module docstring)."""
    noise = 0.1
    embd = rng.normal(0.0, noise, size=(n_vocab, n_embd))
    embd[:, 0] = 1.0
    # After RMS norm, dim 0 of the hidden state is about 1 / rms(embedding).
    carrier = float(np.sqrt(n_embd / (1.0 + (n_embd - 1) * noise * noise)))
    out = rng.normal(0.0, 0.05, size=(n_vocab, n_embd))
    out[:, 0] = 0.0
    for token, bias in biases.items():
        out[token, 0] = bias / carrier
    return embd, out


def _llama_writer(
    path: Path,
    *,
    name: str,
    n_ctx: int,
    n_embd: int,
    n_layer: int,
    n_head: int,
    n_ff: int,
    rope_freq_base: float,
    chat_template: str | None,
) -> gguf.GGUFWriter:
    """A GGUFWriter with the llama hyper-parameters and the tiny vocabulary, no tensors yet."""
    tokens, scores, types = build_vocab()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_rope_freq_base(rope_freq_base)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(UNK_ID)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    return w


def _override(w: gguf.GGUFWriter, metadata: Mapping[str, Any] | None) -> None:
    """Set (or, with None, remove) metadata keys after the normal ones: hostile test models.

    The type follows the Python value: bool, int (UINT32 when it fits, else INT64/UINT64),
    float (FLOAT32), str; a list of ints is an INT32 array."""
    for key, value in (metadata or {}).items():
        for kv in w.kv_data:
            kv.pop(key, None)
        if value is None:
            continue
        if isinstance(value, bool):
            kind = gguf.GGUFValueType.BOOL
        elif isinstance(value, int):
            kind = (
                gguf.GGUFValueType.UINT32
                if 0 <= value < 2**32
                else gguf.GGUFValueType.UINT64
                if value >= 0
                else gguf.GGUFValueType.INT64
            )
        elif isinstance(value, float):
            kind = gguf.GGUFValueType.FLOAT32
        elif isinstance(value, list):
            w.kv_data[0][key] = gguf.GGUFValue(
                value=value, type=gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT32
            )
            continue
        else:
            kind = gguf.GGUFValueType.STRING
        w.kv_data[0][key] = gguf.GGUFValue(value=value, type=kind)


def finish_gguf(w: gguf.GGUFWriter, metadata: Mapping[str, Any] | None = None) -> None:
    _override(w, metadata)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_tiny_llama(
    path: Path,
    *,
    n_ctx: int = 2048,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    chat_template: str | None = DEFAULT_TEMPLATE,
    seed: int = 0,
    eos_bias: float = 0.0,
    favour_token: str | None = None,
    favour_bias: float = 20.0,
    name: str = "tiny-llama",
    script: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write a random-weight ``llama`` GGUF (about 0.75 MB at the defaults) and return ``path``.

    ``metadata``: keys set (or removed, with None) after the normal ones, for hostile models
    (``{"llama.block_count": 100000}``); the tensors stay those of ``n_layer`` blocks.

    ``eos_bias``: logits added to ``</s>`` (20 makes greedy decoding stop at once; negative
    suppresses it). ``favour_token``: a vocabulary piece (e.g. ``"▁hello"``; see
    :func:`build_vocab`) that gets ``favour_bias`` logits, so greedy decoding repeats it.
    ``chat_template=None`` writes no ``tokenizer.chat_template``.

    ``script``: write a *scripted* model instead, whose greedy reply to any prompt is exactly
    ``script`` followed by ``</s>`` (see :func:`write_scripted_llama`, which this delegates to;
    ``n_embd`` is then a minimum, ``n_head`` and ``seed`` are ignored, and ``eos_bias`` /
    ``favour_token`` must be left at their defaults).
    """
    if script is not None:
        if eos_bias or favour_token is not None or metadata:
            raise ValueError("script cannot be combined with eos_bias, favour_token or metadata")
        return write_scripted_llama(
            path,
            script,
            n_ctx=n_ctx,
            min_n_embd=n_embd,
            n_layer=n_layer,
            chat_template=chat_template,
            name=name,
        )
    if n_embd % n_head:
        raise ValueError("n_embd must be a multiple of n_head")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tokens = build_vocab()[0]
    n_vocab = len(tokens)
    n_ff = 2 * n_embd

    w = _llama_writer(
        path,
        name=name,
        n_ctx=n_ctx,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_ff=n_ff,
        rope_freq_base=10000.0,
        chat_template=chat_template,
    )

    # Token embeddings: constant 1.0 in dim 0 (the "bias carrier"), small noise elsewhere.
    biases: dict[int, float] = {}
    if eos_bias:
        biases[EOS_ID] = eos_bias
    if favour_token is not None:
        if favour_token not in tokens:
            raise ValueError(f"favour_token {favour_token!r} is not in the vocabulary")
        biases[tokens.index(favour_token)] = favour_bias
    embd, out = carrier_weights(rng, n_vocab, n_embd, biases)
    w.add_tensor("token_embd.weight", as_f16(embd))  # ggml {n_embd, n_vocab}
    w.add_tensor("output_norm.weight", as_f32(np.ones(n_embd)))
    w.add_tensor("output.weight", as_f16(out))  # ggml {n_embd, n_vocab}

    def mat(rows: int, cols: int) -> np.ndarray:
        return as_f16(rng.normal(0.0, 0.02, size=(rows, cols)))

    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", as_f32(np.ones(n_embd)))
        w.add_tensor(p + "attn_q.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_k.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_v.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_output.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "ffn_norm.weight", as_f32(np.ones(n_embd)))
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))  # ggml {n_embd, n_ff}
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))  # ggml {n_ff, n_embd}

    finish_gguf(w, metadata)
    return path


# --- scripted models ---------------------------------------------------------------------------

#: The scripted model conditions each step on the last ``k`` tokens (the current one and k - 1
#: before it); ``k`` is the smallest value in this range that makes the script unambiguous.
SCRIPT_MIN_CONTEXT = 3
SCRIPT_MAX_CONTEXT = 8
#: Largest embedding width a scripted model may grow to (a script of roughly 250 tokens).
SCRIPT_MAX_N_EMBD = 1024

# Logit units, before the small common factor the final RMS norm applies.
_DEFAULT_LOGIT = 20.0  # the first script token, when no state fires
_STATE_LOGIT = 40.0  # a state matching 1 token; doubled for each further token it matches
_MIN_MARGIN = 10.0
_GATE = 20.0  # FFN gate steepness: silu(+10) ~ 10, silu(-10) ~ -5e-4
_ATTN_MARGIN = 40.0  # attention score of the wanted offset over any other position
# With post-norms (GLM): the size of the constant each block adds to its own output, so the
# norm of that output hardly depends on what else it holds.
_POST_NORM_CONSTANT = 10.0

_vocab_models: dict[str, Any] = {}


def vocab_only_model(key: str, write: Callable[[Path], Path]) -> Any:
    """llama.cpp's own tokenizer for a tiny vocabulary: a vocab-only load of the GGUF that
    ``write(directory)`` writes, cached under ``key``."""
    if key not in _vocab_models:
        import tempfile

        import llama_cpp
        from llama_cpp import _internals

        with tempfile.TemporaryDirectory() as tmp:
            vocab_path = write(Path(tmp))
            params = llama_cpp.llama_model_default_params()
            params.vocab_only = True
            _vocab_models[key] = _internals.LlamaModel(
                path_model=str(vocab_path), params=params, verbose=False
            )
    return _vocab_models[key]


def _tokenizer_model() -> Any:
    """llama.cpp's own tokenizer for :func:`build_vocab`."""
    return vocab_only_model(
        "llama", lambda tmp: write_tiny_llama(tmp / "vocab.gguf", n_embd=16, n_layer=1)
    )


def script_tokens(script: str) -> list[int]:
    """The token ids a scripted model generates for ``script`` (without the final ``</s>``).

    They are what llama.cpp's tokenizer makes of ``script`` *as a continuation*: no
    SentencePiece space is prefixed, so ``"I cannot"`` is ``I ▁can n o t`` and the reply text is
    ``script`` exactly (a script starting with a space starts with a ``▁`` piece).
    """
    if not script:
        raise ValueError("script must not be empty")
    model = _tokenizer_model()
    newline = build_vocab()[0].index("<0x0A>")
    # "\n" first: llama.cpp prefixes a space to the text, "▁" and "\n" stay apart (no piece
    # joins them) and the script's first character follows "\n" with no space of its own.
    ids = model.tokenize(("\n" + script).encode(), add_bos=False, special=False)
    space = build_vocab()[0].index("▁")
    if ids[:2] != [space, newline]:
        raise ValueError(f"unexpected tokenization of the script {short_script(script)}")
    ids = ids[2:]
    if model.detokenize(ids).decode("utf-8", "replace") != script:
        raise ValueError(f"the script {short_script(script)} does not survive tokenization")
    return ids


def short_script(script: str) -> str:
    return repr(script) if len(script) <= 60 else repr(script[:57] + "...")


def _patterns(ids: list[int], k: int) -> list[tuple[int, ...]]:
    """State i fires when the last tokens are ids[i-k+1 .. i] (fewer at the script's start)."""
    return [tuple(ids[max(0, i - k + 1) : i + 1]) for i in range(len(ids))]


def _state_logit(pattern: tuple[int, ...]) -> float:
    # A longer match outweighs all shorter ones together (they can fire too: a pattern from the
    # script's start may also end the current window).
    return _STATE_LOGIT * 2.0 ** (len(pattern) - 1)


def _script_is_unambiguous(ids: list[int], k: int, stop_id: int) -> bool:
    """Simulate the scripted logits at every step (prompt tokens count as non-script)."""
    patterns = _patterns(ids, k)
    successors = [*ids[1:], stop_id]
    other = -1
    for t in range(-1, len(ids)):
        window = [other] * k + ids[: t + 1]
        logits: dict[int, float] = {ids[0]: _DEFAULT_LOGIT}
        for pattern, nxt in zip(patterns, successors, strict=True):
            if tuple(window[-len(pattern) :]) == pattern:
                logits[nxt] = logits.get(nxt, 0.0) + _state_logit(pattern)
        want = successors[t] if t >= 0 else ids[0]
        best_other = max((v for tok, v in logits.items() if tok != want), default=0.0)
        if logits.get(want, 0.0) - max(best_other, 0.0) < _MIN_MARGIN:
            return False
    return True


def _attention_gap(theta: np.ndarray, offsets: range, n_ctx: int) -> float:
    """Sum-of-cosines score at the wanted offset minus the best score at any other distance."""
    deltas = np.arange(-max(offsets), n_ctx + 1)
    deltas = deltas[deltas != 0]
    best = -np.inf
    for start in range(0, len(deltas), 4096):
        chunk = deltas[start : start + 4096]
        best = max(best, float(np.cos(np.outer(chunk, theta)).sum(axis=1).max()))
    return float(len(theta) - best)


@dataclass(frozen=True)
class ScriptedWeights:
    """The built weights of a scripted model, as numpy arrays (ggml shapes reversed).

    Layer 0 holds them; every further layer is zero (and, with post-norms, its post-norm
    weights are zero too), so it passes the residual stream through unchanged.
    """

    n_embd: int
    n_head: int
    n_ff: int
    n_rot: int
    rope_base: float
    embd: np.ndarray  # (n_vocab, n_embd)
    output: np.ndarray  # (n_vocab, n_embd)
    wq: np.ndarray  # (n_embd, n_embd), and wk, wv, wo alike
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    gate: np.ndarray  # (n_ff, n_embd)
    up: np.ndarray  # (n_ff, n_embd)
    down: np.ndarray  # (n_embd, n_ff)
    attn_post_norm: np.ndarray | None = None  # (n_embd,), GLM's norm of the attention output
    ffn_post_norm: np.ndarray | None = None  # (n_embd,), and of the FFN output


def script_design(
    ids: list[int],
    script: str,
    *,
    n_vocab: int,
    stop_id: int,
    n_ctx: int,
    min_n_embd: int,
    post_norms: bool = False,
    half_rotary: bool = False,
) -> ScriptedWeights:
    """Weights whose greedy continuation of any prompt is ``ids`` and then ``stop_id``.

    * embeddings: dim 0 is a constant carrier; every script token has a one-hot "identity" dim
      (all other tokens share one "other" dim), so every embedding has the same norm;
    * layer 0 attention: head ``h - 1`` attends exactly ``h`` positions back (RoPE: a query and
      key whose rotations only line up at distance ``h``) and copies that token's identity into
      its own block of dims, for ``h = 1 .. k-1``;
    * layer 0 FFN: one SwiGLU neuron per script position ``i`` (an AND: fires only when the
      last ``min(i + 1, k)`` tokens equal the script's tokens up to ``i``) writes a state dim;
    * output: state ``i`` votes for the next script token (``stop_id`` after the last); with no
      state firing, the carrier makes the script's first token win.

    ``post_norms`` (GLM): the attention and the FFN outputs go through an RMS norm before they
    join the residual stream. One more head (attending everywhere, so it reads the carrier)
    and one more FFN neuron add a large constant to their block's output; its norm is then
    about constant, the norm weights scale the wanted dims back to 1 and drop the constant.
    ``half_rotary`` (GLM): RoPE turns only the first half of each head, in NeoX pairs
    ``(j, j + n_rot / 2)`` (M-RoPE gives text tokens the same angle in every section).
    """
    n_script = len(ids)
    contexts = range(SCRIPT_MIN_CONTEXT, SCRIPT_MAX_CONTEXT + 1)
    k = next((c for c in contexts if _script_is_unambiguous(ids, c, stop_id)), None)
    if k is None:
        raise ValueError(
            f"script {short_script(script)} repeats a run of {SCRIPT_MAX_CONTEXT} tokens with "
            "different continuations; a scripted model cannot tell those positions apart"
        )
    distinct = list(dict.fromkeys(ids))
    slot = {tok: s for s, tok in enumerate(distinct)}
    m = len(distinct) + 1  # identity slots, the last one for "any other token"
    other = m - 1
    head_dim = 32 if half_rotary else 16  # at least 8 rotated pairs
    while head_dim < m:
        head_dim *= 2
    n_rot = head_dim // 2 if half_rotary else head_dim
    extra = 1 if post_norms else 0  # the constant head, dim and neuron
    n_dims = 1 + k * m + n_script + 2 * extra  # carrier, k identity blocks, one state per step
    n_embd = 64
    while n_embd < max(min_n_embd, n_dims, (k - 1 + extra) * head_dim):
        n_embd *= 2
    if n_embd > SCRIPT_MAX_N_EMBD:
        raise ValueError(
            f"script {short_script(script)} is too long for a scripted model ({n_script} "
            f"tokens, {len(distinct)} distinct; it would need n_embd {n_embd} > "
            f"{SCRIPT_MAX_N_EMBD})"
        )
    n_head = n_embd // head_dim
    n_ff = 32 * -(-(n_script + extra) // 32)  # one neuron per script position

    def ident(h: int, s: int) -> int:  # dim holding "the token h positions back has slot s"
        return 1 + h * m + s

    def state(i: int) -> int:
        return 1 + k * m + i

    attn_const, ffn_const = 1 + k * m + n_script, 2 + k * m + n_script

    # RoPE: pick the frequency base that best separates the wanted offsets from all others.
    offsets = range(1, k)
    pairs = np.arange(n_rot // 2)
    best_base, best_gap = 2.0, -np.inf
    for base in (1.5, 2.0, 3.0):
        gap = _attention_gap(base ** (-2.0 * pairs / n_rot), offsets, n_ctx)
        if gap > best_gap:
            best_base, best_gap = base, gap
    if best_gap < 0.5:
        raise ValueError(f"n_ctx {n_ctx} is too long for the scripted attention")
    theta = best_base ** (-2.0 * pairs / n_rot)
    amp = _ATTN_MARGIN / best_gap
    # The two dims of rotated pair j within a head.
    first, second = (pairs, pairs + n_rot // 2) if half_rotary else (2 * pairs, 2 * pairs + 1)

    # Embeddings: carrier 1 in dim 0, identity 1 in the token's slot at offset 0.
    embd = np.zeros((n_vocab, n_embd))
    embd[:, 0] = 1.0
    embd[:, ident(0, other)] = 1.0
    for tok, s in slot.items():
        embd[tok, ident(0, other)] = 0.0
        embd[tok, ident(0, s)] = 1.0

    # RMS-norm scale factors (all vectors have the designed norm): embedding (carrier + one
    # identity), after the attention (carrier + k identities), after the FFN (+ one state).
    kappa0 = np.sqrt(n_embd / 2.0)
    kappa1 = np.sqrt(n_embd / (1.0 + k))
    kappa2 = np.sqrt(n_embd / (2.0 + k))

    out = np.zeros((n_vocab, n_embd))
    out[ids[0], 0] = _DEFAULT_LOGIT / kappa2
    for i, (pattern, nxt) in enumerate(zip(_patterns(ids, k), [*ids[1:], stop_id], strict=True)):
        out[nxt, state(i)] += _state_logit(pattern) / kappa2

    # Layer 0 attention: head h-1 looks h positions back and copies the identity block.
    wq = np.zeros((n_embd, n_embd))
    wk = np.zeros((n_embd, n_embd))
    wv = np.zeros((n_embd, n_embd))
    wo = np.zeros((n_embd, n_embd))
    q_scale = amp * np.sqrt(head_dim) / kappa0  # llama.cpp scales scores by 1/sqrt(head_dim)
    for h in offsets:
        base_dim = (h - 1) * head_dim
        # score(distance d) = amp * sum_j cos((d - h) * theta_j): rotations align at d == h
        wq[base_dim + first, 0] = q_scale * np.cos(h * theta)
        wq[base_dim + second, 0] = -q_scale * np.sin(h * theta)
        wk[base_dim + first, 0] = 1.0 / kappa0
        for s in range(m):
            wv[base_dim + s, ident(0, s)] = 1.0
            wo[ident(h, s), base_dim + s] = 1.0 / kappa0

    # Layer 0 FFN: neuron i = AND over the last len(pattern_i) tokens -> state dim i.
    gate = np.zeros((n_ff, n_embd))
    up = np.zeros((n_ff, n_embd))
    down = np.zeros((n_embd, n_ff))
    fire = _GATE / 2.0
    silu_fire = fire / (1.0 + np.exp(-fire))
    for i, pattern in enumerate(_patterns(ids, k)):
        for h, tok in enumerate(reversed(pattern)):
            gate[i, ident(h, slot[tok])] = _GATE / kappa1
        gate[i, 0] = -_GATE * (len(pattern) - 0.5) / kappa1
        up[i, 0] = 1.0 / kappa1
        down[state(i), i] = 1.0 / silu_fire

    attn_post = ffn_post = None
    if post_norms:
        big = _POST_NORM_CONSTANT
        constant_head = (k - 1) * head_dim  # no query or key: it attends to every position
        wv[constant_head, 0] = 1.0
        wo[attn_const, constant_head] = big / kappa0
        gate[n_script, 0] = fire / kappa1  # always fires
        up[n_script, 0] = 1.0 / kappa1
        down[ffn_const, n_script] = big / silu_fire
        # After the norm a dim holding 1 next to the constant is sqrt(n_embd / (big^2 + n)).
        attn_post = np.zeros(n_embd)
        attn_post[ident(1, 0) : ident(k, 0)] = np.sqrt((big * big + k - 1) / n_embd)
        ffn_post = np.zeros(n_embd)
        ffn_post[state(0) : state(n_script)] = np.sqrt((big * big + 1) / n_embd)

    return ScriptedWeights(
        n_embd=n_embd,
        n_head=n_head,
        n_ff=n_ff,
        n_rot=n_rot,
        rope_base=best_base,
        embd=embd,
        output=out,
        wq=wq,
        wk=wk,
        wv=wv,
        wo=wo,
        gate=gate,
        up=up,
        down=down,
        attn_post_norm=attn_post,
        ffn_post_norm=ffn_post,
    )


def write_scripted_llama(
    path: Path,
    script: str,
    *,
    n_ctx: int = 2048,
    min_n_embd: int = 64,
    n_layer: int = 2,
    chat_template: str | None = DEFAULT_TEMPLATE,
    name: str = "tiny-llama-scripted",
) -> Path:
    """Write a llama GGUF whose greedy reply to any prompt is ``script`` and then ``</s>``.

    The script's tokens are :func:`script_tokens`; the weights are :func:`script_design`'s.
    ``k`` (3..8) is the smallest context that tells the script's positions apart, so repeated
    tokens and words are fine; a script that repeats a run of 8 tokens with different
    continuations raises ValueError. ``n_embd`` grows (power of two, at least ``min_n_embd``)
    with the script: 64 for ~10 tokens, 128 for ~25, up to 1024 (ValueError beyond).

    Limits: a prompt that itself ends with the script's first tokens (or any k-token run of
    the script) resumes the script from there; otherwise the prompt does not matter, also at
    temperature > 0 (the script's logits lead by >= 10).
    """
    if n_layer < 1:
        raise ValueError("n_layer must be >= 1")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    design = script_design(
        script_tokens(script),
        script,
        n_vocab=len(build_vocab()[0]),
        stop_id=EOS_ID,
        n_ctx=n_ctx,
        min_n_embd=min_n_embd,
    )
    n_embd, n_ff = design.n_embd, design.n_ff
    w = _llama_writer(
        path,
        name=name,
        n_ctx=n_ctx,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=design.n_head,
        n_ff=n_ff,
        rope_freq_base=design.rope_base,
        chat_template=chat_template,
    )
    w.add_tensor("token_embd.weight", as_f16(design.embd))
    w.add_tensor("output_norm.weight", as_f32(np.ones(n_embd)))
    w.add_tensor("output.weight", as_f16(design.output))
    zero_sq = np.zeros((n_embd, n_embd))
    for layer in range(n_layer):
        p = f"blk.{layer}."
        first = layer == 0
        w.add_tensor(p + "attn_norm.weight", as_f32(np.ones(n_embd)))
        w.add_tensor(p + "attn_q.weight", as_f16(design.wq if first else zero_sq))
        w.add_tensor(p + "attn_k.weight", as_f16(design.wk if first else zero_sq))
        w.add_tensor(p + "attn_v.weight", as_f16(design.wv if first else zero_sq))
        w.add_tensor(p + "attn_output.weight", as_f16(design.wo if first else zero_sq))
        w.add_tensor(p + "ffn_norm.weight", as_f32(np.ones(n_embd)))
        w.add_tensor(
            p + "ffn_gate.weight", as_f16(design.gate if first else np.zeros((n_ff, n_embd)))
        )
        w.add_tensor(p + "ffn_up.weight", as_f16(design.up if first else np.zeros((n_ff, n_embd))))
        w.add_tensor(
            p + "ffn_down.weight", as_f16(design.down if first else np.zeros((n_embd, n_ff)))
        )

    finish_gguf(w)
    return path


def clip_writer(
    path: Path,
    *,
    name: str,
    projector: str,
    activation: str,
    n_embd: int,
    n_ff: int,
    n_layer: int,
    n_head: int,
    projection_dim: int,
    eps: float,
    image_size: int,
    patch_size: int,
    image_mean: tuple[float, float, float],
    image_std: tuple[float, float, float],
) -> gguf.GGUFWriter:
    """A GGUFWriter with an mmproj's vision metadata (``clip.vision.*``), no tensors yet."""
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.has_text_encoder", False)
    w.add_bool(f"clip.use_{activation}", True)
    w.add_string("clip.projector_type", projector)
    w.add_uint32("clip.vision.embedding_length", n_embd)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.block_count", n_layer)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_uint32("clip.vision.projection_dim", projection_dim)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", eps)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    w.add_array("clip.vision.image_mean", list(image_mean))
    w.add_array("clip.vision.image_std", list(image_std))
    return w


def normal_f32(rng: np.random.Generator) -> Callable[..., np.ndarray]:
    """A maker of random float32 tensors, ``rnd(rows, cols, scale=0.02)``, drawn from ``rng``."""

    def rnd(*shape: int, scale: float = 0.02) -> np.ndarray:
        return as_f32(rng.normal(0.0, scale, size=shape))

    return rnd


def f32_ones(n: int) -> np.ndarray:
    return as_f32(np.ones(n))


def f32_zeros(n: int) -> np.ndarray:
    return as_f32(np.zeros(n))


def write_tiny_mmproj(
    path: Path,
    *,
    text_n_embd: int = 64,
    image_size: int = 32,
    patch_size: int = 8,
    seed: int = 0,
    n_embd: int = 32,
    n_layer: int = 2,
    n_head: int = 4,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write a random-weight ``clip`` mmproj GGUF with projector ``mlp`` (the llava graph).

    ``metadata``: keys set after the normal ones, for hostile projectors (see
    :func:`write_tiny_llama`).

    An image becomes ``(image_size // patch_size) ** 2`` embeddings (16 at the defaults) of width
    ``text_n_embd``; that width is stored as ``clip.vision.projection_dim`` and must equal the
    text model's ``llama.embedding_length`` (mtmd refuses the pair otherwise). ``n_layer`` must
    be >= 2 because the llava graph skips the last vision layer.
    """
    if image_size % patch_size:
        raise ValueError("image_size must be a multiple of patch_size")
    if n_layer < 2:
        raise ValueError("the llava graph needs n_layer >= 2 (it skips the last layer)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed + 1)
    n_ff = 2 * n_embd  # must differ from n_embd, or mtmd "fixes" up/down as swapped
    n_patches = (image_size // patch_size) ** 2
    mm_hidden = text_n_embd

    w = clip_writer(
        path,
        name="tiny-mmproj",
        projector="mlp",
        activation="gelu",
        n_embd=n_embd,
        n_ff=n_ff,
        n_layer=n_layer,
        n_head=n_head,
        projection_dim=text_n_embd,
        eps=1e-6,
        image_size=image_size,
        patch_size=patch_size,
        image_mean=(0.5, 0.5, 0.5),
        image_std=(0.5, 0.5, 0.5),
    )
    rnd, ones, zeros = normal_f32(rng), f32_ones, f32_zeros

    # numpy shapes are ggml shapes reversed
    w.add_tensor("v.patch_embd.weight", rnd(n_embd, 3, patch_size, patch_size))
    w.add_tensor("v.position_embd.weight", rnd(n_patches, n_embd))
    for i in range(n_layer):
        p = f"v.blk.{i}."
        for t in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(p + t + ".weight", rnd(n_embd, n_embd))
            w.add_tensor(p + t + ".bias", zeros(n_embd))
        w.add_tensor(p + "ln1.weight", ones(n_embd))
        w.add_tensor(p + "ln1.bias", zeros(n_embd))
        w.add_tensor(p + "ln2.weight", ones(n_embd))
        w.add_tensor(p + "ln2.bias", zeros(n_embd))
        w.add_tensor(p + "ffn_up.weight", rnd(n_ff, n_embd))  # ggml {n_embd, n_ff}
        w.add_tensor(p + "ffn_up.bias", zeros(n_ff))
        w.add_tensor(p + "ffn_down.weight", rnd(n_embd, n_ff))  # ggml {n_ff, n_embd}
        w.add_tensor(p + "ffn_down.bias", zeros(n_embd))
    w.add_tensor("mm.0.weight", rnd(mm_hidden, n_embd))  # ggml {n_embd, mm_hidden}
    w.add_tensor("mm.0.bias", zeros(mm_hidden))
    w.add_tensor("mm.2.weight", rnd(text_n_embd, mm_hidden))  # ggml {mm_hidden, text_n_embd}
    w.add_tensor("mm.2.bias", zeros(text_n_embd))

    finish_gguf(w, metadata)
    return path


def png_bytes(
    size: tuple[int, int] = (32, 32),
    color: tuple[int, int, int] = (200, 120, 40),
) -> bytes:
    """A solid-colour RGB PNG, encoded with zlib only (no Pillow needed; Pillow reads it)."""
    width, height = size
    row = b"\x00" + bytes(color) * width  # filter type 0 per row
    raw = row * height

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def write_tiny_png(
    path: Path,
    size: tuple[int, int] = (32, 32),
    color: tuple[int, int, int] = (200, 120, 40),
) -> Path:
    """Write :func:`png_bytes` to ``path`` and return it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(size, color))
    return path
