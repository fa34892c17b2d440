"""Images a user attaches: read, checked and stored by content hash before any model sees them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kotonia_tui.chat.errors import AttachmentError
from kotonia_tui.image_files import UnusableImage, check_image_bytes
from kotonia_tui.regular_files import FileTooLarge, NotRegularFile, ReadError, read_regular

if TYPE_CHECKING:
    from kotonia_tui.store import Store

__all__ = ["AttachmentError", "check_image", "read_image", "store_image"]

MAX_BYTES = 40 * 1024 * 1024


def read_image(path: Path) -> tuple[bytes, str, int, int]:
    """The file's bytes, mime type and size, or an AttachmentError naming the file."""
    try:
        data = read_regular(path, MAX_BYTES)  # a FIFO or /dev/zero is refused, never read
    except NotRegularFile as exc:
        raise AttachmentError(f"{path}: is {exc.kind}, not an image") from exc
    except FileTooLarge as exc:
        raise AttachmentError(f"{path}: is too large (at most {MAX_BYTES:,} bytes)") from exc
    except ReadError as exc:
        if not path.exists() and not path.is_symlink():
            raise AttachmentError(f"{path}: no such file") from exc
        raise AttachmentError(str(exc)) from exc
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
