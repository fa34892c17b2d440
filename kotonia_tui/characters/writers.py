"""Writing cards: spec-shaped JSON, PNG cards (`ccv3` + `chara` chunks) and CHARX archives.

Everything is written from `CharacterCard.to_json_dict()`, so fields other tools put in a card
(unknown fields, `extensions`) are written back as they were read.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from PIL import Image, UnidentifiedImageError

from kotonia_tui.characters.card import CardAsset, CharacterCard
from kotonia_tui.characters.charx import MAIN_ICON_PATH, build_charx, embedded_path
from kotonia_tui.characters.errors import CardError
from kotonia_tui.characters.images import sniff_image_mime
from kotonia_tui.characters.png_chunks import PNG_SIGNATURE, with_text_chunks
from kotonia_tui.safe_files import write_atomically

_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif"}


def write_json_card(
    card: CharacterCard, path: Path, version: Literal["v2", "v3"] | None = None
) -> None:
    """Write the card as pretty JSON (V3 for a V3 card, V2 otherwise, unless asked)."""
    text = json.dumps(card.to_json_dict(version), ensure_ascii=False, indent=2)
    write_atomically(Path(path), text + "\n")


def write_png_card(card: CharacterCard, image_bytes: bytes | None, path: Path) -> None:
    """Write a PNG card: the picture with the card in `ccv3` (V3) and `chara` (V2) chunks.

    `image_bytes` may be PNG, JPEG or WebP (converted to PNG); None uses the card's own picture.
    Both chunks are written so that readers that only know V2 still find the character.
    """
    path = Path(path)
    picture = image_bytes if image_bytes is not None else (card.image.data if card.image else None)
    if picture is None:
        raise CardError(path, "a PNG card needs a picture, and none was given")
    png = picture if picture.startswith(PNG_SIGNATURE) else _to_png(path, picture)
    texts = {
        "ccv3": _b64_json(card.to_json_dict("v3")),
        "chara": _b64_json(card.to_json_dict("v2")),
    }
    write_atomically(path, with_text_chunks(png, texts))


def write_charx(
    card: CharacterCard,
    path: Path,
    image_bytes: bytes | None = None,
    extra_files: Mapping[str, bytes] | None = None,
) -> None:
    """Write a CHARX archive: `card.json` (V3), the picture as the main icon, and `extra_files`.

    Embedded asset descriptors whose files are not written are dropped, so the archive never
    points at a missing file (the app keeps only the main picture of a card it has read).
    """
    path = Path(path)
    files = dict(extra_files or {})
    picture = image_bytes if image_bytes is not None else (card.image.data if card.image else None)
    assets = [a for a in card.assets if embedded_path(a.uri) in (None, *files)]
    if picture is not None:
        mime = sniff_image_mime(picture)
        if mime is None:
            raise CardError(path, "the picture is not a PNG, JPEG, WebP or GIF image")
        ext = _EXTENSIONS[mime]
        member = f"{MAIN_ICON_PATH}.{ext}"
        files[member] = picture
        assets = [a for a in assets if not (a.type == "icon" and a.name == "main")]
        assets.insert(0, CardAsset(type="icon", uri=f"embeded://{member}", name="main", ext=ext))
    card_json = card.model_copy(update={"assets": assets}).to_json_dict("v3")
    encoded = json.dumps(card_json, ensure_ascii=False, indent=2).encode("utf-8")
    write_atomically(path, build_charx(encoded, files))


def _b64_json(obj: dict[str, Any]) -> str:
    raw = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return base64.b64encode(raw).decode("ascii")


def _to_png(path: Path, picture: bytes) -> bytes:
    try:
        with Image.open(io.BytesIO(picture)) as image:
            out = io.BytesIO()
            image.save(out, format="PNG")
            return out.getvalue()
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise CardError(path, f"the picture cannot be converted to PNG ({exc})") from exc
