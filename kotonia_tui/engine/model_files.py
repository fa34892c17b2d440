"""Checks on model files before llama.cpp sees them, so a mistake gets a sentence, not a crash.

`check_gguf` reads the header (`gguf_header`) and refuses values llama.cpp cannot survive: it
aborts the whole process on some (a `block_count` past its 512 layers, more experts used than
exist, a projector whose patch is larger than its image), so they are checked here against the
file itself, naming the key. `check_context` bounds `n_ctx` by the model's trained window and
by the machine's memory before a context is allocated (an absurd one fails only after minutes
and gigabytes: docs/decisions.md D-19).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from kotonia_tui.engine.errors import ModelFileError
from kotonia_tui.engine.gguf_header import ArrayInfo, GgufFormatError, GgufHeader, read_header
from kotonia_tui.regular_files import NotRegularFile, ReadError, open_regular

GGUF_MAGIC = b"GGUF"
MAX_LAYERS = 512  # llama.cpp's LLAMA_MAX_LAYERS: past it, loading aborts the process
MAX_POSITIONS = 2**31 - 1  # positions are 32-bit signed in llama.cpp
# How far past its trained window n_ctx may go: RoPE scaling stretches a model a few times at
# most; beyond that the setting is a mistake, not a choice.
MAX_CTX_STRETCH = 4
KV_BYTES = 2  # f16 cache cells, llama.cpp's default

_HOW_TO_SET = {
    "model": "set model_path in the profile or KOTONIA_MODEL_PATH",
    "mmproj": "set mmproj_path in the profile or KOTONIA_MMPROJ_PATH",
    "embedding model": (
        "set embedding_model_path in the profile or KOTONIA_EMBEDDING_MODEL_PATH (empty: the "
        "shipped all-MiniLM-L6-v2), or semantic_recall = false"
    ),
}
_BLOCK = re.compile(r"^(?:([a-z]+)\.)?blk\.(\d+)\.")  # blk.N., v.blk.N., enc.blk.N., ...
_TEXT_BLOCK_PREFIXES = (None, "enc", "dec")  # a text model's blocks (T5 has two stacks)
_N_CTX_HINT = "set a smaller n_ctx (the profile's n_ctx or KOTONIA_N_CTX)"


@dataclass(frozen=True)
class ModelFacts:
    """What the header says about a text model, for bounding n_ctx before loading it."""

    name: str
    n_ctx_train: int | None
    n_layer: int
    kv_bytes_per_token: int | None  # None: not a plain attention model (no estimate)


def check_gguf(path: Path, what: str) -> GgufHeader:
    """The file exists, is readable, is a GGUF, and its header holds values llama.cpp can load."""
    hint = _HOW_TO_SET.get(what, "check the path")
    if not path.exists():
        raise ModelFileError(f"{path}: {what} file not found; {hint}")
    try:
        # A FIFO would hang the open, a device would never end: refused before a read.
        with open_regular(path) as handle:
            magic = handle.read(4)
    except NotRegularFile as exc:
        raise ModelFileError(f"{path}: is {exc.kind}, not a {what} GGUF file; {hint}") from exc
    except ReadError as exc:
        raise ModelFileError(f"{path}: {what} file {exc.reason}") from exc
    except OSError as exc:
        raise ModelFileError(f"{path}: {what} file cannot be read ({exc.strerror})") from exc
    if magic != GGUF_MAGIC:
        raise ModelFileError(
            f"{path}: not a GGUF file (it starts with {magic!r}); {what} files must be GGUF"
        )
    try:
        header = read_header(path)
    except GgufFormatError as exc:
        raise ModelFileError(f"{path}: the GGUF header is damaged: {exc}") from exc
    except ReadError as exc:
        raise ModelFileError(f"{path}: {what} file {exc.reason}") from exc
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"{path}: {what} file cannot be read ({exc})") from exc
    problem = _clip_problem(header) if header.architecture == "clip" else _text_problem(header)
    if problem is not None:
        raise ModelFileError(f"{path}: {problem}; this {what} file cannot be loaded")
    return header


def model_facts(path: Path, header: GgufHeader) -> ModelFacts:
    arch = header.architecture
    meta = header.metadata
    n_layer = _int(meta.get(f"{arch}.block_count")) or 0
    train = _int(meta.get(f"{arch}.context_length"))
    return ModelFacts(
        name=str(meta.get("general.name") or path.stem),
        n_ctx_train=train if train and train > 0 else None,
        n_layer=n_layer,
        kv_bytes_per_token=_kv_bytes_per_token(header, n_layer),
    )


def check_context(facts: ModelFacts, n_ctx: int, *, memory_bytes: int | None = None) -> None:
    """Refuse an n_ctx the model or the machine cannot hold, naming the setting."""
    if n_ctx > MAX_POSITIONS:
        raise ModelFileError(f"n_ctx {n_ctx:,} is more than llama.cpp can address; {_N_CTX_HINT}")
    train = facts.n_ctx_train
    if train is not None and n_ctx > MAX_CTX_STRETCH * train:
        raise ModelFileError(
            f"n_ctx {n_ctx:,} is more than {MAX_CTX_STRETCH} times {facts.name}'s trained window "
            f"({train:,} tokens); set n_ctx to at most {MAX_CTX_STRETCH * train:,} "
            "(the profile's n_ctx or KOTONIA_N_CTX)"
        )
    memory = memory_bytes if memory_bytes is not None else physical_memory()
    if facts.kv_bytes_per_token is None or memory is None:
        return
    needed = facts.kv_bytes_per_token * n_ctx
    if needed > memory:
        raise ModelFileError(
            f"n_ctx {n_ctx:,} needs about {needed / 2**30:,.1f} GiB of KV cache for "
            f"{facts.name} ({facts.n_layer} layers), more than this machine's "
            f"{memory / 2**30:.1f} GiB of memory; {_N_CTX_HINT}"
        )


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _values(value: object) -> tuple[int, ...]:
    """A scalar or a per-layer array of integers as a tuple (empty when neither)."""
    single = _int(value)
    if single is not None:
        return (single,)
    if isinstance(value, ArrayInfo) and value.values is not None:
        return tuple(v for v in value.values if _int(v) is not None)
    return ()


def _blocks_in_file(header: GgufHeader, prefixes: tuple[str | None, ...]) -> int:
    indexes = [
        int(m.group(2))
        for name in header.tensors
        if (m := _BLOCK.match(name)) is not None and m.group(1) in prefixes
    ]
    return max(indexes) + 1 if indexes else 0


def _block_problem(header: GgufHeader, key: str, prefixes: tuple[str | None, ...]) -> str | None:
    raw = header.metadata.get(key)
    if raw is None:
        return None
    count = _int(raw)
    if count is None or count < 1:
        return f"{key} is {raw!r}, not a positive whole number"
    if count > MAX_LAYERS:
        return f"{key} is {count:,}, more than the {MAX_LAYERS} layers llama.cpp can load"
    present = _blocks_in_file(header, prefixes)
    if count > present:
        return f"{key} is {count:,} but the file holds tensors for {present} blocks"
    return None


def _positive(meta: dict[str, object], key: str) -> str | None:
    """A problem sentence when `key` is present but not a positive whole number."""
    raw = meta.get(key)
    value = _int(raw)
    if raw is not None and (value is None or value < 1):
        return f"{key} is {raw!r}, not a positive whole number"
    return None


def _text_problem(header: GgufHeader) -> str | None:
    arch = header.architecture
    meta = header.metadata
    if not arch:
        return "general.architecture is missing"
    problem = _block_problem(header, f"{arch}.block_count", _TEXT_BLOCK_PREFIXES)
    problem = problem or _positive(meta, f"{arch}.context_length")
    if problem is not None:
        return problem
    train = _int(meta.get(f"{arch}.context_length"))
    if train is not None and train > MAX_POSITIONS:
        return f"{arch}.context_length is {train:,}, more than llama.cpp can address"
    used = _int(meta.get(f"{arch}.expert_used_count")) or 0
    total = _int(meta.get(f"{arch}.expert_count")) or 0
    if used > total:
        return f"{arch}.expert_used_count is {used} but {arch}.expert_count is {total}"
    return None


def _clip_problem(header: GgufHeader) -> str | None:
    meta = header.metadata
    for part, prefix in (("vision", "v"), ("audio", "a")):
        base = f"clip.{part}"
        problem = _block_problem(header, f"{base}.block_count", (prefix,))
        problem = problem or _positive(meta, f"{base}.attention.head_count")
        if problem is not None:
            return problem
    problem = _positive(meta, "clip.vision.image_size")
    problem = problem or _positive(meta, "clip.vision.patch_size")
    if problem is not None:
        return problem
    image = _int(meta.get("clip.vision.image_size"))
    patch = _int(meta.get("clip.vision.patch_size"))
    if image is not None and patch is not None and patch > image:
        return f"clip.vision.patch_size ({patch}) is larger than clip.vision.image_size ({image})"
    return None


def _kv_bytes_per_token(header: GgufHeader, n_layer: int) -> int | None:
    """KV cache bytes per token over all layers, from the attention shape in the header."""
    arch = header.architecture
    meta = header.metadata
    embd = _int(meta.get(f"{arch}.embedding_length"))
    heads = _values(meta.get(f"{arch}.attention.head_count"))
    if not embd or not heads or n_layer < 1:
        return None
    kv_heads = _values(meta.get(f"{arch}.attention.head_count_kv")) or heads
    head_dim = embd // max(heads)
    key_len = _int(meta.get(f"{arch}.attention.key_length")) or head_dim
    value_len = _int(meta.get(f"{arch}.attention.value_length")) or head_dim
    per_layer = [kv_heads[i % len(kv_heads)] for i in range(n_layer)]
    return sum(per_layer) * (key_len + value_len) * KV_BYTES
