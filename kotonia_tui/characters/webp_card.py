"""The card JSON inside a WebP picture: how TavernAI shipped cards as `.webp`.

TavernAI's server saved a `.webp` card through sharp with the card JSON's UTF-8 bytes, written
out as decimal numbers joined by commas ("123,34,110,..."), as the EXIF `UserComment` of IFD0
(its `charaWrite`). SillyTavern read such cards (its old `charaRead` for .webp, and its card
parser after it, through ExifReader's `UserComment`) as either that or the JSON itself; both
spellings are read here, in IFD0 or in the Exif sub-IFD, with the comment's EXIF
character-code prefix ("ASCII", "UNICODE", "JIS" or none) taken off first. No card reader
looked in XMP for a card, so XMP is not read.

The RIFF chunks and the EXIF (a TIFF structure) are read here directly, not through Pillow, for
the reasons png_chunks.py gives: a damaged file gets a precise one-line reason, and reading a
card never decodes the picture.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

EXIF_PREFIX = b"Exif\x00\x00"  # some writers keep JPEG's APP1 header in the WebP EXIF chunk
USER_COMMENT = 0x9286
EXIF_IFD = 0x8769  # IFD0's pointer to the Exif sub-IFD, where UserComment belongs
# TIFF field types whose values are bytes (BYTE, ASCII, UNDEFINED) and the pointer types.
_BYTE_TYPES = (1, 2, 7)
_POINTER_TYPES = (4, 13)  # LONG, IFD
_MAX_ENTRIES = 4096  # an IFD with more is damaged, not a picture's metadata
_BYTE_LIST_CHARS = b"0123456789, \t\n\r\x0b\x0c"  # all TavernAI's spelling may hold
_BYTE_LIST_STEP = 1 << 18  # its numbers are read this many characters at a time


class WebpError(ValueError):
    """A file that is not a readable WebP, or whose EXIF is damaged; one line saying why."""


def iter_riff_chunks(data: bytes) -> Iterator[tuple[bytes, bytes, int]]:
    """Yield (fourcc, payload, offset) for each chunk of a WebP's RIFF container."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        raise WebpError("not a WebP file (the RIFF WEBP signature is missing)")
    (riff_size,) = struct.unpack("<I", data[4:8])
    end = min(len(data), 8 + riff_size)
    offset = 12
    while offset + 8 <= end:
        fourcc = data[offset : offset + 4]
        (length,) = struct.unpack("<I", data[offset + 4 : offset + 8])
        name = fourcc.decode("latin-1")
        if offset + 8 + length > len(data):
            raise WebpError(
                f"truncated WebP (chunk {name!r} at byte {offset} runs past the end of the file)"
            )
        yield fourcc, data[offset + 8 : offset + 8 + length], offset
        offset += 8 + length + (length & 1)  # chunks are padded to an even size


def user_comment(data: bytes) -> tuple[bytes, bool] | None:
    """The raw EXIF `UserComment` of a WebP file (its character-code prefix included) and
    whether the EXIF is big-endian (a UNICODE comment follows its byte order); None when it
    has no EXIF chunk or no such field. Raises `WebpError` for a damaged file."""
    for fourcc, payload, offset in iter_riff_chunks(data):
        if fourcc == b"EXIF":
            tiff = payload.removeprefix(EXIF_PREFIX)
            found = _tiff_user_comment(tiff, offset)
            return None if found is None else (found, tiff[:2] == b"MM")
    return None


def card_json_bytes(comment: bytes, big_endian: bool = False) -> bytes | None:
    """The card JSON a `UserComment` holds, as UTF-8 bytes; None when it holds no card (not
    JSON, nor TavernAI's comma-separated bytes)."""
    prefix, body = comment[:8], comment[8:]
    if prefix == b"UNICODE\x00":
        text = _utf16(body, big_endian)
    elif prefix in (b"ASCII\x00\x00\x00", b"JIS\x00\x00\x00\x00\x00", b"\x00" * 8):
        text = body
    else:
        text = comment
    text = text.rstrip(b"\x00").strip()
    decoded = _byte_list(text)
    if decoded is not None:
        text = decoded.strip()
    # A UTF-8 BOM may open the JSON (decode_json_bytes accepts it).
    return text if text.removeprefix(b"\xef\xbb\xbf").startswith(b"{") else None


def _byte_list(text: bytes) -> bytes | None:
    """TavernAI's spelling, the bytes as decimal numbers joined by commas, read back; None when
    `text` is not that. Linear in time and read a slice at a time: a comment may be tens of
    megabytes, and neither a backtracking pattern nor a list of every number is bounded so."""
    if not text or text.translate(None, _BYTE_LIST_CHARS):
        return None
    out = bytearray()
    start = 0
    while start <= len(text):
        end = text.find(b",", start + _BYTE_LIST_STEP)
        end = len(text) if end < 0 else end
        try:  # int() takes the spaces around a number; an empty one or one past 255 is refused
            out += bytes(map(int, text[start:end].split(b",")))
        except ValueError:
            return None
        start = end + 1
    return bytes(out)


def _utf16(body: bytes, big_endian: bool) -> bytes:
    if body[:2] in (b"\xfe\xff", b"\xff\xfe"):
        encoding = "utf-16"  # its BOM says the byte order
    # Card JSON opens with an ASCII character, whose zero byte tells the order, as ExifTool
    # guesses it: some writers keep UTF-16 little-endian in a big-endian EXIF.
    elif body[:1] == b"\x00" and body[1:2] not in (b"", b"\x00"):
        encoding = "utf-16-be"
    elif body[1:2] == b"\x00" and body[:1] != b"\x00":
        encoding = "utf-16-le"
    else:
        encoding = "utf-16-be" if big_endian else "utf-16-le"
    return body[: len(body) // 2 * 2].decode(encoding, errors="replace").encode("utf-8")


def _tiff_user_comment(tiff: bytes, chunk_offset: int) -> bytes | None:
    where = f"the EXIF chunk at byte {chunk_offset}"
    order = tiff[:2]
    if order not in (b"II", b"MM") or len(tiff) < 8:
        raise WebpError(f"damaged WebP ({where} is not a TIFF structure)")
    endian = "<" if order == b"II" else ">"
    (first,) = struct.unpack(f"{endian}I", tiff[4:8])
    entries = _ifd(tiff, first, endian, where)
    found = entries.get(USER_COMMENT)  # IFD0: TavernAI's
    if found is None and EXIF_IFD in entries:
        kind, count, value = entries[EXIF_IFD]
        if kind in _POINTER_TYPES and count >= 1:
            (sub,) = struct.unpack(f"{endian}I", value[:4])
            found = _ifd(tiff, sub, endian, where).get(USER_COMMENT)
    if found is None:
        return None
    kind, count, value = found
    if kind not in _BYTE_TYPES:
        return None
    if count > 4:  # stored elsewhere: `value` is its offset
        (at,) = struct.unpack(f"{endian}I", value)
        if at + count > len(tiff):
            raise WebpError(f"damaged WebP (the UserComment in {where} runs past its end)")
        return tiff[at : at + count]
    return value[:count]


def _ifd(tiff: bytes, offset: int, endian: str, where: str) -> dict[int, tuple[int, int, bytes]]:
    """One IFD's entries: tag -> (type, count, the 4-byte value or offset field)."""
    if offset + 2 > len(tiff):
        raise WebpError(f"damaged WebP ({where} points past its end)")
    (count,) = struct.unpack(f"{endian}H", tiff[offset : offset + 2])
    if count > _MAX_ENTRIES or offset + 2 + 12 * count > len(tiff):
        raise WebpError(f"damaged WebP ({where} has an IFD that runs past its end)")
    entries: dict[int, tuple[int, int, bytes]] = {}
    for i in range(count):
        at = offset + 2 + 12 * i
        tag, kind, n = struct.unpack(f"{endian}HHI", tiff[at : at + 8])
        entries.setdefault(tag, (kind, n, tiff[at + 8 : at + 12]))
    return entries
