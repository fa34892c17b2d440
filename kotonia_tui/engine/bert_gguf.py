"""A BERT sentence-embedding model in Hugging Face layout, written as a GGUF llama.cpp loads.

Semantic recall's shipped model (all-MiniLM-L6-v2, engine/default_embedding.py) comes as
safetensors weights; this writes it as llama.cpp's `bert` architecture, once, into the cache
dir. scripts/bert_to_gguf.py is the same conversion for a user's own model folder.

The tensor names come from the `gguf` package's own name map for that architecture; the
vocabulary is WordPiece in llama.cpp's spelling (a word-initial piece gains U+2581, a "##"
continuation loses its "##", special tokens stay as they are); the special token ids come from
the tokenizer files; the attention is marked non-causal with the pooling type set, so
`Llama(embedding=True)` returns one pooled vector per text. Weight matrices are stored as f16
by default (half the size; the vectors differ from f32 by well under 1%), norms and biases as
f32.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from kotonia_tui.engine.errors import ModelFileError

SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
# Tensors a sentence-embedding model does not use: the classification pooler and the
# position-id buffer transformers saves with the weights.
UNUSED_TENSORS = ("pooler.", "embeddings.position_ids")
# Matrices llama.cpp multiplies (or looks rows up in) may be f16; the position and token-type
# embeddings are added to f32 activations, which its CPU backend does only in f32.
F16_TENSORS = (
    "token_embd.weight",
    ".attn_q.weight",
    ".attn_k.weight",
    ".attn_v.weight",
    ".attn_output.weight",
    ".ffn_up.weight",
    ".ffn_down.weight",
)


class ConvertError(ModelFileError):
    """A model folder cannot be converted; the message names the file or field."""


def read_safetensors(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    """Every tensor of a .safetensors file: an 8-byte header length, a JSON header, the data."""
    raw = path.read_bytes()
    if len(raw) < 8:
        raise ConvertError(f"{path}: too short to be a safetensors file")
    (header_len,) = struct.unpack("<Q", raw[:8])
    try:
        header = json.loads(raw[8 : 8 + header_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConvertError(f"{path}: unreadable safetensors header ({exc})") from exc
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = SAFETENSORS_DTYPES.get(info["dtype"])
        if dtype is None:
            raise ConvertError(f"{path}: tensor {name} has dtype {info['dtype']}, not F32/F16")
        start, end = info["data_offsets"]
        array = np.frombuffer(raw[base + start : base + end], dtype=dtype)
        tensors[name] = array.reshape(info["shape"])
    return tensors


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConvertError(f"{path}: missing") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConvertError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ConvertError(f"{path}: expected a JSON object")
    return data


def hparam(config: dict[str, Any], key: str, path: Path) -> int:
    value = config.get(key)
    if not isinstance(value, int):
        raise ConvertError(f"{path}: field {key} missing or not an integer")
    return value


def pooling_type(model_dir: Path) -> gguf.PoolingType:
    pooling_file = model_dir / "1_Pooling" / "config.json"
    if not pooling_file.is_file():
        return gguf.PoolingType.MEAN
    pooling = read_json(pooling_file)
    if pooling.get("pooling_mode_mean_tokens"):
        return gguf.PoolingType.MEAN
    if pooling.get("pooling_mode_cls_token"):
        return gguf.PoolingType.CLS
    raise ConvertError(f"{pooling_file}: only mean or CLS pooling can be written")


def vocabulary(model_dir: Path, n_vocab: int) -> tuple[list[str], list[gguf.TokenType]]:
    """WordPiece tokens in llama.cpp's spelling, and their token types."""
    vocab_file = model_dir / "vocab.txt"
    try:
        words = vocab_file.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError as exc:
        raise ConvertError(f"{vocab_file}: missing") from exc
    if len(words) != n_vocab:
        raise ConvertError(
            f"{vocab_file}: {len(words)} tokens, but config.json's vocab_size is {n_vocab}"
        )
    added = read_json(model_dir / "tokenizer.json").get("added_tokens", [])
    special = {entry["content"] for entry in added if entry.get("special")}
    tokens: list[str] = []
    types: list[gguf.TokenType] = []
    for word in words:
        if word in special:
            tokens.append(word)
            types.append(gguf.TokenType.CONTROL)
        else:
            tokens.append(word[2:] if word.startswith("##") else "\u2581" + word)
            types.append(gguf.TokenType.NORMAL)
    return tokens, types


def convert(model_dir: Path, out: Path, outtype: str = "f16", *, name: str | None = None) -> int:
    """Write `out` (named `name`, or the folder's name); returns the number of tensors written."""
    config_file = model_dir / "config.json"
    config = read_json(config_file)
    if config.get("model_type") != "bert":
        raise ConvertError(f"{config_file}: model_type is {config.get('model_type')!r}, not 'bert'")
    n_layer = hparam(config, "num_hidden_layers", config_file)
    n_vocab = hparam(config, "vocab_size", config_file)
    weights_file = model_dir / "model.safetensors"
    if not weights_file.is_file():
        raise ConvertError(f"{weights_file}: missing (only safetensors weights are read)")
    tensors = read_safetensors(weights_file)
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layer)

    writer = gguf.GGUFWriter(str(out), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    writer.add_name(name or model_dir.name)
    writer.add_context_length(hparam(config, "max_position_embeddings", config_file))
    writer.add_embedding_length(hparam(config, "hidden_size", config_file))
    writer.add_feed_forward_length(hparam(config, "intermediate_size", config_file))
    writer.add_block_count(n_layer)
    writer.add_head_count(hparam(config, "num_attention_heads", config_file))
    writer.add_layer_norm_eps(float(config.get("layer_norm_eps", 1e-12)))
    writer.add_causal_attention(False)
    writer.add_pooling_type(pooling_type(model_dir))
    writer.add_file_type(
        gguf.LlamaFileType.MOSTLY_F16 if outtype == "f16" else gguf.LlamaFileType.ALL_F32
    )

    tokens, types = vocabulary(model_dir, n_vocab)
    writer.add_token_type_count(int(config.get("type_vocab_size", 2)))
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(model_dir, n_vocab=n_vocab).add_to_gguf(writer)

    written = 0
    for name, array in tensors.items():
        if name.startswith("bert."):
            name = name[len("bert.") :]
        if name.startswith(UNUSED_TENSORS):
            continue
        gguf_name = name_map.get_name(name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ConvertError(f"{weights_file}: tensor {name} has no place in llama.cpp's BERT")
        data = array.astype(np.float32)
        if outtype == "f16" and gguf_name.endswith(F16_TENSORS):
            data = data.astype(np.float16)
        writer.add_tensor(gguf_name, data)
        written += 1

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return written
