"""Image bytes from outside the app, checked with Pillow by one set of rules.

Used when a user attaches a picture (before it is stored), when the engine decodes a stored
picture for the vision projector, and for every picture the app shows (a card's portrait, an
expression, a persona's picture: `decode_thumbnail`), so all say the same thing about the same
bytes and none decodes more than `MAX_PIXELS` pixels. A picture is shown small: it is decoded
at the size shown where the format allows (JPEG's draft mode) and reduced in its own mode
before any conversion, so a 1-bit PNG is never blown up to RGB at full size.
"""

from __future__ import annotations

import io
import struct
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

MIME_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}
MAX_PIXELS = 50_000_000  # ~7k x 7k; beyond that decoding alone would exhaust memory
# The largest a shown picture needs to be: a portrait is 28 x 14 cells, ~10 x 20 pixels each.
THUMBNAIL_BOX = (512, 512)
SHOWN_FORMATS = (*MIME_TYPES, "GIF")  # a card's picture may be a GIF: shown, never sent

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
def _opened(data: bytes, formats: tuple[str, ...] = tuple(MIME_TYPES)) -> Iterator[Image.Image]:
    try:
        with warnings.catch_warnings():
            # Pillow's own bomb warning: the bound below is checked before any decoding.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            opened = Image.open(io.BytesIO(data), formats=formats)
        with opened as picture:
            kind = picture.format or ""
            if kind not in formats:
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


def decode_thumbnail(data: bytes, box: tuple[int, int] = THUMBNAIL_BOX) -> Image.Image:
    """The picture in RGB, made to fit `box` (never enlarged), within the same pixel bound as
    an attachment: decoded at a reduced size where the format allows, reduced before it is
    converted. `UnusableImage` says why not."""
    with _opened(data, SHOWN_FORMATS) as picture:
        try:
            picture.draft("RGB", box)  # JPEG decodes at 1/2 .. 1/8 of its size; others: no-op
            picture.thumbnail(box, reducing_gap=2.0)
            return picture.convert("RGB")
        except _BROKEN as exc:
            raise UnusableImage(f"not a readable image ({exc})") from exc
