"""SillyTavern quick-reply sets (`{"name", "qrList": [{"label", "message", ...}]}`), read as the
player's quick replies where their shape allows: a reply whose message is a slash command
(SillyTavern's STscript, starting with "/") runs code there and has no meaning here; it is
left out and counted, never imported as text to send."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kotonia_tui.chatfiles.errors import ImportFormatError
from kotonia_tui.domain import QuickReply
from kotonia_tui.regular_files import ReadError, open_regular
from kotonia_tui.untrusted_text import JsonProblem, decode_utf8, loads

MAX_SET_BYTES = 4 * 1024 * 1024


def read_quick_reply_set(
    path: Path, character_key: str | None = None
) -> tuple[list[QuickReply], int]:
    """The set's replies in its order, and how many slash-command replies were left out."""
    try:
        with open_regular(path) as handle:
            raw = handle.read(MAX_SET_BYTES + 1)
    except (ReadError, OSError) as exc:
        raise ImportFormatError(f"{path}: cannot be read ({exc})") from exc
    if len(raw) > MAX_SET_BYTES:
        raise ImportFormatError(f"{path}: larger than {MAX_SET_BYTES:,} bytes")
    try:
        data, _surrogates = loads(decode_utf8(raw, bom=True).text)
    except (ValueError, JsonProblem) as exc:
        raise ImportFormatError(f"{path}: not valid JSON ({exc})") from exc
    items = data.get("qrList") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ImportFormatError(f"{path}: not a SillyTavern quick-reply set (no 'qrList' list)")
    replies: list[QuickReply] = []
    skipped = 0
    for number, item in enumerate(items):
        where = f"{path}: qrList[{number}]"
        if not isinstance(item, dict):
            raise ImportFormatError(f"{where}: expected an object")
        message, label = _text(item, "message", where), _text(item, "label", where)
        if message.lstrip().startswith("/"):
            skipped += 1
            continue
        if not message.strip():
            continue
        replies.append(
            QuickReply(
                character_key=character_key,
                label=label.strip() or message.strip()[:40],
                text=message,
                position=len(replies),
            )
        )
    return replies, skipped


def _text(item: dict[str, Any], field: str, where: str) -> str:
    value = item.get(field, "")
    if not isinstance(value, str):
        raise ImportFormatError(f"{where}: '{field}' must be text")
    return value
