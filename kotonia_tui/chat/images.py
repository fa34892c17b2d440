"""Images a user attaches: read, checked and stored by content hash before any model sees them."""

from __future__ import annotations

import io
import struct
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from kotonia_tui.store import Store

ACCEPTED = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}
MAX_BYTES = 40 * 1024 * 1024
MAX_PIXELS = 50_000_000


class AttachmentError(ValueError):
    """An image that cannot be attached; the message names the file and the problem."""


def read_image(path: Path) -> tuple[bytes, str, int, int]:
    """The file's bytes, mime type and size, or an AttachmentError naming the file."""
    try:
        size = path.stat().st_size
    except FileNotFoundError as exc:
        raise AttachmentError(f"{path}: no such file") from exc
    except OSError as exc:
        raise AttachmentError(f"{path}: cannot be read ({exc.strerror})") from exc
    if path.is_dir():
        raise AttachmentError(f"{path}: is a folder, not an image")
    if size > MAX_BYTES:
        raise AttachmentError(f"{path}: {size:,} bytes is too large (at most {MAX_BYTES:,})")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AttachmentError(f"{path}: cannot be read ({exc.strerror})") from exc
    return (*check_image(data, str(path)),)


def check_image(data: bytes, name: str) -> tuple[bytes, str, int, int]:
    try:
        with Image.open(io.BytesIO(data)) as picture:
            kind = picture.format or ""
            width, height = picture.size
            if kind not in ACCEPTED:
                raise AttachmentError(
                    f"{name}: {kind or 'unknown'} images are not supported (PNG, JPEG or WebP)"
                )
            if width * height > MAX_PIXELS:
                raise AttachmentError(f"{name}: {width}x{height} is too large")
            picture.verify()
    except AttachmentError:
        raise
    # Pillow reports a broken file as SyntaxError ("broken PNG file"), struct.error or
    # EOFError as well as OSError: all of them mean the same thing here.
    except (
        UnidentifiedImageError,
        OSError,
        ValueError,
        SyntaxError,
        EOFError,
        struct.error,
        Image.DecompressionBombError,
    ) as exc:
        raise AttachmentError(f"{name}: not a readable image ({exc})") from exc
    return data, ACCEPTED[kind], width, height


def store_image(store: Store, path: Path) -> str:
    data, mime, width, height = read_image(path)
    return store.put_image(data, mime, width, height)
