"""Image bytes from outside the app, checked with Pillow by one set of rules.

Used when a user attaches a picture (before it is stored) and again when the engine decodes a
stored picture for the vision projector, so both say the same thing about the same bytes.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

MIME_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}
MAX_PIXELS = 50_000_000  # ~7k x 7k; beyond that decoding alone would exhaust memory

# Pillow reports a broken file as SyntaxError ("broken PNG file"), struct.error or EOFError as
# well as OSError: all of them mean the same thing here.
_BROKEN = (
    UnidentifiedImageError,
    OSError,
    ValueError,
    SyntaxError,
    EOFError,
    struct.error,
    Image.DecompressionBombError,
)


class UnusableImage(ValueError):
    """Bytes that are not a usable image; the message says why in a few words."""


@dataclass(frozen=True)
class ImageFacts:
    mime: str
    width: int
    height: int


@contextmanager
def _opened(data: bytes) -> Iterator[Image.Image]:
    try:
        with Image.open(io.BytesIO(data)) as picture:
            kind = picture.format or ""
            if kind not in MIME_TYPES:
                raise UnusableImage(
                    f"{kind or 'unknown'} images are not supported (use PNG, JPEG or WebP)"
                )
            width, height = picture.size
            if width * height > MAX_PIXELS:
                raise UnusableImage(
                    f"{width}x{height} is too large (at most {MAX_PIXELS:,} pixels)"
                )
            yield picture
    except UnusableImage:
        raise
    except _BROKEN as exc:
        raise UnusableImage(f"not a readable image ({exc})") from exc


def check_image_bytes(data: bytes) -> ImageFacts:
    """The image's type and size, after Pillow verified the whole file."""
    with _opened(data) as picture:
        facts = ImageFacts(MIME_TYPES[picture.format or ""], *picture.size)
        picture.verify()
    return facts


def decode_rgb(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the RGB pixels of the image."""
    with _opened(data) as picture:
        width, height = picture.size
        return width, height, picture.convert("RGB").tobytes()
