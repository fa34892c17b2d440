"""Typed reads of untrusted JSON objects, with error messages that name the field.

Card files come from many editors, so the readers are lenient where the ecosystem is sloppy (a
`null` means "not set", a number is accepted as `character_version`) and strict where a wrong type
would silently change what the model sees (a greeting that is a number is an error, not "").
"""

from __future__ import annotations

import json
from typing import Any

from kotonia_tui.characters.errors import FieldError
from kotonia_tui.untrusted_text import JsonProblem, decode_text, loads


def json_type_name(value: object) -> str:
    """The name a user knows a JSON value by, for messages such as `got int`."""
    match value:
        case None:
            return "null"
        case bool():
            return "bool"
        case int():
            return "int"
        case float():
            return "float"
        case str():
            return "string"
        case list():
            return "list"
        case dict():
            return "object"
    return type(value).__name__


class ObjectReader:
    """Reads fields of one JSON object; `prefix` is its dotted path for error messages."""

    def __init__(self, obj: dict[str, Any], prefix: str = "") -> None:
        self.obj = obj
        self.prefix = prefix

    def path(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def has(self, key: str) -> bool:
        return self.obj.get(key) is not None

    def string(self, key: str, default: str = "") -> str:
        value = self.obj.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise FieldError(self.path(key), f"expected a string, got {json_type_name(value)}")
        return value

    def required_string(self, key: str) -> str:
        if key not in self.obj or self.obj[key] is None:
            raise FieldError(self.path(key), "missing")
        value = self.string(key)
        if not value.strip():
            raise FieldError(self.path(key), "empty")
        return value

    def optional_string(self, key: str) -> str | None:
        return self.string(key) if self.has(key) else None

    def version_string(self, key: str) -> str:
        """Like `string`, but a number is accepted: many editors write `"character_version": 1`."""
        value = self.obj.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return self.string(key)

    def strings(self, key: str) -> list[str]:
        value = self.obj.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise FieldError(
                self.path(key), f"expected a list of strings, got {json_type_name(value)}"
            )
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise FieldError(
                    f"{self.path(key)}[{index}]", f"expected a string, got {json_type_name(item)}"
                )
        return list(value)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.obj.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise FieldError(self.path(key), f"expected true or false, got {json_type_name(value)}")
        return value

    def optional_boolean(self, key: str) -> bool | None:
        return self.boolean(key, False) if self.has(key) else None

    def integer(self, key: str, default: int) -> int:
        value = self.optional_integer(key)
        return default if value is None else value

    def optional_integer(self, key: str) -> int | None:
        value = self.obj.get(key)
        if value is None:
            return None
        # Whole floats (`100.0`) come out of some JavaScript editors; they mean the integer.
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise FieldError(
                self.path(key), f"expected a whole number, got {json_type_name(value)}"
            )
        return value

    def int_or_string(self, key: str) -> int | str | None:
        value = self.obj.get(key)
        if value is None or isinstance(value, str):
            return value
        return self.optional_integer(key)

    def object(self, key: str) -> dict[str, Any]:
        value = self.obj.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise FieldError(self.path(key), f"expected an object, got {json_type_name(value)}")
        return value

    def objects(self, key: str) -> list[dict[str, Any]]:
        value = self.obj.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise FieldError(
                self.path(key), f"expected a list of objects, got {json_type_name(value)}"
            )
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                raise FieldError(
                    f"{self.path(key)}[{index}]", f"expected an object, got {json_type_name(item)}"
                )
        return list(value)

    def unknown(self, known: set[str]) -> dict[str, Any]:
        """The fields this reader does not model, kept verbatim for round trips."""
        return {k: v for k, v in self.obj.items() if k not in known}


def decode_json_bytes(data: bytes) -> tuple[Any, int]:
    """Parse JSON in UTF-8 (a BOM is allowed), UTF-16 or UTF-32; a `ValueError` says what is
    wrong, on one line.

    Returns the value and how many invalid Unicode sequences (bytes that are not UTF-8, lone
    surrogates) became U+FFFD, for the caller to say once.
    """
    decoded = decode_text(data)  # UTF-8, or UTF-16/UTF-32 (a card saved as "Unicode")
    try:
        value, surrogates = loads(decoded.text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})"
        ) from exc
    except JsonProblem as exc:
        raise ValueError(f"not valid JSON ({exc})") from exc
    return value, decoded.replaced + surrogates
