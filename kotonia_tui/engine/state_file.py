"""One saved KV state on disk: what it was made with, the items it holds, and the state bytes.

Layout (little-endian):

    b"KOTOKV01"                         magic and format version
    32 bytes                            sha256 of everything after it
    u32                                 length of the header
    header                              JSON: the key, the item count, the images, the sizes
    n_items * i32                       the token of each item; -1 where an image is
    state                               llama_state_seq_get_data's bytes for sequence 0

The digest covers every byte after it, so a flipped byte or a truncated file is found before
llama.cpp reads anything. The key (model fingerprint, projector fingerprint, profile,
llama.cpp version, KV layout) is compared with the loaded engine's; a file made for anything
else is refused. Reading is in two steps: `read_head` gives the key and the items, cheaply, so
the caller can decide whether the state is worth loading at all; `read_state` then reads the
state and checks the digest over the whole file.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from array import array
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kotonia_tui.engine.items import ImageItem, PromptItem, cells_of

MAGIC = b"KOTOKV01"
DIGEST_BYTES = 32
_HEADER_LEN = struct.Struct("<I")
MAX_HEADER_BYTES = 16 << 20  # images listed in the header: far more than any window holds
IMAGE_SLOT = -1
CHUNK_BYTES = 4 << 20  # hashed and written at a time: a few milliseconds of one core


class StateFileError(Exception):
    """The file is not a usable saved state; the message says what is wrong with it."""


@dataclass(frozen=True)
class StateKey:
    """What a KV state depends on besides its items. Two engines with equal keys compute the
    same KV for the same items."""

    model: str  # fingerprint of the model file (`fingerprint`)
    mmproj: str  # of the projector ("" without one): image items hold its embeddings
    profile: str  # the model profile's name
    llama_cpp: str  # the library version: its state format and kernels
    kv_layout: str  # what shapes the cache: flash attention (V transposed or not), types

    def as_dict(self) -> dict[str, str]:
        return {
            "model": self.model,
            "mmproj": self.mmproj,
            "profile": self.profile,
            "llama_cpp": self.llama_cpp,
            "kv_layout": self.kv_layout,
        }

    @property
    def digest(self) -> str:
        """A short name for the key, used in file names."""
        text = json.dumps(self.as_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class StateHead:
    """A saved state's key and items, read without its state bytes."""

    path: Path
    key: dict[str, Any]
    items: tuple[PromptItem, ...]
    state_bytes: int
    body_offset: int  # where the state bytes start

    @property
    def cells(self) -> int:
        return cells_of(self.items)


def encode_items(items: tuple[PromptItem, ...]) -> tuple[bytes, list[dict[str, Any]]]:
    """The token array (images as -1) and the images' descriptions, in order."""
    tokens = array("i")
    images: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if isinstance(item, ImageItem):
            tokens.append(IMAGE_SLOT)
            images.append(
                {"at": index, "key": item.key, "cells": item.cells, "positions": item.positions}
            )
        else:
            tokens.append(item)
    return _little_endian(tokens).tobytes(), images


def write_state(
    out: IO[bytes],
    key: StateKey,
    items: tuple[PromptItem, ...],
    state: memoryview,
    *,
    each_chunk: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> int:
    """Write a whole state file to `out` (seekable); returns its size in bytes.

    The state bytes are hashed and written `CHUNK_BYTES` at a time, each chunk inside
    `each_chunk()` (the writer pauses there while a reply runs, see foreground.py); the
    digest is written into its place at the start once everything after it is out.
    """
    token_bytes, images = encode_items(items)
    header = json.dumps(
        {
            "key": key.as_dict(),
            "items": len(items),
            "images": images,
            "state_bytes": state.nbytes,
        },
        sort_keys=True,
    ).encode()
    digest = hashlib.sha256()
    parts = (_HEADER_LEN.pack(len(header)), header, token_bytes)
    out.write(MAGIC)
    out.write(bytes(DIGEST_BYTES))  # its place; the digest is known at the end
    for part in parts:
        digest.update(part)
        out.write(part)
    for start in range(0, state.nbytes, CHUNK_BYTES):
        with each_chunk():
            chunk = state[start : start + CHUNK_BYTES]
            digest.update(chunk)
            out.write(chunk)
    out.seek(len(MAGIC))
    out.write(digest.digest())
    out.seek(0, io.SEEK_END)
    return len(MAGIC) + DIGEST_BYTES + sum(len(p) for p in parts) + state.nbytes


def read_head(path: Path, expected: StateKey) -> StateHead:
    """The file's key and items; StateFileError if it is damaged, cut short or made for
    another key. The state bytes are not read (nor checked) here."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        start = handle.read(len(MAGIC) + DIGEST_BYTES + _HEADER_LEN.size)
        if len(start) < len(MAGIC) + DIGEST_BYTES + _HEADER_LEN.size:
            raise StateFileError("shorter than a header")
        if start[: len(MAGIC)] != MAGIC:
            raise StateFileError("not a Kotonia KV state file (or another format version)")
        (header_len,) = _HEADER_LEN.unpack(start[len(MAGIC) + DIGEST_BYTES :])
        if header_len > MAX_HEADER_BYTES:
            raise StateFileError(f"a header of {header_len} bytes")
        raw = handle.read(header_len)
        if len(raw) < header_len:
            raise StateFileError("cut short in its header")
        header = _parse_header(raw)
        if header["key"] != expected.as_dict():
            raise StateFileError(f"made for another model, profile or build: {header['key']}")
        n_items = header["items"]
        token_bytes = handle.read(4 * n_items)
        if len(token_bytes) < 4 * n_items:
            raise StateFileError("cut short in its items")
    body_offset = len(start) + header_len + 4 * n_items
    if size != body_offset + header["state_bytes"]:
        raise StateFileError(
            f"{size} bytes where its header says {body_offset + header['state_bytes']}"
        )
    items = _decode_items(token_bytes, header["images"], n_items)
    return StateHead(path, header["key"], items, header["state_bytes"], body_offset)


def read_state(head: StateHead, into: Any) -> None:
    """Read the state bytes into `into` (a writable buffer of `head.state_bytes` bytes) and
    check the file's digest over everything; StateFileError if it does not match."""
    digest = hashlib.sha256()
    view = memoryview(into).cast("B")
    with head.path.open("rb") as handle:
        prefix = handle.read(len(MAGIC) + DIGEST_BYTES)
        stored = prefix[len(MAGIC) :]
        digest.update(handle.read(head.body_offset - len(prefix)))
        got = handle.readinto(view)
        if got != head.state_bytes or handle.read(1):
            raise StateFileError("its size changed while it was read")
    digest.update(view)
    if digest.digest() != stored:
        raise StateFileError("its digest does not match its content (the file is damaged)")


def _parse_header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateFileError(f"its header is not JSON ({exc})") from exc
    if not isinstance(header, dict) or not isinstance(header.get("key"), dict):
        raise StateFileError("its header has no key")
    for name in ("items", "state_bytes"):
        value = header.get(name)
        if type(value) is not int or value < 0:
            raise StateFileError(f"its header's {name} is {value!r}")
    if not isinstance(header.get("images"), list):
        raise StateFileError("its header has no image list")
    return header


def _decode_items(token_bytes: bytes, images: list[Any], n_items: int) -> tuple[PromptItem, ...]:
    tokens = array("i")
    tokens.frombytes(token_bytes)
    tokens = _little_endian(tokens)
    items: list[PromptItem] = list(tokens)
    slots = [i for i, t in enumerate(items) if t == IMAGE_SLOT]
    if len(slots) != len(images):
        raise StateFileError(f"{len(slots)} image slots for {len(images)} images")
    for slot, image in zip(slots, images, strict=True):
        try:
            item = ImageItem(str(image["key"]), int(image["cells"]), int(image["positions"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise StateFileError(f"an image entry is malformed: {image!r}") from exc
        if image.get("at") != slot or item.cells <= 0 or item.positions <= 0:
            raise StateFileError(f"an image entry does not fit its slot: {image!r}")
        items[slot] = item
    if any(isinstance(t, int) and t < 0 for t in items):
        raise StateFileError("a negative token")
    assert len(items) == n_items
    return tuple(items)


def _little_endian(values: array[int]) -> array[int]:
    if values.itemsize != 4:  # pragma: no cover - every platform llama.cpp runs on
        raise StateFileError("int is not 32-bit here")
    if struct.pack("=i", 1) != struct.pack("<i", 1):  # pragma: no cover - big-endian
        values = array("i", values)
        values.byteswap()
    return values


def fingerprint(path: Path, *, samples: int = 32, block: int = 64 << 10) -> str:
    """A stable identity for a model file without hashing gigabytes: its size, and the sha256
    of its first and last MiB (the GGUF header: metadata, tokenizer, tensor layout) and of
    `samples` blocks spread evenly through the weights.

    Hashing a 6 GB GGUF takes 10 s or more on a small machine, at every start; this reads
    about 4 MiB. Any other model, quantization, fine-tune or conversion differs in size, in
    its header or in the sampled weights. A file copied or touched keeps its fingerprint, so
    its saved states stay usable. A match with different weights would need an in-place edit
    that keeps the size and misses every sampled block; even then llama.cpp checks the layer
    count, cell count and cache layout when a state is loaded.
    """
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    edge = 1 << 20
    with path.open("rb") as handle:
        digest.update(handle.read(edge))
        span = max(0, size - 2 * edge - block)
        for index in range(samples if span else 0):
            handle.seek(edge + span * index // max(1, samples - 1))
            digest.update(handle.read(block))
        handle.seek(max(0, size - edge))
        digest.update(handle.read(edge))
    return f"{size}:{digest.hexdigest()[:32]}"
