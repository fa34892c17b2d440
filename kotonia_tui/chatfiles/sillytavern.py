"""Chat files in and out: SillyTavern `.jsonl` chats and plain JSON lists of messages.

Pure parsing and serialising, no SQL. A SillyTavern chat is a header line (`user_name`,
`character_name`, `create_date`, `chat_metadata`, ...) and one JSON object per message (`name`,
`is_user`, `is_system`, `send_date`, `mes`, `swipes`, `swipe_id`, `swipe_info`, `extra`, ...).
Every field Kotonia has no column for is kept under `extra["sillytavern"]`, with the original
key order and the original date text, so exporting an imported chat gives back equal objects.

SillyTavern writes local wall-clock dates without a zone; they are read as UTC (the zone is not
in the file) and the original text is kept for the round trip.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from kotonia_tui.chatfiles.errors import ImportFormatError
from kotonia_tui.domain import (
    Alternative,
    Conversation,
    Message,
    MessageStatus,
    Role,
    Segment,
    utcnow,
)
from kotonia_tui.terminal_text import escape_json_controls

ST = "sillytavern"  # the extra key holding SillyTavern fields Kotonia has no place for
KOTONIA = "kotonia"  # our own block inside a SillyTavern message's `extra` (segments, status)

_MAPPED = ("name", "is_user", "is_system", "send_date", "mes", "swipes", "swipe_id", "swipe_info")
_HEADER_MAPPED = ("user_name", "character_name", "create_date")
_ST_STAMP = re.compile(
    r"^(\d{4})-(\d{1,2})-(\d{1,2})\s*@\s*(\d{1,2})h\s*(\d{1,2})m\s*(\d{1,2})s(?:\s*(\d{1,3})ms)?$"
)
_JS_DATE = re.compile(r"^\w{3} (\w{3} \d{1,2} \d{4} \d{2}:\d{2}:\d{2}) GMT([+-]\d{4})")
_HUMAN_FORMATS = (
    "%B %d, %Y %I:%M%p",
    "%B %d, %Y %I:%M:%S%p",
    "%b %d, %Y %I:%M%p",
    "%B %d, %Y %H:%M",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M",
)


# Dates --------------------------------------------------------------------------------------


def parse_st_date(value: object) -> datetime | None:
    """A SillyTavern date (ISO text, "November 29, 2026 7:30pm", "2026-11-29@19h30m00s",
    epoch milliseconds) as an aware datetime; None when it is not a date we know."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = value / 1000 if abs(value) > 1e11 else value
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if re.fullmatch(r"-?\d+(\.\d+)?", text):
        return parse_st_date(float(text))
    try:
        return _aware(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        pass
    if match := _ST_STAMP.match(text):
        y, mo, d, h, mi, s, ms = match.groups()
        return datetime(
            int(y), int(mo), int(d), int(h), int(mi), int(s), int(ms or 0) * 1000, tzinfo=UTC
        )
    if match := _JS_DATE.match(text):
        try:
            return datetime.strptime(" ".join(match.groups()), "%b %d %Y %H:%M:%S %z")
        except ValueError:
            return None
    for fmt in _HUMAN_FORMATS:
        try:
            return datetime.strptime(text.upper() if "%p" in fmt else text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _format_date(value: datetime) -> str:
    """How a new date is written: ISO 8601 UTC with milliseconds, as JavaScript prints it."""
    return (
        value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    )


def _format_create_date(value: datetime) -> str:
    v = value.astimezone(UTC)
    return f"{v:%Y-%m-%d}@{v.hour:02d}h{v.minute:02d}m{v.second:02d}s"


def _original_or_new(raw: object, value: datetime, formatter: Any) -> object:
    """The original date text if it still means `value`, else a new one."""
    if raw is not None and parse_st_date(raw) == value:
        return raw
    return formatter(value)


# Reading ------------------------------------------------------------------------------------


def read_chat_file(
    path: Path | str,
    persona_name: str,
    character_name_hint: str | None = None,
    character_key: str | None = None,
) -> tuple[Conversation, list[Message]]:
    """Parse a SillyTavern `.jsonl` chat or a JSON list of `{"speaker", "text"}` objects.

    `character_key` defaults to the hint or the character's name; the caller sets the card key.
    Raises ImportFormatError naming the file and line (or item) at fault.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFormatError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from exc
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot be read: {exc.strerror}") from exc
    stripped = text.lstrip()
    if not stripped:
        raise ImportFormatError(f"{path}: the file is empty")
    if stripped.startswith("["):
        return _read_json_list(path, text, persona_name, character_name_hint, character_key)
    return _read_jsonl(path, text, persona_name, character_name_hint, character_key)


def _read_jsonl(
    path: Path, text: str, persona: str, hint: str | None, key: str | None
) -> tuple[Conversation, list[Message]]:
    header: dict[str, Any] | None = None
    header_keys: list[str] = []
    messages: list[Message] = []
    # Only "\n" ends a line: str.splitlines() would also split inside texts at U+2028, U+0085...
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}: line {number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ImportFormatError(
                f"{where}: not valid JSON ({exc.msg} at column {exc.colno})"
            ) from exc
        if not isinstance(obj, dict):
            raise ImportFormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if header is None and not messages and "mes" not in obj:
            header, header_keys = obj, list(obj)
            continue
        previous = messages[-1].created_at if messages else None
        messages.append(_st_message(where, obj, previous))
    header = header or {}
    persona = _opt_str(header.get("user_name")) or persona
    character = _opt_str(header.get("character_name")) or hint
    if character is None:
        character = next((m.speaker for m in messages if m.role is Role.CHARACTER), "Character")
    created = parse_st_date(header.get("create_date"))
    if created is None:
        created = messages[0].created_at if messages else utcnow()
    conv = Conversation(
        character_key=key or hint or character,
        character_name=character,
        persona_name=persona,
        title=path.stem,
        created_at=created,
        updated_at=max([created, *(m.created_at for m in messages)]),
        extra={
            ST: {
                "header": {k: v for k, v in header.items() if k not in _HEADER_MAPPED},
                "keys": header_keys,
                "create_date": header.get("create_date"),
                "user_name": header.get("user_name"),
                "character_name": header.get("character_name"),
            }
        },
    )
    return conv, messages


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _st_message(where: str, obj: dict[str, Any], previous: datetime | None) -> Message:
    name = obj.get("name")
    if not isinstance(name, str):
        raise ImportFormatError(f"{where}: 'name' must be text, got {name!r}")
    mes = obj.get("mes")
    if not isinstance(mes, str):
        raise ImportFormatError(f"{where}: 'mes' must be text, got {mes!r}")
    for flag in ("is_user", "is_system"):
        if flag in obj and not isinstance(obj[flag], bool):
            raise ImportFormatError(f"{where}: {flag!r} must be true or false, got {obj[flag]!r}")
    raw_date = obj.get("send_date")
    created = parse_st_date(raw_date)
    if created is None:
        if raw_date not in (None, ""):
            raise ImportFormatError(f"{where}: 'send_date' is not a date: {raw_date!r}")
        created = previous or utcnow()  # an empty date keeps the order of the chat
    role = (
        Role.USER if obj.get("is_user") else Role.SYSTEM if obj.get("is_system") else Role.CHARACTER
    )

    fields = {k: v for k, v in obj.items() if k not in _MAPPED}
    st_extra = fields.get("extra")
    own: dict[str, Any] = {}
    if isinstance(st_extra, dict) and isinstance(st_extra.get(KOTONIA), dict):
        st_extra = dict(st_extra)
        own = st_extra.pop(KOTONIA)
        fields["extra"] = st_extra
    reasoning = st_extra.get("reasoning") if isinstance(st_extra, dict) else None
    try:
        segments = [Segment.model_validate(s) for s in own.get("segments", [])]
        status = MessageStatus(own.get("status", MessageStatus.COMPLETE.value))
    except (ValidationError, ValueError) as exc:
        raise ImportFormatError(f"{where}: extra.kotonia is not valid: {exc}") from exc
    st: dict[str, Any] = {
        "keys": list(obj),
        "fields": fields,
        "send_date": raw_date,
        "is_system": obj.get("is_system"),
        "is_user": obj.get("is_user"),
    }
    reasoning = reasoning if isinstance(reasoning, str) else None
    alternatives, chosen = _swipes(
        where, obj, mes, created, segments, status, reasoning, fields, st
    )
    try:
        return Message(
            role=role,
            speaker=name,
            text=mes,
            segments=segments,
            created_at=created,
            status=status,
            status_reason=own.get("status_reason"),
            reasoning=reasoning,
            alternatives=alternatives,
            chosen=chosen,
            extra={ST: st},
        )
    except ValidationError as exc:
        raise ImportFormatError(f"{where}: {exc.errors()[0]['msg']}") from exc


def _swipes(
    where: str,
    obj: dict[str, Any],
    mes: str,
    created: datetime,
    segments: list[Segment],
    status: MessageStatus,
    message_reasoning: str | None,
    fields: dict[str, Any],
    st: dict[str, Any],
) -> tuple[list[Alternative], int]:
    """Swipes as alternatives (swipe_id chosen); odd but harmless shapes are kept verbatim."""
    swipes = obj.get("swipes")
    if swipes is None:
        for key in ("swipe_id", "swipe_info"):
            if key in obj:
                fields[key] = obj[key]
        return [], 0
    if not isinstance(swipes, list) or not all(isinstance(s, str) for s in swipes):
        raise ImportFormatError(f"{where}: 'swipes' must be a list of texts")
    if not swipes:
        fields.update({k: obj[k] for k in ("swipes", "swipe_id", "swipe_info") if k in obj})
        return [], 0
    chosen = obj.get("swipe_id", 0)
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen < len(swipes):
        raise ImportFormatError(
            f"{where}: 'swipe_id' is {chosen!r} but there are {len(swipes)} swipes"
        )
    info = obj.get("swipe_info")
    aligned = isinstance(info, list) and len(info) == len(swipes)
    if "swipe_info" in obj and not aligned:
        fields["swipe_info"] = info  # kept as it was; new swipes then get no info
    st["swipe_info"] = "aligned" if aligned else "kept" if "swipe_info" in obj else "absent"
    alternatives = []
    for index, swipe in enumerate(swipes):
        entry = info[index] if aligned and isinstance(info, list) else None
        when = parse_st_date(entry.get("send_date")) if isinstance(entry, dict) else None
        alt_extra: dict[str, object] = {}
        if aligned:
            alt_extra["swipe_info"] = entry
        text = swipe
        if index == chosen and swipe != mes:
            alt_extra["swipe_text"] = swipe  # `mes` wins as the text; the swipe is kept
            text = mes
        entry_extra = entry.get("extra") if isinstance(entry, dict) else None
        reasoning = entry_extra.get("reasoning") if isinstance(entry_extra, dict) else None
        if index == chosen:  # the message's own extra.reasoning belongs to the shown swipe
            reasoning = message_reasoning
        alternatives.append(
            Alternative(
                text=text,
                segments=segments if index == chosen else [],
                status=status if index == chosen else MessageStatus.COMPLETE,
                created_at=when or created,
                reasoning=reasoning if isinstance(reasoning, str) else None,
                extra={ST: alt_extra} if alt_extra else {},
            )
        )
    return alternatives, chosen


def _read_json_list(
    path: Path, text: str, persona: str, hint: str | None, key: str | None
) -> tuple[Conversation, list[Message]]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportFormatError(
            f"{path}: line {exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})"
        ) from exc
    if not isinstance(items, list):
        raise ImportFormatError(f"{path}: expected a list of messages, got {type(items).__name__}")
    base = utcnow()
    messages: list[Message] = []
    for number, item in enumerate(items, start=1):
        where = f"{path}: item {number}"
        if not isinstance(item, dict):
            raise ImportFormatError(f"{where}: expected an object, got {type(item).__name__}")
        speaker, text_value = item.get("speaker"), item.get("text")
        if not isinstance(speaker, str) or not speaker:
            raise ImportFormatError(f"{where}: 'speaker' must be non-empty text, got {speaker!r}")
        if not isinstance(text_value, str):
            raise ImportFormatError(f"{where}: 'text' must be text, got {text_value!r}")
        role = _json_role(where, item, speaker, persona)
        raw_date = item.get("created_at", item.get("send_date"))
        created = parse_st_date(raw_date) if raw_date is not None else None
        if raw_date is not None and created is None:
            raise ImportFormatError(f"{where}: date is not a date: {raw_date!r}")
        # Undated items keep their order with distinct, increasing times.
        created = created or base + timedelta(milliseconds=number)
        extra = {
            k: v
            for k, v in item.items()
            if k not in ("speaker", "text", "role", "is_user", "created_at", "send_date")
        }
        messages.append(
            Message(role=role, speaker=speaker, text=text_value, created_at=created, extra=extra)
        )
    character = hint or next((m.speaker for m in messages if m.role is Role.CHARACTER), "Character")
    created_at = messages[0].created_at if messages else base
    conv = Conversation(
        character_key=key or character,
        character_name=character,
        persona_name=persona,
        title=path.stem,
        created_at=created_at,
        updated_at=max([created_at, *(m.created_at for m in messages)]),
    )
    return conv, messages


def _json_role(where: str, item: dict[str, Any], speaker: str, persona: str) -> Role:
    if "role" in item:
        try:
            return Role(item["role"])
        except ValueError:
            known = ", ".join(r.value for r in Role)
            raise ImportFormatError(
                f"{where}: 'role' is {item['role']!r}, expected one of {known}"
            ) from None
    if "is_user" in item:
        if not isinstance(item["is_user"], bool):
            raise ImportFormatError(f"{where}: 'is_user' must be true or false")
        return Role.USER if item["is_user"] else Role.CHARACTER
    return Role.USER if speaker == persona else Role.CHARACTER


# Writing ------------------------------------------------------------------------------------


ImageData = Callable[[str], tuple[bytes, str]]  # digest -> (bytes, MIME type)


def write_sillytavern(
    conv: Conversation,
    messages: Iterable[Message],
    out: TextIO,
    image_data: ImageData | None = None,
) -> int:
    """Write a SillyTavern `.jsonl` chat (header, then one line per message); returns the count.

    One object per line, each line ended by a newline (the last one too, as text files end).
    With `image_data`, a message's attached images go into `extra`: the first as `image` (a
    data URL, which SillyTavern shows), all of them as `kotonia_images`.
    """
    out.write(_dumps(_header(conv)))
    count = 0
    for msg in messages:
        out.write("\n")
        line = st_message(msg)
        if image_data is not None and msg.images:
            urls = [_data_url(*image_data(digest)) for digest in msg.images]
            extra = dict(line.get("extra") or {})
            extra["image"] = urls[0]
            extra["kotonia_images"] = urls
            line["extra"] = extra
        out.write(_dumps(line))
        count += 1
    out.write("\n")
    return count


def _data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _dumps(obj: dict[str, Any]) -> str:
    # Control and bidi characters as \u escapes: the same JSON, and harmless on a terminal.
    return escape_json_controls(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))


def _ordered(keys: list[str], *sources: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for source in sources:
        merged.update(source)
    ordered = {k: merged[k] for k in keys if k in merged}
    ordered.update({k: v for k, v in merged.items() if k not in ordered})
    return ordered


def _header(conv: Conversation) -> dict[str, Any]:
    st = conv.extra.get(ST)
    st = st if isinstance(st, dict) else {}
    fields = st.get("header")
    mapped = {
        "user_name": conv.persona_name,
        "character_name": conv.character_name,
        "create_date": _original_or_new(
            st.get("create_date"), conv.created_at, _format_create_date
        ),
    }
    if not isinstance(fields, dict):
        fields = {"chat_metadata": {}}
    return _ordered(list(st.get("keys") or []), mapped, fields)


def st_message(msg: Message) -> dict[str, Any]:
    """One message as a SillyTavern object, restoring what was kept from an import."""
    st = msg.extra.get(ST)
    st = st if isinstance(st, dict) else {}
    fields = dict(st.get("fields") or {})
    keys = list(st.get("keys") or [])
    mapped: dict[str, Any] = {
        "name": msg.speaker,
        # The role is never edited, so imported flags still hold (a hidden user message is
        # is_user and is_system at once); they are only computed for Kotonia's own messages.
        "is_user": _flag(st.get("is_user"), msg.role is Role.USER),
        "is_system": _flag(st.get("is_system"), msg.role is Role.SYSTEM),
        "send_date": _original_or_new(st.get("send_date"), msg.created_at, _format_date),
        "mes": msg.text,
    }
    extra = _st_extra(msg, fields.get("extra"))
    if not st or "extra" in fields or extra:
        fields["extra"] = extra
    if msg.alternatives:
        mapped.update(_st_swipes(msg, st))
    if st:
        # Fields the original line did not have are not invented for it.
        for key in ("is_user", "is_system", "send_date", "swipe_id"):
            if key not in keys and key in mapped and (key != "swipe_id" or msg.chosen == 0):
                del mapped[key]
    return _ordered(keys, mapped, fields)


def _flag(original: object, computed: bool) -> bool:
    return original if isinstance(original, bool) else computed


def _st_extra(msg: Message, original: object) -> dict[str, Any]:
    extra = dict(original) if isinstance(original, dict) else {}
    if msg.reasoning is not None:
        extra["reasoning"] = msg.reasoning
    elif "reasoning" in extra and not isinstance(extra["reasoning"], str):
        pass  # not ours to judge
    else:
        extra.pop("reasoning", None)
    own: dict[str, Any] = {}
    if msg.segments:
        own["segments"] = [s.model_dump(mode="json", exclude_none=True) for s in msg.segments]
    if msg.status is not MessageStatus.COMPLETE:
        own["status"] = msg.status.value
    if msg.status_reason:
        own["status_reason"] = msg.status_reason
    if own:
        extra[KOTONIA] = own
    return extra


def _st_swipes(msg: Message, st: dict[str, Any]) -> dict[str, Any]:
    swipes, infos = [], []
    for index, alt in enumerate(msg.alternatives):
        alt_st = alt.extra.get(ST)
        alt_st = alt_st if isinstance(alt_st, dict) else {}
        kept = alt_st.get("swipe_text")
        original = isinstance(kept, str) and index == msg.chosen and not msg.edited
        swipes.append(kept if original else alt.text)
        info = alt_st.get("swipe_info")
        if "swipe_info" not in alt_st:
            info = {"send_date": _format_date(alt.created_at), "extra": {}}
            if alt.reasoning:
                info["extra"]["reasoning"] = alt.reasoning
        infos.append(info)
    out: dict[str, Any] = {"swipes": swipes, "swipe_id": msg.chosen}
    if st.get("swipe_info") not in ("kept", "absent"):  # "kept": the odd original is in fields
        out["swipe_info"] = infos
    return out
