"""Card macros: the placeholders a card writes instead of names.

`{{char}}` and `<BOT>` become the character's name (its V3 `nickname` when it has one: the V3
card format asks for that), `{{user}}` and `<USER>` the persona's name, and `{{original}}`, used
inside a card's `system_prompt` or `post_history_instructions`, the text the app would have used
there. The `{{...}}` forms are case-insensitive and may have spaces inside the braces; the angle
forms are matched as written, because a lower-case `<user>` is likely to be real markup.

Substitution is one pass: a name that itself contains `{{user}}` is inserted literally and is not
expanded again. Other `{{...}}` placeholders are left as they are.
"""

from __future__ import annotations

import re

from kotonia_tui.characters.limits import MAX_EXPANDED_CHARS

_MACRO = re.compile(r"\{\{\s*(?i:(char|user|original))\s*\}\}|<(BOT|USER)>")


class MacroLimitError(ValueError):
    """A text whose macros would expand past the bound; the message says by how much."""


def apply_macros(
    text: str,
    *,
    char: str,
    user: str,
    original: str | None = None,
    limit: int | None = MAX_EXPANDED_CHARS,
) -> str:
    """Replace the macros in `text`. With `original=None`, `{{original}}` is left untouched.

    A text that would grow past `limit` characters raises `MacroLimitError` before anything is
    built (a card of 400 KB whose {{char}} macros filled 90 MB stalled the app for minutes).
    """

    def value(match: re.Match[str]) -> str:
        word = (match.group(1) or match.group(2)).lower()
        if word in ("char", "bot"):
            return char
        if word == "user":
            return user
        return match.group(0) if original is None else original

    if limit is not None:
        size = len(text) + sum(len(value(m)) - len(m.group(0)) for m in _MACRO.finditer(text))
        if size > limit:
            raise MacroLimitError(
                f"expands to {size:,} characters with its macros (at most {limit:,})"
            )
    return _MACRO.sub(value, text)
