"""Text and JSON that come from outside: one decoding policy and one strict JSON reader.

The policy for text that is not valid Unicode (bytes that are not UTF-8, a lone surrogate such
as a JSON `"\\ud800"`, a non-UTF-8 argument or pipe) is the same everywhere: each bad sequence
becomes U+FFFD, the replacement character, the text is kept, and the caller says so once. No
message, card or chat line is dropped for it, and nothing downstream (SQLite, the terminal, the
tokenizer) ever sees a surrogate.

`loads` reads JSON written by other programs: NaN and Infinity are refused (they are not JSON),
an integer longer than `MAX_INT_DIGITS` digits or nesting deeper than `MAX_DEPTH` is a one-line
error instead of a traceback, and lone surrogates are replaced as above.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

REPLACEMENT = "\ufffd"
MAX_INT_DIGITS = 64  # no field of a card or a chat needs more; Python refuses past 4300
MAX_DEPTH = 64  # a card's extensions or a message's extra never nest this deep

_SURROGATE = re.compile("[\ud800-\udfff]")
# json.loads only makes surrogates from \u escapes: text decoded from UTF-8 never holds one.
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class JsonProblem(ValueError):
    """JSON that cannot be used; the message is one line (the caller adds file and line)."""


@dataclass(frozen=True)
class Decoded:
    """Text decoded under the policy; `replaced` counts the sequences that became U+FFFD."""

    text: str
    replaced: int = 0


def scrub(text: str) -> Decoded:
    """Lone surrogates (including the escapes Python uses for undecodable bytes) -> U+FFFD."""
    if not _SURROGATE.search(text):
        return Decoded(text)
    fixed, count = _SURROGATE.subn(REPLACEMENT, text)
    return Decoded(fixed, count)


def decode_utf8(data: bytes, *, bom: bool = True) -> Decoded:
    """UTF-8 bytes (a leading BOM dropped when `bom`) as text; bad sequences -> U+FFFD."""
    codec = "utf-8-sig" if bom else "utf-8"
    try:
        return Decoded(data.decode(codec))
    except UnicodeDecodeError:
        text = data.decode(codec, "replace")
        # Count what the decoder replaced (a U+FFFD already in the input is not counted).
        return Decoded(text, text.count(REPLACEMENT) - _count_encoded_replacements(data))


# A UTF-16 or UTF-32 file (Windows editors save "Unicode" as UTF-16): by its byte order mark,
# or, with none, by where the zero bytes of the first ASCII character are (RFC 4627, 3).
_WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32"),  # before UTF-16 LE, whose mark it starts with
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


def wide_encoding(head: bytes) -> str | None:
    """ "utf-16", "utf-32" (with a byte order mark) or their -le/-be forms (without one) when
    `head`, the start of a text file, is in one of them; None for UTF-8 (or anything else)."""
    for mark, codec in _WIDE_BOMS:
        if head.startswith(mark):
            return codec
    if len(head) >= 4 and head[0] and not any(head[1:4]):
        return "utf-32-le"
    if len(head) >= 4 and not any(head[:3]) and head[3]:
        return "utf-32-be"
    if len(head) >= 2 and head[0] and not head[1]:
        return "utf-16-le"
    if len(head) >= 2 and not head[0] and head[1]:
        return "utf-16-be"
    return None


def decode_text(data: bytes) -> Decoded:
    """Text from outside in UTF-8 (a BOM allowed), UTF-16 or UTF-32 (told by `wide_encoding`);
    bad sequences -> U+FFFD, counted."""
    codec = wide_encoding(data)
    if codec is None:
        return decode_utf8(data)
    try:
        return Decoded(data.decode(codec).removeprefix("\ufeff"))
    except UnicodeDecodeError:
        text = data.decode(codec, "replace").removeprefix("\ufeff")
        return Decoded(
            text, text.count(REPLACEMENT) - data.decode(codec, "ignore").count(REPLACEMENT)
        )


def _count_encoded_replacements(data: bytes) -> int:
    return data.count(REPLACEMENT.encode("utf-8"))


def replacement_note(count: int) -> str:
    """What is said (once) when `count` bad sequences were replaced."""
    sequences = "sequence was" if count == 1 else "sequences were"
    return f"{count} invalid Unicode {sequences} replaced with U+FFFD"


def loads(text: str) -> tuple[Any, int]:
    """Parse JSON from outside; returns the value and how many lone surrogates were replaced.

    Raises `JsonProblem` (one line; a `json.JSONDecodeError` keeps its line and column).
    """
    try:
        value = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
        )
    except RecursionError as exc:
        raise JsonProblem(f"nested more than {MAX_DEPTH} levels deep") from exc
    # A walk costs time on every line of a big chat; only values that may need it are walked.
    if text.count("[") + text.count("{") <= MAX_DEPTH and not _ESCAPED_SURROGATE.search(text):
        return value, 0
    return _walk(value)


def _refuse_constant(name: str) -> Any:
    raise JsonProblem(f"{name} is not a JSON value (write a number or null)")


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonProblem(f"a number with {len(digits.lstrip('-'))} digits is too long")
    return int(digits)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonProblem(f"the number {text[:20]} is out of range")
    return value


def _walk(value: Any) -> tuple[Any, int]:
    """Check the depth and replace lone surrogates in keys and strings, without recursion."""
    replaced = 0

    def clean(text: str) -> str:
        nonlocal replaced
        decoded = scrub(text)
        replaced += decoded.replaced
        return decoded.text

    if isinstance(value, str):
        return clean(value), replaced
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise JsonProblem(f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, dict):
            items = list(node.items())
            node.clear()
            for key, item in items:
                node[clean(key)] = clean(item) if isinstance(item, str) else item
                if isinstance(item, dict | list):
                    stack.append((item, depth + 1))
        elif isinstance(node, list):
            for index, item in enumerate(node):
                if isinstance(item, str):
                    node[index] = clean(item)
                elif isinstance(item, dict | list):
                    stack.append((item, depth + 1))
    return value, replaced
