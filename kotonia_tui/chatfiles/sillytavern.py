"""Chat files in and out: SillyTavern `.jsonl` chats and plain JSON lists of messages.

Pure parsing and serialising, no SQL. A SillyTavern chat is a header line (`user_name`,
`character_name`, `create_date`, `chat_metadata`, ...) and one JSON object per message (`name`,
`is_user`, `is_system`, `send_date`, `mes`, `swipes`, `swipe_id`, `swipe_info`, `extra`, ...).
Every field Kotonia has no column for is kept under `extra["sillytavern"]`, with the original
key order and the original date text, so exporting an imported chat gives back equal objects.

SillyTavern writes the local wall-clock time of the machine that wrote the file, without a zone
("December 5, 2026 1:21am", "2026-12-05@01h21m00s"). A user importing their own chats is
normally on that machine, so a date without a zone is read as this machine's local time (and
stored in UTC, as every date is); a date with a zone or offset ("...Z", "+09:00", "GMT+0900")
and epoch numbers name their instant and are read as they are. The original text is kept for
the round trip.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

from pydantic import ValidationError

from kotonia_tui.chatfiles.errors import ImportFormatError
from kotonia_tui.chatfiles.st_metadata import metadata_with_settings, settings_from_metadata
from kotonia_tui.domain import (
    Alternative,
    CastMember,
    ChatSettings,
    Conversation,
    Message,
    MessageStatus,
    Role,
    Segment,
    utcnow,
)
from kotonia_tui.regular_files import ReadError, open_regular
from kotonia_tui.terminal_text import escape_json_controls
from kotonia_tui.untrusted_text import (
    JsonProblem,
    decode_utf8,
    loads,
    replacement_note,
    wide_encoding,
)

ST = "sillytavern"  # the extra key holding SillyTavern fields Kotonia has no place for
KOTONIA = "kotonia"  # our own block inside a SillyTavern message's `extra` (segments, status)

_MAPPED = ("name", "is_user", "is_system", "send_date", "mes", "swipes", "swipe_id", "swipe_info")
_HEADER_MAPPED = ("user_name", "character_name", "create_date", "kotonia_cast")
# A group's cast in the header Kotonia writes: [{"name", "character", "muted"}, ...] in order.
CAST_KEY = "kotonia_cast"
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
    epoch milliseconds) as an aware datetime; None when it is not a date we know, or one that
    cannot be told in UTC (year 1 or 9999 with a zone offset past the calendar's edge).
    A date without a zone is this machine's local time (`_local`)."""
    return _instant(_parse_date_value(value, _local))


def _instant(parsed: datetime | None) -> datetime | None:
    """`parsed` when it can be told in UTC, else None."""
    if parsed is None:
        return None
    try:
        parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        return None
    return parsed


def _parse_date_value(value: object, naive: Callable[[datetime], datetime]) -> datetime | None:
    """`value` as an aware datetime; `naive` makes one of a date without a zone."""
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
    if re.fullmatch(r"-?\d{1,64}(\.\d{1,64})?", text):
        return _parse_date_value(float(text), naive)
    try:
        return naive(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        pass
    if match := _ST_STAMP.match(text):
        y, mo, d, h, mi, s, ms = match.groups()
        try:
            return naive(
                datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), int(ms or 0) * 1000)
            )
        except ValueError:
            return None  # "2026-13-45@99h..."
    if match := _JS_DATE.match(text):
        try:
            return datetime.strptime(" ".join(match.groups()), "%b %d %Y %H:%M:%S %z")
        except ValueError:
            return None
    for fmt in _HUMAN_FORMATS:
        try:
            return naive(datetime.strptime(text.upper() if "%p" in fmt else text, fmt))
        except ValueError:
            continue
    return None


def _local(value: datetime) -> datetime:
    """`value` as an aware datetime: a date with a zone as it is; one without as the local
    wall-clock time SillyTavern wrote (`getMessageTimeStamp`, `humanizedDateTime` use the
    writer's local time), read in this machine's zone (its TZ) and given in UTC. A time the
    clock repeats (daylight saving ending) is the first of the two; one it skips (daylight
    saving starting: 2:30 where 2:00 became 3:00) is read with the offset before the change,
    3:30 summer time, as JavaScript's Date reads it. At the calendar's edge (its first and
    last day, where Python cannot look the local zone up), or where the platform cannot tell
    the local zone for a date, it is read as UTC."""
    if value.tzinfo is not None:
        return value
    try:
        aware = value.astimezone(UTC)  # a naive datetime is taken as local time (fold 0)
        if aware.astimezone().replace(tzinfo=None) != value:  # skipped: fold 0 reads 1:30
            aware = value.replace(fold=1).astimezone(UTC)
        return aware
    except (OverflowError, OSError, ValueError):
        return _as_utc(value)


def _as_utc(value: datetime) -> datetime:
    """`value` as an aware datetime, one without a zone read as UTC: how Kotonia read
    SillyTavern's zone-less dates before it read them as local time (`_original_or_new`)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _format_date(value: datetime) -> str:
    """How a new date is written: ISO 8601 UTC with milliseconds, as JavaScript prints it."""
    return (
        value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    )


def _format_create_date(value: datetime) -> str:
    """SillyTavern's `create_date` ("2026-12-05@01h21m00s"): local wall-clock time without a
    zone, as SillyTavern writes it and as `parse_st_date` reads it back."""
    try:
        v = value.astimezone()  # this machine's local time
    except (OverflowError, OSError, ValueError):
        v = value.astimezone(UTC)
    return f"{v:%Y-%m-%d}@{v.hour:02d}h{v.minute:02d}m{v.second:02d}s"


def _original_or_new(raw: object, value: datetime, formatter: Any) -> object:
    """The original date text if it still means `value`, else a new one. A chat imported
    while Kotonia read a date without a zone as UTC holds that reading: its text still means
    it, so the file goes back as it came rather than with dates moved by the zone's offset."""
    if raw is not None and value in (
        parse_st_date(raw),
        _instant(_parse_date_value(raw, _as_utc)),
    ):
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
    Raises ImportFormatError naming the file and line (or item) at fault. For big files use
    `ChatFile`, which streams the messages instead of holding them all.
    """
    chat = ChatFile(path, persona_name, character_name_hint, character_key)
    messages = list(chat.messages())
    return chat.conversation(), messages


class ChatFile:
    """A chat file read for import: `messages()` streams the messages (a `.jsonl` chat line by
    line, in bounded memory), then `conversation()` describes them. `notes` holds what was
    repaired on the way (invalid Unicode), to be said once.

    Only a regular file is read: a FIFO, a device or a folder is refused before anything
    blocks. Each message's `segments` are left empty: they are derived from the text by the
    importer, never trusted from a file.
    """

    def __init__(
        self,
        path: Path | str,
        persona_name: str,
        character_name_hint: str | None = None,
        character_key: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.persona = persona_name
        self.hint = character_name_hint
        self.key = character_key
        self.notes: list[str] = []
        self._header: dict[str, Any] = {}
        self._header_keys: list[str] = []
        self._count = 0
        self._first: datetime | None = None
        self._last: datetime | None = None
        self._newest: datetime | None = None
        self._character: str | None = None
        self._replaced = 0
        self._replaced_line: str | None = None
        self._json_list = False
        self._base = utcnow()
        self._done = False
        # The characters' names in the order they first speak, each with the card file
        # SillyTavern's group chats name on its lines (`original_avatar`), when one does.
        self.speakers: dict[str, str | None] = {}
        self.read = ReadProgress()  # how far the file has been read (lines, bytes, messages)

    def messages(self) -> Iterator[Message]:
        try:
            with open_regular(self.path) as handle:
                self.read.total = os.fstat(handle.fileno()).st_size
                ahead = handle.peek(1 << 16)
                wide = wide_encoding(ahead)
                if wide is not None:  # UTF-16/UTF-32: read as the UTF-8 it holds
                    ahead = ahead.decode(wide, "replace").removeprefix("\ufeff").encode()
                    handle = cast(Any, Utf8Reader(handle, wide))
                first = ahead.lstrip(b"\xef\xbb\xbf \t\r\n")
                if not first and len(ahead) < 1 << 16:
                    raise ImportFormatError(f"{self.path}: the file is empty")
                if first.startswith(b"["):
                    self._json_list = True
                    yield from self._json_list_messages(handle)
                else:
                    yield from self._jsonl_messages(handle)
        except ReadError as exc:
            raise ImportFormatError(str(exc)) from exc
        except OSError as exc:
            # A file that passes as regular but refuses to be read (/proc/self/mem: EIO).
            where = f"line {self.read.line + 1}" if self.read.line else "its start"
            raise ImportFormatError(
                f"{self.path}: cannot be read at {where} ({exc.strerror or exc})"
            ) from exc
        if self._count == 0:
            raise ImportFormatError(f"{self.path}: {self._no_messages()}")
        if self._replaced:
            note = replacement_note(self._replaced)
            self.notes.append(f"{self.path}: {note} (first on {self._replaced_line})")
        self._done = True

    def conversation(self) -> Conversation:
        """The conversation the messages belong to; call after `messages()` is exhausted."""
        if not self._done:
            raise RuntimeError("read the messages first")
        if self._json_list:
            character = self.hint or self._character or "Character"
            created = self._first or self._base
            return Conversation(
                character_key=self.key or character,
                character_name=character,
                persona_name=self.persona,
                title=self.path.stem,
                created_at=created,
                updated_at=self._last_activity(created),
            )
        header = self._header
        persona, character = self.names()
        created = parse_st_date(header.get("create_date")) or self._first or utcnow()
        return Conversation(
            character_key=self.key or self.hint or character,
            character_name=character,
            persona_name=persona,
            title=self.path.stem,
            created_at=created,
            updated_at=self._last_activity(created),
            extra={
                ST: {
                    "header": {k: v for k, v in header.items() if k not in _HEADER_MAPPED},
                    "keys": self._header_keys,
                    "create_date": header.get("create_date"),
                    "user_name": header.get("user_name"),
                    "character_name": header.get("character_name"),
                }
            },
        )

    def _last_activity(self, created: datetime) -> datetime:
        """When the chat was last written to, as the file tells it: its newest message (the
        conversation list's age and order). Never later than now: a chat written on a
        machine east of this one (its zone-less dates read in this machine's zone), or under
        a clock set ahead, would read as hours ahead; listed "ahead", it would stay above
        chats written after it."""
        return min(max(created, self._newest or created), utcnow())

    def settings(self) -> ChatSettings:
        """The settings the header's `chat_metadata` carries (Author's Note, World Info, ...);
        what cannot be kept is said in `notes`. Call after `messages()` is exhausted."""
        if not self._done:
            raise RuntimeError("read the messages first")
        settings, notes = settings_from_metadata(self._header.get("chat_metadata"), str(self.path))
        self.notes.extend(notes)
        return settings

    def names(self) -> tuple[str, str]:
        """(persona, character) as far as the file has told them (the header comes first)."""
        header = self._header
        persona = _opt_str(header.get("user_name")) or self.persona
        character = _opt_str(header.get("character_name")) or self.hint
        return persona, character or self._character or "Character"

    def _no_messages(self) -> str:
        if self._json_list:
            return "the list holds no messages"
        if "speaker" in self._header or "text" in self._header:
            return (
                "no messages: a SillyTavern line needs 'mes' and 'name'; a file of "
                '{"speaker", "text"} messages must be a JSON list ([...])'
            )
        return "no messages (only a header line)" if self._header else "no messages"

    def _seen(self, message: Message, where: str) -> Message:
        self._count += 1
        self.read.messages = self._count
        self._first = self._first or message.created_at
        self._last = message.created_at
        if self._newest is None or message.created_at > self._newest:
            self._newest = message.created_at
        if self._character is None and message.role is Role.CHARACTER:
            self._character = message.speaker
        if message.role is Role.CHARACTER and message.speaker not in self.speakers:
            st = message.extra.get(ST)
            fields = st.get("fields") if isinstance(st, dict) else None
            avatar = fields.get("original_avatar") if isinstance(fields, dict) else None
            self.speakers[message.speaker] = avatar if isinstance(avatar, str) else None
        return message

    def cast(self) -> list[tuple[str, str | None, bool]]:
        """A group chat's cast as the file gives it, (name, card key, muted) in order: the
        header's `kotonia_cast` (what Kotonia wrote: the order, the cards and who was muted,
        members who never spoke included), else every character who speaks, in the order they
        first do (the card key from the card file the lines name). Fewer than two: not a
        group. Call after `messages()` is exhausted."""
        kept = self._header.get(CAST_KEY)
        if isinstance(kept, list) and all(
            isinstance(m, dict) and isinstance(m.get("name"), str) for m in kept
        ):
            return [(m["name"], _opt_str(m.get("character")), m.get("muted") is True) for m in kept]
        return [(name, _avatar_key(avatar), False) for name, avatar in self.speakers.items()]

    def _parse(self, raw: bytes, where: str, *, first: bool, label: str) -> Any:
        decoded = decode_utf8(raw, bom=first)
        try:
            obj, surrogates = loads(decoded.text)
        except json.JSONDecodeError as exc:
            line = f": line {exc.lineno}" if self._json_list else ""
            raise ImportFormatError(
                f"{where}{line}: not valid JSON ({exc.msg} at column {exc.colno})"
            ) from exc
        except JsonProblem as exc:
            raise ImportFormatError(f"{where}: {exc}") from exc
        if decoded.replaced + surrogates:
            self._replaced += decoded.replaced + surrogates
            self._replaced_line = self._replaced_line or label
        return obj

    def _jsonl_messages(self, handle: BinaryIO) -> Iterator[Message]:
        for number, raw in enumerate(_lines(handle, self.path, self.read), start=1):
            if not raw.strip():
                continue
            where = f"{self.path}: line {number}"
            obj = self._parse(raw, where, first=number == 1, label=f"line {number}")
            if not isinstance(obj, dict):
                raise ImportFormatError(f"{where}: expected a JSON object, got {_kind(obj)}")
            if not self._header and self._count == 0 and "mes" not in obj:
                self._header, self._header_keys = obj, list(obj)
                continue
            yield self._seen(_st_message(where, obj, self._last), where)

    def _json_list_messages(self, handle: BinaryIO) -> Iterator[Message]:
        data = handle.read(MAX_JSON_LIST_BYTES + 1)
        self.read.advance(1, len(data))
        if len(data) > MAX_JSON_LIST_BYTES:
            raise ImportFormatError(
                f"{self.path}: a JSON list larger than {MAX_JSON_LIST_BYTES // 2**20} MB is "
                "not read whole; write it as a .jsonl chat, one message per line"
            )
        items = self._parse(data, str(self.path), first=True, label="the list")
        if not isinstance(items, list):
            raise ImportFormatError(f"{self.path}: expected a list of messages, got {_kind(items)}")
        for number, item in enumerate(items, start=1):
            where = f"{self.path}: item {number}"
            yield self._seen(self._list_item(where, number, item), where)

    def _list_item(self, where: str, number: int, item: object) -> Message:
        if not isinstance(item, dict):
            raise ImportFormatError(f"{where}: expected an object, got {_kind(item)}")
        speaker, text_value = item.get("speaker"), item.get("text")
        if not isinstance(speaker, str) or not speaker:
            raise ImportFormatError(
                f"{where}: 'speaker' must be non-empty text, got {_shown(speaker)}"
            )
        if not isinstance(text_value, str):
            raise ImportFormatError(f"{where}: 'text' must be text, got {_shown(text_value)}")
        role = _json_role(where, item, speaker, self.persona)
        raw_date = item.get("created_at", item.get("send_date"))
        created = parse_st_date(raw_date) if raw_date is not None else None
        if raw_date is not None and created is None:
            raise ImportFormatError(f"{where}: date is not a date: {_shown(raw_date)}")
        # Undated items keep their order with distinct, increasing times.
        created = created or self._base + timedelta(milliseconds=number)
        extra = {
            k: v
            for k, v in item.items()
            if k not in ("speaker", "text", "role", "is_user", "created_at", "send_date")
        }
        return Message(role=role, speaker=speaker, text=text_value, created_at=created, extra=extra)


@dataclass
class ReadProgress:
    """How far an import has read its file: for a progress line, and for saying where an
    interrupted import stopped. `on_advance` (if set) is called after each line."""

    total: int = 0  # bytes in the file
    done: int = 0  # bytes read
    line: int = 0  # the last line read (1 for a JSON list, read whole)
    messages: int = 0  # messages read so far
    on_advance: Callable[[ReadProgress], None] | None = None

    def advance(self, line: int, size: int) -> None:
        self.line = line
        self.done += size
        if self.on_advance is not None:
            self.on_advance(self)

    def where(self) -> str:
        """Where reading stopped, in words: 'line 1,234 (12.5 of 100.0 MB, 1,233 messages)'."""
        mb = 2**20
        return (
            f"line {self.line:,} ({self.done / mb:,.1f} of {self.total / mb:,.1f} MB, "
            f"{self.messages:,} messages)"
        )


MAX_LINE_BYTES = 64 * 2**20  # one message line; a whole chat streams past this
MAX_JSON_LIST_BYTES = 64 * 2**20  # a JSON list is parsed whole, so it is bounded


def _lines(handle: BinaryIO, path: Path, read: ReadProgress) -> Iterator[bytes]:
    """Lines ended by "\n" only (U+2028 or a lone "\r" inside a text does not end one)."""
    number = 0
    while raw := handle.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(raw) > MAX_LINE_BYTES:
            raise ImportFormatError(
                f"{path}: line {number} is longer than {MAX_LINE_BYTES // 2**20} MB"
            )
        read.advance(number, len(raw))
        yield raw


def _avatar_key(avatar: str | None) -> str | None:
    """The card a SillyTavern group line names by its file ("Rowan Ashby.png")."""
    return Path(avatar).stem or None if avatar else None


def _kind(value: object) -> str:
    return type(value).__name__


def _shown(value: object, limit: int = 60) -> str:
    """A value for an error message: its repr, shortened so the message stays one line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _st_message(where: str, obj: dict[str, Any], previous: datetime | None) -> Message:
    name = obj.get("name")
    if not isinstance(name, str):
        raise ImportFormatError(f"{where}: 'name' must be text, got {_shown(name)}")
    mes = obj.get("mes")
    if not isinstance(mes, str):
        raise ImportFormatError(f"{where}: 'mes' must be text, got {_shown(mes)}")
    for flag in ("is_user", "is_system"):
        if flag in obj and not isinstance(obj[flag], bool):
            raise ImportFormatError(
                f"{where}: {flag!r} must be true or false, got {_shown(obj[flag])}"
            )
    raw_date = obj.get("send_date")
    created = parse_st_date(raw_date)
    if created is None:
        if raw_date not in (None, ""):
            raise ImportFormatError(
                f"{where}: 'send_date' is not a date this app can read: {_shown(raw_date)}"
            )
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
    # Segments are derived from the text by the importer: a file's own could say anything.
    segments: list[Segment] = []
    try:
        status = MessageStatus(own.get("status", MessageStatus.COMPLETE.value))
    except (TypeError, ValueError) as exc:
        raise ImportFormatError(
            f"{where}: extra.kotonia.status is not valid: {_shown(own.get('status'))}"
        ) from exc
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
            f"{where}: 'swipe_id' is {_shown(chosen)} but there are {len(swipes)} swipes"
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


def _json_role(where: str, item: dict[str, Any], speaker: str, persona: str) -> Role:
    if "role" in item:
        try:
            return Role(item["role"])
        except ValueError:
            known = ", ".join(r.value for r in Role)
            raise ImportFormatError(
                f"{where}: 'role' is {_shown(item['role'])}, expected one of {known}"
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
    out: IO[str],
    image_data: ImageData | None = None,
    settings: ChatSettings | None = None,
    cast: Sequence[CastMember] = (),
) -> int:
    """Write a SillyTavern `.jsonl` chat (header, then one line per message); returns the count.

    The conversation's `settings` (Author's Note, World Info, the rest) go into the header's
    `chat_metadata` (chatfiles/st_metadata.py).

    One object per line, each line ended by a newline (the last one too, as text files end).
    With `image_data`, a message's attached images go into `extra`: the first as `image` (a
    data URL, which SillyTavern shows), all of them as `kotonia_images`.

    A group's `cast` (two members or more) goes into the header as `kotonia_cast` (its order
    and who is muted), and each member's line names its card file as SillyTavern's group
    chats do (`original_avatar`, the card key with `.png`), unless the line came with one.
    """
    header = _header(conv, settings or ChatSettings())
    group = len(cast) > 1
    if group:
        header[CAST_KEY] = [
            {"name": m.character_name, "character": m.character_key, "muted": m.muted} for m in cast
        ]
    out.write(_dumps(header) + "\n")
    count = 0
    for msg in messages:
        line = st_message(msg)
        if group and msg.character_key and "original_avatar" not in line:
            line["original_avatar"] = f"{msg.character_key}.png"
        if image_data is not None and msg.images:
            urls = [_data_url(*image_data(digest)) for digest in msg.images]
            extra = dict(line.get("extra") or {})
            extra["image"] = urls[0]
            extra["kotonia_images"] = urls
            line["extra"] = extra
        out.write(_dumps(line) + "\n")
        count += 1
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


def _header(conv: Conversation, settings: ChatSettings) -> dict[str, Any]:
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
    fields = dict(fields) if isinstance(fields, dict) else {}
    fields["chat_metadata"] = metadata_with_settings(fields.get("chat_metadata"), settings)
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


class Utf8Reader:
    """A UTF-16 or UTF-32 file read as UTF-8 bytes, a line or a block at a time (the readers
    take UTF-8); sequences that do not decode become U+FFFD, as in a UTF-8 file."""

    def __init__(self, handle: BinaryIO, encoding: str) -> None:
        self._text = io.TextIOWrapper(
            cast(Any, handle), encoding=encoding, errors="replace", newline=""
        )
        self._started = False

    def _bytes(self, text: str) -> bytes:
        if not self._started:
            self._started = True
            text = text.removeprefix("\ufeff")
        return text.encode("utf-8", "surrogatepass")

    def readline(self, limit: int = -1) -> bytes:
        return self._bytes(self._text.readline(limit))

    def read(self, size: int = -1) -> bytes:
        return self._bytes(self._text.read(size))
