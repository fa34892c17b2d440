"""Real card files for the tests: PNGs made with Pillow, zips made with zipfile, plain JSON."""

from __future__ import annotations

import base64
import io
import json
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

from PIL import Image


def picture(fmt: str = "PNG", color: str = "teal", size: tuple[int, int] = (24, 32)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format=fmt)
    return out.getvalue()


def v2_card(name: str = "Mira", **data: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "description": f"{name} is a lighthouse keeper.",
        "personality": "calm",
        "scenario": "a stormy night",
        "first_mes": "Hello, {{user}}.",
        "mes_example": "",
        "creator_notes": "",
        "system_prompt": "",
        "post_history_instructions": "",
        "alternate_greetings": [],
        "tags": [],
        "creator": "",
        "character_version": "",
        "extensions": {},
    }
    body.update(data)
    return {"spec": "chara_card_v2", "spec_version": "2.0", "data": body}


def v3_card(name: str = "Mira", **data: Any) -> dict[str, Any]:
    card = v2_card(name, **{"group_only_greetings": [], **data})
    card["spec"], card["spec_version"] = "chara_card_v3", "3.0"
    return card


def b64_json(obj: Any) -> str:
    return base64.b64encode(json.dumps(obj, ensure_ascii=False).encode("utf-8")).decode("ascii")


def png_with_text(texts: dict[str, str], base: bytes | None = None) -> bytes:
    """A real PNG (Pillow) carrying the given tEXt chunks."""
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    for keyword, text in texts.items():
        info.add_text(keyword, text)
    out = io.BytesIO()
    Image.open(io.BytesIO(base or picture())).save(out, format="PNG", pnginfo=info)
    return out.getvalue()


def png_card(path: Path, chara: Any = None, ccv3: Any = None) -> Path:
    texts = {}
    if chara is not None:
        texts["chara"] = b64_json(chara)
    if ccv3 is not None:
        texts["ccv3"] = b64_json(ccv3)
    path.write_bytes(png_with_text(texts))
    return path


def json_card(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return path


def charx_card(path: Path, obj: Any, files: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("card.json", json.dumps(obj, ensure_ascii=False))
        for name, content in (files or {}).items():
            archive.writestr(name, content)
    return path


def png_chunk(chunk_type: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(chunk_type + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + chunk_type + payload + struct.pack(">I", crc)


def tavernai_comment(obj: Any) -> bytes:
    """A `UserComment` as TavernAI's .webp cards carry it: the card's UTF-8 bytes written out as
    decimal numbers joined by commas, here after the EXIF "ASCII" character-code prefix."""
    data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
    return b"ASCII\0\0\0" + ",".join(str(b) for b in data).encode("ascii")


def webp_with_comment(
    comment: bytes | None, *, in_exif_ifd: bool = False, big_endian: bool = False
) -> bytes:
    """A real WebP (Pillow) whose EXIF holds this `UserComment` (in IFD0, where TavernAI's
    writer put it, or in the Exif sub-IFD, where the EXIF standard puts it), in little- or
    big-endian TIFF; None: no EXIF."""
    out = io.BytesIO()
    if comment is None:
        Image.new("RGB", (24, 32), "plum").save(out, format="WEBP")
        return out.getvalue()
    exif = Image.Exif()
    exif.endian = ">" if big_endian else "<"
    if in_exif_ifd:
        exif.get_ifd(0x8769)[0x9286] = comment
    else:
        exif[0x9286] = comment
    Image.new("RGB", (24, 32), "plum").save(out, format="WEBP", exif=exif.tobytes())
    return out.getvalue()
