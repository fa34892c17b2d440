"""Images attached to messages, stored once by content hash (sha256 of the bytes)."""

from __future__ import annotations

import hashlib

from kotonia_tui.domain import utcnow
from kotonia_tui.store.codec import ts_to_db
from kotonia_tui.store.connection import Db
from kotonia_tui.store.errors import NotFoundError, StoreError


def put_image(db: Db, data: bytes, mime: str, width: int, height: int) -> str:
    """Store the bytes (once: the same image again is a no-op) and return their sha256 hex."""
    if not data:
        raise StoreError("image has no bytes")
    if width <= 0 or height <= 0:
        raise StoreError(f"image size must be positive, got {width}x{height}")
    digest = hashlib.sha256(data).hexdigest()
    with db.write():
        db.execute(
            """INSERT INTO images (hash, mime, data, path, width, height, created_at)
               VALUES (?, ?, ?, NULL, ?, ?, ?) ON CONFLICT (hash) DO NOTHING""",
            (digest, mime, data, width, height, ts_to_db(utcnow())),
        )
    return digest


def get_image(db: Db, digest: str) -> tuple[bytes, str]:
    row = db.select_one("SELECT data, path, mime FROM images WHERE hash = ?", (digest,))
    if row is None:
        raise NotFoundError(f"image {digest} is not stored in {db.path}")
    if row["data"] is None:
        # The `path` column is reserved for images kept outside the database; none are yet.
        raise StoreError(f"image {digest} is stored as a file path ({row['path']}), not as bytes")
    return bytes(row["data"]), row["mime"]
