"""Images a user attaches: read, checked and stored by content hash before any model sees them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kotonia_tui.chat.errors import AttachmentError
from kotonia_tui.image_files import UnusableImage, check_image_bytes

if TYPE_CHECKING:
    from kotonia_tui.store import Store

__all__ = ["AttachmentError", "check_image", "read_image", "store_image"]

MAX_BYTES = 40 * 1024 * 1024


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
        facts = check_image_bytes(data)
    except UnusableImage as exc:
        raise AttachmentError(f"{name}: {exc}") from exc
    return data, facts.mime, facts.width, facts.height


def store_image(store: Store, path: Path) -> str:
    data, mime, width, height = read_image(path)
    return store.put_image(data, mime, width, height)
