"""Pinning what was evaluated: the model file's sha256, cached by path, size and mtime.

Seed 002: an evaluation must pin what it measures (a rebuild in the middle nearly changed the
thing under test). Hashing a multi-gigabyte GGUF takes a while, so the digest is cached in a
small JSON file keyed by the resolved path, size and modification time: touching or replacing
the file invalidates it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

CACHE_NAME = "eval-model-hashes.json"
_CHUNK = 1 << 20


def file_sha256(path: Path, cache_dir: Path | None = None) -> str:
    """sha256 of the file, computed once per (path, size, mtime) when `cache_dir` is given."""
    path = Path(path).resolve()
    stat = path.stat()
    key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}"
    cache_file = cache_dir / CACHE_NAME if cache_dir is not None else None
    cache: dict[str, str] = {}
    if cache_file is not None and cache_file.exists():
        try:
            loaded = json.loads(cache_file.read_text(encoding="utf-8"))
            if isinstance(loaded, dict):
                cache = {str(k): str(v) for k, v in loaded.items()}
        except (OSError, ValueError):
            cache = {}  # a damaged cache is only a lost shortcut
    if key in cache:
        return cache[key]
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    if cache_file is not None:
        cache[key] = value
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(cache, indent=1), encoding="utf-8")
            tmp.replace(cache_file)
        except OSError:
            pass
    return value
