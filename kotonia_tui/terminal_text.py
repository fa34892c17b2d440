"""Untrusted text made safe to show on a terminal: control characters become visible.

Everything from a card, a chat file, a model file, a server or the user is data. Written to a
terminal as it is, an escape sequence in a card name could set the window title, write the
clipboard (OSC 52) or redraw the screen; a bidi control could make a line read backwards; a lone
CR could overwrite what a listing printed before it. Every string the CLI prints and every string
the TUI shows goes through `visible` first, so the same character looks the same everywhere:

- C0 controls (ESC, BEL, BS, NUL, ...) and DEL become their Unicode control pictures (ESC -> ␛);
- C1 controls, bidi controls and lone surrogates become `⟨U+202E⟩`;
- a CR LF pair is a line break (cards written on Windows are full of them);
- in `one_line` mode (a field of a listing, a title) line breaks and tabs become pictures too, so
  one item stays on one line and tab-separated columns stay columns.

Nothing is dropped: each character is replaced by something a reader can see and name.
"""

from __future__ import annotations

import re

# Bidi embeddings, overrides, isolates and marks (the "Trojan Source" set), plus the Arabic
# letter mark. Zero-width joiners are left alone: emoji sequences need them.
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
LINE_SEPARATORS = frozenset("\u2028\u2029\x85")


def _picture(char: str) -> str:
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ ... ␟
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"⟨U+{code:04X}⟩"


_UNSAFE = re.compile(
    "\r\n|[\x00-\x1f\x7f-\x9f\ud800-\udfff" + "".join(sorted(BIDI_CONTROLS | LINE_SEPARATORS)) + "]"
)


def visible(text: str, *, one_line: bool = False) -> str:
    """`text` with every control character shown as a visible stand-in (see the module doc).

    Line breaks (and CR LF pairs, and tabs) are kept unless `one_line`; U+2028/U+2029/NEL
    are line breaks too.
    """
    if _UNSAFE.search(text) is None:
        return text

    def replace(match: re.Match[str]) -> str:
        found = match.group()
        if found in ("\r\n", "\n") or found in LINE_SEPARATORS:
            return "\u240a" if one_line else "\n"
        if found == "\t" and not one_line:
            return "\t"
        return _picture(found)

    return _UNSAFE.sub(replace, text)


# Inside JSON strings these would reach a terminal raw (json.dumps escapes only C0 controls).
_JSON_UNSAFE = re.compile(
    "[\x7f-\x9f\ud800-\udfff" + "".join(sorted(BIDI_CONTROLS | LINE_SEPARATORS)) + "]"
)


def escape_json_controls(json_text: str) -> str:
    """JSON text (from `json.dumps(..., ensure_ascii=False)`) with DEL, C1, bidi controls,
    line separators and lone surrogates written as `\\uXXXX` escapes: the same JSON value,
    readable (CJK stays as it is), and safe to print on a terminal."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)
