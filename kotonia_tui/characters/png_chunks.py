"""Reading and writing the text chunks of a PNG file, where character cards hide their JSON.

Cards store base64 JSON in a `tEXt` chunk named `chara` (V2) or `ccv3` (V3). The chunks are read
here directly rather than through Pillow so that a damaged file gives a precise, one-line reason
(which chunk, at which byte) and so that reading a card never decodes the picture itself.
`iTXt` and `zTXt` chunks are read as well: a few editors write the card that way.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TEXT_CHUNK_TYPES = (b"tEXt", b"iTXt", b"zTXt")
# A compressed text chunk may not inflate past this: a card is text, not a zip bomb.
MAX_TEXT_BYTES = 64 * 1024 * 1024


class PngError(ValueError):
    """A file that is not a readable PNG; the message is one line saying why."""


@dataclass(frozen=True)
class TextChunk:
    chunk_type: str  # "tEXt", "iTXt" or "zTXt"
    keyword: str
    text: str


def iter_chunks(data: bytes) -> Iterator[tuple[bytes, bytes, int]]:
    """Yield (type, payload, offset) for each chunk up to and including IEND."""
    if not data.startswith(PNG_SIGNATURE):
        raise PngError("not a PNG file (the PNG signature is missing)")
    offset = len(PNG_SIGNATURE)
    first = True
    while True:
        if offset + 8 > len(data):
            raise PngError(
                f"truncated PNG (the file ends at byte {len(data)} before the IEND chunk)"
            )
        length, chunk_type = struct.unpack(">I4s", data[offset : offset + 8])
        if not chunk_type.isalpha() or not chunk_type.isascii():
            raise PngError(f"damaged PNG (the chunk at byte {offset} has no valid type)")
        name = chunk_type.decode("ascii")
        if first and chunk_type != b"IHDR":
            raise PngError(f"damaged PNG (the first chunk is {name!r}, not 'IHDR')")
        end = offset + 12 + length
        if length > 0x7FFFFFFF or end > len(data):
            raise PngError(
                f"truncated PNG (chunk {name!r} at byte {offset} runs past the end of the file)"
            )
        yield chunk_type, data[offset + 8 : offset + 8 + length], offset
        if chunk_type == b"IEND":
            return
        offset = end
        first = False


def read_text_chunks(data: bytes) -> list[TextChunk]:
    """All text chunks in file order. Raises `PngError` for a non-PNG or damaged file."""
    return [
        _decode_text(chunk_type, payload, offset)
        for chunk_type, payload, offset in iter_chunks(data)
        if chunk_type in TEXT_CHUNK_TYPES
    ]


def _decode_text(chunk_type: bytes, payload: bytes, offset: int) -> TextChunk:
    name = chunk_type.decode("ascii")
    keyword_bytes, sep, rest = payload.partition(b"\0")
    if not sep:
        raise PngError(f"damaged PNG ({name} chunk at byte {offset} has no keyword separator)")
    keyword = keyword_bytes.decode("latin-1")
    try:
        if chunk_type == b"tEXt":
            text = rest.decode("latin-1")
        elif chunk_type == b"zTXt":
            text = _inflate(rest[1:]).decode("latin-1")
        else:  # iTXt: flag, method, language\0, translated keyword\0, UTF-8 text
            compressed = rest[:1] == b"\x01"
            _language, _, rest = rest[2:].partition(b"\0")
            _translated, _, body = rest.partition(b"\0")
            text = (_inflate(body) if compressed else body).decode("utf-8")
    except (zlib.error, UnicodeDecodeError) as exc:
        raise PngError(f"{name} chunk {keyword!r} cannot be decoded ({exc})") from exc
    return TextChunk(name, keyword, text)


def _inflate(data: bytes) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, MAX_TEXT_BYTES)
    if inflater.unconsumed_tail:
        raise zlib.error(f"inflates past {MAX_TEXT_BYTES} bytes")
    return out


def _chunk(chunk_type: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(chunk_type + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + chunk_type + payload + struct.pack(">I", crc)


def with_text_chunks(png: bytes, texts: Mapping[str, str]) -> bytes:
    """A copy of `png` whose text chunks with these keywords are replaced by new `tEXt` chunks.

    The new chunks go just before the first IDAT, where every reader finds them even if it stops
    reading at the image data. Text must be Latin-1 (card JSON is base64, so ASCII).
    """
    keywords = {k.encode("latin-1") for k in texts}
    new = b"".join(
        _chunk(b"tEXt", k.encode("latin-1") + b"\0" + v.encode("latin-1")) for k, v in texts.items()
    )
    out = [PNG_SIGNATURE]
    inserted = False
    for chunk_type, payload, _offset in iter_chunks(png):
        if chunk_type in TEXT_CHUNK_TYPES and payload.partition(b"\0")[0] in keywords:
            continue
        if chunk_type in (b"IDAT", b"IEND") and not inserted:
            out.append(new)
            inserted = True
        out.append(_chunk(chunk_type, payload))
    return b"".join(out)
