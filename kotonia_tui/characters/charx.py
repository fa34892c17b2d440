"""CHARX files: a zip holding `card.json` (a V3 card) and the card's assets.

Assets are referenced from `data.assets[].uri` as `embeded://path/in/zip` (the V3 format's own
spelling) or `embedded://...`. The picture of the card is the `icon` asset named `main` (else the
first icon). Sizes are checked before reading so a hostile archive cannot exhaust memory.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Mapping
from typing import Any

from kotonia_tui.characters.card import CardImage
from kotonia_tui.characters.images import sniff_image_mime
from kotonia_tui.characters.json_fields import decode_json_bytes

CARD_MEMBER = "card.json"
EMBEDDED_SCHEMES = ("embeded://", "embedded://")
MAX_CARD_JSON_BYTES = 32 * 1024 * 1024
MAX_PICTURE_BYTES = 64 * 1024 * 1024
MAIN_ICON_PATH = "assets/icon/image/main"

# What zipfile raises on damaged or unsupported archives, besides BadZipFile.
_ZIP_FAILURES = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,
    RuntimeError,
    KeyError,
)


class CharxError(ValueError):
    """A CHARX archive that cannot be read; the message is one line saying why."""


def read_charx(data: bytes) -> tuple[Any, CardImage | None, int]:
    """The parsed `card.json`, the main icon picture (None when the card has none), and how
    many invalid Unicode sequences in `card.json` became U+FFFD."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            card_json = _read_member(archive, CARD_MEMBER, MAX_CARD_JSON_BYTES)
            if card_json is None:
                raise CharxError(f"not a CHARX card ({CARD_MEMBER} is missing from the zip)")
            try:
                obj, replaced = decode_json_bytes(card_json)
            except ValueError as exc:
                raise CharxError(f"{CARD_MEMBER}: {exc}") from exc
            image = None
            member = main_icon_member(obj)
            if member is not None:
                picture = _read_member(archive, member, MAX_PICTURE_BYTES)
                mime = sniff_image_mime(picture) if picture else None
                if picture is not None and mime is not None:
                    image = CardImage(data=picture, mime=mime)
            return obj, image, replaced
    except CharxError:
        raise
    except _ZIP_FAILURES as exc:
        raise CharxError(f"not a readable zip archive ({exc or type(exc).__name__})") from exc


def read_charx_members(data: bytes, names: list[str], limit: int) -> dict[str, bytes]:
    """The members of a CHARX archive that exist among `names` (a card's asset files), each
    at most `limit` bytes (a larger one raises CharxError naming it)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            found = {}
            for name in names:
                member = _read_member(archive, name, limit)
                if member is not None:
                    found[name] = member
            return found
    except CharxError:
        raise
    except _ZIP_FAILURES as exc:
        raise CharxError(f"not a readable zip archive ({exc or type(exc).__name__})") from exc


def embedded_path(uri: str) -> str | None:
    """The zip path an `embeded://` (or `embedded://`) asset URI names, else None."""
    for scheme in EMBEDDED_SCHEMES:
        if uri.startswith(scheme):
            return uri[len(scheme) :]
    return None


def main_icon_member(obj: Any) -> str | None:
    """The zip path of the card's main icon, read leniently (field errors are reported later)."""
    data = obj.get("data") if isinstance(obj, dict) else None
    assets = data.get("assets") if isinstance(data, dict) else None
    if not isinstance(assets, list):
        return None
    icons = [a for a in assets if isinstance(a, dict) and a.get("type") == "icon"]
    icons.sort(key=lambda a: a.get("name") != "main")
    for icon in icons:
        uri = icon.get("uri")
        if isinstance(uri, str):
            for scheme in EMBEDDED_SCHEMES:
                if uri.startswith(scheme):
                    return uri[len(scheme) :]
    return None


def _read_member(archive: zipfile.ZipFile, name: str, limit: int) -> bytes | None:
    try:
        info = archive.getinfo(name)
    except KeyError:
        return None
    if info.file_size > limit:
        raise CharxError(f"{name} is too large ({info.file_size} bytes)")
    with archive.open(info) as handle:
        return handle.read(limit + 1)[:limit]


def build_charx(card_json: bytes, files: Mapping[str, bytes]) -> bytes:
    """A CHARX archive with `card.json` (UTF-8 JSON bytes) and the given asset files."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(CARD_MEMBER, card_json)
        for name, content in files.items():
            # Pictures are already compressed; storing them saves time and nothing else.
            archive.writestr(name, content, compress_type=zipfile.ZIP_STORED)
    return buffer.getvalue()
