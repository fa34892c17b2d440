"""A small, bounded reader of a GGUF file's header: its metadata and tensor table.

llama.cpp trusts the header: `block_count = 100000` aborts the whole process (SIGABRT, no
message) before any error can be returned. So the header is read here first, with every count
and length checked against the bytes the file really has, and the values llama.cpp would
choke on are refused with a sentence naming the key (see `model_files.check_model_values`).

Arrays are not kept (the vocabulary alone can hold 150,000 strings): only their length, and the
values of short numeric arrays (per-layer head counts). Nothing here allocates in proportion
to a number read from the file.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kotonia_tui.regular_files import open_regular

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_KEPT_ARRAY = 1024  # numeric arrays up to this length keep their values (per-layer values)
MAX_NAME_BYTES = 65_536  # a key or tensor name longer than this is not a real one
MAX_DIMS = 4  # GGML_MAX_DIMS

# GGUF value types: struct format of the scalar types; 8 is a string, 9 an array.
_SCALARS = {
    0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"
}  # fmt: skip
_STRING, _ARRAY = 8, 9


class GgufFormatError(ValueError):
    """The header cannot be read; the message says where and why (one line)."""


@dataclass(frozen=True)
class ArrayInfo:
    """An array value: its element type and length (its values only when short and numeric)."""

    element_type: int
    length: int
    values: tuple[Any, ...] | None = None


@dataclass
class GgufHeader:
    version: int
    size: int  # bytes in the file
    metadata: dict[str, Any] = field(default_factory=dict)  # scalars, strings, ArrayInfo
    tensors: dict[str, tuple[tuple[int, ...], int, int]] = field(default_factory=dict)
    data_start: int = 0  # where tensor data begins (aligned)

    @property
    def architecture(self) -> str:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else ""


def read_header(path: Path) -> GgufHeader:
    """Read `path`'s header; raises `GgufFormatError`, `ReadError` (not a regular file: a FIFO
    would block the open), or OSError when it cannot be read."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size < 24:
            raise GgufFormatError(f"the file is {size} bytes, too short for a GGUF header")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return _Reader(view, size).header()


class _Reader:
    def __init__(self, data: mmap.mmap, size: int) -> None:
        self.data = data
        self.size = size
        self.at = 0

    def _take(self, count: int, what: str) -> bytes:
        if count < 0 or self.at + count > self.size:
            raise GgufFormatError(
                f"{what} at byte {self.at} runs past the end of the file ({self.size} bytes)"
            )
        chunk = self.data[self.at : self.at + count]
        self.at += count
        return chunk

    def _unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack("<" + fmt, self._take(struct.calcsize(fmt), what))[0]

    def _string(self, what: str, limit: int | None = None) -> str:
        length = self._unpack("Q", what)
        if limit is not None and length > limit:
            raise GgufFormatError(f"{what} at byte {self.at} claims {length} bytes")
        return self._take(length, what).decode("utf-8", "replace")

    def _skip_string(self, what: str) -> None:
        length = self._unpack("Q", what)
        if length > self.size - self.at:
            raise GgufFormatError(f"{what} at byte {self.at} runs past the end of the file")
        self.at += length

    def header(self) -> GgufHeader:
        if self._take(4, "the magic") != MAGIC:
            raise GgufFormatError("not a GGUF file")
        version = self._unpack("I", "the version")
        if version not in VERSIONS:
            raise GgufFormatError(f"GGUF version {version} is not one llama.cpp reads (2 or 3)")
        tensor_count = self._unpack("Q", "the tensor count")
        kv_count = self._unpack("Q", "the metadata count")
        # Every entry takes at least 12 bytes: counts past that are impossible, not just big.
        for count, what in ((tensor_count, "tensors"), (kv_count, "metadata entries")):
            if count * 12 > self.size:
                raise GgufFormatError(f"the header claims {count} {what} in {self.size} bytes")
        header = GgufHeader(version=version, size=self.size)
        for _ in range(kv_count):
            key = self._string("a metadata key", MAX_NAME_BYTES)
            header.metadata[key] = self._value(self._unpack("I", f"the type of {key}"), key, 0)
        for _ in range(tensor_count):
            name = self._string("a tensor name", MAX_NAME_BYTES)
            n_dims = self._unpack("I", f"the dimensions of {name}")
            if not 1 <= n_dims <= MAX_DIMS:
                raise GgufFormatError(f"tensor {name} has {n_dims} dimensions (1 to {MAX_DIMS})")
            dims = tuple(self._unpack("Q", f"a dimension of {name}") for _ in range(n_dims))
            kind = self._unpack("I", f"the type of {name}")
            offset = self._unpack("Q", f"the offset of {name}")
            header.tensors[name] = (dims, kind, offset)
        alignment = header.metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise GgufFormatError(f"general.alignment is {alignment!r}, not a power of two")
        header.data_start = -(-self.at // alignment) * alignment
        for name, (_dims, _kind, offset) in header.tensors.items():
            if header.data_start + offset > self.size:
                raise GgufFormatError(
                    f"tensor {name} starts past the end of the file (the file is truncated?)"
                )
        return header

    def _value(self, kind: int, key: str, depth: int) -> Any:
        if kind in _SCALARS:
            return self._unpack(_SCALARS[kind], key)
        if kind == _STRING:
            return self._string(key)
        if kind != _ARRAY:
            raise GgufFormatError(f"{key} has an unknown value type {kind}")
        if depth > 2:
            raise GgufFormatError(f"{key} nests arrays too deeply")
        element = self._unpack("I", f"the element type of {key}")
        length = self._unpack("Q", f"the length of {key}")
        if element in _SCALARS:
            width = struct.calcsize(_SCALARS[element])
            if length * width > self.size - self.at:
                raise GgufFormatError(f"{key} claims {length} values, more than the file holds")
            if length <= MAX_KEPT_ARRAY:
                raw = self._take(length * width, key)
                return ArrayInfo(
                    element, length, struct.unpack(f"<{length}{_SCALARS[element]}", raw)
                )
            self.at += length * width
            return ArrayInfo(element, length)
        if length * 8 > self.size - self.at:  # a string or an array takes 8 bytes at least
            raise GgufFormatError(f"{key} claims {length} items, more than the file holds")
        for _ in range(length):
            if element == _STRING:
                self._skip_string(key)
            else:
                self._value(element, key, depth + 1)
        return ArrayInfo(element, length)
