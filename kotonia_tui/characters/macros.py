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

_MACRO = re.compile(r"\{\{\s*(?i:(char|user|original))\s*\}\}|<(BOT|USER)>")


def apply_macros(text: str, *, char: str, user: str, original: str | None = None) -> str:
    """Replace the macros in `text`. With `original=None`, `{{original}}` is left untouched."""

    def replace(match: re.Match[str]) -> str:
        word = (match.group(1) or match.group(2)).lower()
        if word in ("char", "bot"):
            return char
        if word == "user":
            return user
        return match.group(0) if original is None else original

    return _MACRO.sub(replace, text)
