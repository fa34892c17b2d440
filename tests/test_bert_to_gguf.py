"""scripts/bert_to_gguf.py: a BERT sentence-embedding model in Hugging Face layout becomes a
GGUF that llama.cpp loads as an embedding model and that gives the same vectors as the
original network.

The model is a tiny random BERT the test writes (safetensors, vocab.txt, tokenizer files);
the reference vectors come from the same weights run through a plain numpy BERT forward pass
(mean pooling), so a wrong tensor name, a transposed matrix or a misspelt vocabulary fails.
"""

from __future__ import annotations

import importlib.util
import json
import math
import struct
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from kotonia_tui.engine import EmbeddingEngine

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bert_to_gguf.py"
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "keeper", "lit", "lamp", "light", "house", "##house", "sea", "##s", "bell"]
N_EMBD, N_HEAD, N_LAYER, N_FF, N_POS = 32, 2, 2, 64, 64


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bert_to_gguf", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def weights() -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(7)
    vocab = len(SPECIAL) + len(WORDS)

    def r(*shape: int) -> np.ndarray[Any, Any]:
        return rng.normal(0, 0.2, shape).astype(np.float32)

    w = {
        "embeddings.word_embeddings.weight": r(vocab, N_EMBD),
        "embeddings.position_embeddings.weight": r(N_POS, N_EMBD),
        "embeddings.token_type_embeddings.weight": r(2, N_EMBD),
        "embeddings.LayerNorm.weight": 1 + r(N_EMBD),
        "embeddings.LayerNorm.bias": r(N_EMBD),
        "pooler.dense.weight": r(N_EMBD, N_EMBD),  # not used for sentence vectors
        "pooler.dense.bias": r(N_EMBD),
    }
    for i in range(N_LAYER):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            w[f"{p}attention.self.{name}.weight"] = r(N_EMBD, N_EMBD)
            w[f"{p}attention.self.{name}.bias"] = r(N_EMBD)
        w[p + "attention.output.dense.weight"] = r(N_EMBD, N_EMBD)
        w[p + "attention.output.dense.bias"] = r(N_EMBD)
        w[p + "attention.output.LayerNorm.weight"] = 1 + r(N_EMBD)
        w[p + "attention.output.LayerNorm.bias"] = r(N_EMBD)
        w[p + "intermediate.dense.weight"] = r(N_FF, N_EMBD)
        w[p + "intermediate.dense.bias"] = r(N_FF)
        w[p + "output.dense.weight"] = r(N_EMBD, N_FF)
        w[p + "output.dense.bias"] = r(N_EMBD)
        w[p + "output.LayerNorm.weight"] = 1 + r(N_EMBD)
        w[p + "output.LayerNorm.bias"] = r(N_EMBD)
    return w


def write_safetensors(path: Path, tensors: dict[str, np.ndarray[Any, Any]]) -> None:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, array in tensors.items():
        data = array.tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def write_model(directory: Path, model_type: str = "bert") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    vocab = SPECIAL + WORDS
    config = {
        "model_type": model_type,
        "hidden_size": N_EMBD,
        "num_attention_heads": N_HEAD,
        "num_hidden_layers": N_LAYER,
        "intermediate_size": N_FF,
        "max_position_embeddings": N_POS,
        "vocab_size": len(vocab),
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
    }
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    added = [{"id": i, "content": t, "special": True} for i, t in enumerate(SPECIAL)]
    (directory / "tokenizer.json").write_text(json.dumps({"added_tokens": added}))
    names = {"pad_token": 0, "unk_token": 1, "cls_token": 2, "sep_token": 3, "mask_token": 4}
    (directory / "tokenizer_config.json").write_text(
        json.dumps({name: SPECIAL[i] for name, i in names.items()})
    )
    (directory / "1_Pooling").mkdir(exist_ok=True)
    (directory / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False})
    )
    write_safetensors(directory / "model.safetensors", weights())
    return directory


def reference(w: dict[str, np.ndarray[Any, Any]], ids: list[int]) -> np.ndarray[Any, Any]:
    """The original network's sentence vector: BERT forward, mean of the tokens, unit length."""

    def norm(x: Any, name: str) -> Any:
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-12) * w[name + ".weight"] + w[name + ".bias"]

    def dense(x: Any, name: str) -> Any:
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    n, d = len(ids), N_EMBD // N_HEAD
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    ).astype(np.float64)
    x = norm(x, "embeddings.LayerNorm")
    for i in range(N_LAYER):
        p = f"encoder.layer.{i}."
        q, k, v = (
            dense(x, f"{p}attention.self.{name}").reshape(n, N_HEAD, d).transpose(1, 0, 2)
            for name in ("query", "key", "value")
        )
        a = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        attended = (a @ v).transpose(1, 0, 2).reshape(n, N_EMBD)
        x = norm(
            x + dense(attended, p + "attention.output.dense"), p + "attention.output.LayerNorm"
        )
        h = dense(x, p + "intermediate.dense")
        h = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))  # exact GELU
        x = norm(x + dense(h, p + "output.dense"), p + "output.LayerNorm")
    pooled = x.mean(0)
    return np.asarray(pooled / np.linalg.norm(pooled))


@pytest.mark.parametrize("outtype", ["f32", "f16"])
def test_the_gguf_embeds_as_the_original_network(tmp_path: Path, outtype: str) -> None:
    model_dir = write_model(tmp_path / "tiny-bert")
    out = tmp_path / f"tiny-bert-{outtype}.gguf"
    assert script().main([str(model_dir), str(out), "--outtype", outtype]) == 0

    engine = EmbeddingEngine.open(out)
    try:
        assert engine.dimension == N_EMBD
        llama = engine._llama
        # WordPiece as BERT splits it, between [CLS] and [SEP].
        ids = llama.tokenize(b"The keepers lit the lighthouse bell", add_bos=True, special=False)
        vocab = SPECIAL + WORDS
        assert [vocab[i] for i in ids] == [
            "[CLS]", "the", "keeper", "##s", "lit", "the", "light", "##house", "bell", "[SEP]",
        ]  # fmt: skip
        vector = np.array(engine.embed("The keepers lit the lighthouse bell"))
        expected = reference(weights(), ids)
    finally:
        engine.close()
    # f16 matrices move the vector slightly; f32 matches the original to rounding.
    assert float(vector @ expected) > (0.9999 if outtype == "f32" else 0.999)


def test_a_model_that_is_not_bert_is_refused_with_the_file_named(tmp_path: Path, capsys) -> None:
    model_dir = write_model(tmp_path / "not-bert", model_type="llama")
    out = tmp_path / "out.gguf"
    assert script().main([str(model_dir), str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (f"bert_to_gguf: {model_dir / 'config.json'}: model_type is 'llama', not 'bert'")
    assert not out.exists()
