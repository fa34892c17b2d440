"""Reading a server's answer with a bound on what it decodes to, not on what it sends.

A server is untrusted like a card: a 1 MB gzip body can inflate to gigabytes (a reply that was
one grew the process to 23.6 GB), and a stream can go on for ever. So every body is read raw
and decoded here, a slice at a time (`zlib`'s `max_length`), and counted after decoding: past
the caller's limit the read stops with `BodyTooLarge`. Only the encodings the client asks for
are decoded (gzip, deflate, none); any other is refused by name rather than read as bytes.

Limits: `MAX_ANSWER_BYTES` for an ordinary answer (a model list, a token count, the server's
properties), `MAX_ERROR_BYTES` of an error page (only its first words are shown), and for a
streamed reply `stream_limit(max_tokens)`.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator

from kotonia_tui.engine.errors import ServerResponseError

ACCEPT_ENCODING = "gzip, deflate"  # what the client asks for, and all it decodes
# A model list, a token count of the longest message a card or chat may hold (~60k tokens as
# JSON numbers, ~0.5 MB), llama-server's properties with a long chat template: far below this.
MAX_ANSWER_BYTES = 16 * 2**20
MAX_ERROR_BYTES = 64 * 2**10  # an error page: its first 200 characters are shown
# A streamed reply: each token is one event of JSON (llama-server's is ~400 bytes with its
# figures) and the last event carries the timings; 4 KB a token is ten times that.
STREAM_BASE_BYTES = 256 * 2**10
STREAM_BYTES_PER_TOKEN = 4 * 2**10
_SLICE = 1 << 16  # decoded bytes per step: memory stays near this whatever the ratio

_LINE_END = re.compile(rb"\r\n|\r|\n")


def stream_limit(max_tokens: int) -> int:
    """The decoded bytes a reply of at most `max_tokens` tokens may take on the wire."""
    return STREAM_BASE_BYTES + max(max_tokens, 1) * STREAM_BYTES_PER_TOKEN


class BodyTooLarge(ServerResponseError):
    """The answer decoded to more than its limit; the read stopped there."""


class Decoder:
    """One response body's content coding, undone a bounded slice at a time."""

    def __init__(self, encoding: str, where: str) -> None:
        codings = [c.strip().lower() for c in encoding.split(",") if c.strip()]
        codings = [c for c in codings if c != "identity"]
        self._where = where
        self._coding = codings[0] if codings else ""
        if len(codings) > 1 or self._coding not in ("", "gzip", "x-gzip", "deflate"):
            raise ServerResponseError(
                f"{where}: the server's answer is encoded as {encoding!r}, which is not read "
                f"(asked for: {ACCEPT_ENCODING})"
            )
        self._zlib: zlib._Decompress | None = None
        if self._coding in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(zlib.MAX_WBITS | 16)

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of `data`, in slices of at most `_SLICE` bytes."""
        if not self._coding:
            for start in range(0, len(data), _SLICE):
                yield data[start : start + _SLICE]
            return
        if self._zlib is None:
            # "deflate" is zlib-wrapped as the standard says, but some servers send it raw:
            # the first two bytes tell (a zlib header is a multiple of 31, method 8).
            wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            self._zlib = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        pending = data
        while pending and not self._zlib.eof:
            try:
                piece = self._zlib.decompress(pending, _SLICE)
            except zlib.error as exc:
                raise ServerResponseError(
                    f"{self._where}: the server's compressed answer is damaged ({exc})"
                ) from exc
            pending = self._zlib.unconsumed_tail
            if piece:
                yield piece
            elif not pending:
                break
        # Anything after the end of the compressed stream is not part of the body.


class Counted:
    """Decoded bytes counted against a limit."""

    def __init__(self, limit: int, where: str, what: str) -> None:
        self.limit = limit
        self.where = where
        self.what = what
        self.total = 0

    def add(self, size: int) -> None:
        self.total += size
        if self.total > self.limit:
            raise BodyTooLarge(
                f"{self.where}: the server sent more than {self.limit / 2**20:,.2f} MB for "
                f"{self.what}; the rest was not read"
            )


def read_all(chunks: Iterable[bytes], decoder: Decoder, counted: Counted) -> bytes:
    """A whole (blocking) body, decoded and bounded."""
    parts: list[bytes] = []
    for chunk in chunks:
        for piece in decoder.feed(chunk):
            counted.add(len(piece))
            parts.append(piece)
    return b"".join(parts)


def read_head(chunks: Iterable[bytes], decoder: Decoder, limit: int) -> bytes:
    """The first `limit` decoded bytes of a body (an error page), the rest left unread."""
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        for piece in decoder.feed(chunk):
            parts.append(piece[: limit - size])
            size += len(parts[-1])
            if size >= limit:
                return b"".join(parts)
    return b"".join(parts)


async def aread_all(chunks: AsyncIterator[bytes], decoder: Decoder, counted: Counted) -> bytes:
    parts: list[bytes] = []
    async for chunk in chunks:
        for piece in decoder.feed(chunk):
            counted.add(len(piece))
            parts.append(piece)
    return b"".join(parts)


async def aread_head(chunks: AsyncIterator[bytes], decoder: Decoder, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        for piece in decoder.feed(chunk):
            parts.append(piece[: limit - size])
            size += len(parts[-1])
            if size >= limit:
                return b"".join(parts)
    return b"".join(parts)


async def lines(
    chunks: AsyncIterator[bytes], decoder: Decoder, counted: Counted
) -> AsyncIterator[str]:
    """The lines of a streamed body (ended by CRLF, LF or CR, as server-sent events are),
    decoded and counted: a line that never ends is cut off by the limit like the rest."""
    buffer = bytearray()
    scanned = 0  # where the search for the next line end goes on (a long line is not rescanned)
    async for chunk in chunks:
        for piece in decoder.feed(chunk):
            counted.add(len(piece))
            buffer += piece
            start = 0
            for end in _LINE_END.finditer(buffer, scanned):
                if end.group() == b"\r" and end.end() == len(buffer):
                    break  # a CR at the end may be the first half of a CRLF
                yield buffer[start : end.start()].decode("utf-8", "replace")
                start = end.end()
            del buffer[:start]
            scanned = max(len(buffer) - 1, 0)  # a lone CR kept at the end is looked at again
    if buffer:
        for text in _LINE_END.split(bytes(buffer)):
            yield text.decode("utf-8", "replace")
