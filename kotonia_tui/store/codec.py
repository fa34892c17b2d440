"""How domain values become column values and back: timestamps, JSON, segments, booleans.

Timestamps are stored as ISO-8601 UTC text of one fixed width, so text comparison in SQL
(`not_before <= ?`) orders them correctly. A naive datetime is taken to be UTC.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TypeVar

from pydantic import BaseModel, TypeAdapter

from kotonia_tui.domain import Segment
from kotonia_tui.store.errors import StoreError

_SEGMENTS = TypeAdapter(list[Segment])

StoredT = TypeVar("StoredT", bound=BaseModel)


def stored_as(kind: type[StoredT], model: BaseModel, **update: object) -> StoredT:
    """`model` as the store returns it once saved: its `Stored...` type, with the id (and
    anything else the store decided) from `update`."""
    return kind.model_validate({**dict(model), **update})


def ts_to_db(value: datetime) -> str:
    """`2026-11-29T19:30:00.000000+00:00`: always UTC, always microseconds."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def ts_from_db(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def opt_ts_to_db(value: datetime | None) -> str | None:
    return ts_to_db(value) if value is not None else None


def opt_ts_from_db(text: str | None) -> datetime | None:
    return ts_from_db(text) if text is not None else None


def json_to_db(value: object, what: str) -> str:
    """JSON text for a column; `what` names the field when the value cannot be stored."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{what} cannot be stored as JSON: {exc}") from exc


def json_from_db(text: str | None, default: object) -> object:
    return json.loads(text) if text else default


def dict_from_db(text: str | None) -> dict[str, object]:
    value = json_from_db(text, {})
    return value if isinstance(value, dict) else {}


def strings_from_db(text: str | None) -> list[str]:
    """A JSON list of strings (image hashes); anything else in the column reads as none."""
    value = json_from_db(text, [])
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def segments_to_db(segments: list[Segment]) -> str:
    return _SEGMENTS.dump_json(segments).decode("utf-8")


def segments_from_db(text: str | None) -> list[Segment]:
    return _SEGMENTS.validate_json(text) if text else []
