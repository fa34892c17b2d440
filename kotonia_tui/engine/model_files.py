"""Checks on model files before llama.cpp sees them, so a mistake gets a sentence, not a crash."""

from __future__ import annotations

from pathlib import Path

from kotonia_tui.engine.errors import ModelFileError

GGUF_MAGIC = b"GGUF"

_HOW_TO_SET = {
    "model": "set model_path in the profile or KOTONIA_MODEL_PATH",
    "mmproj": "set mmproj_path in the profile or KOTONIA_MMPROJ_PATH",
}


def check_gguf(path: Path, what: str) -> None:
    """The file exists, is readable, and starts like a GGUF."""
    hint = _HOW_TO_SET.get(what, "check the path")
    if not path.exists():
        raise ModelFileError(f"{path}: {what} file not found; {hint}")
    if path.is_dir():
        raise ModelFileError(f"{path}: is a folder, not a {what} GGUF file; {hint}")
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise ModelFileError(f"{path}: {what} file cannot be read ({exc.strerror})") from exc
    if magic != GGUF_MAGIC:
        raise ModelFileError(
            f"{path}: not a GGUF file (it starts with {magic!r}); {what} files must be GGUF"
        )
