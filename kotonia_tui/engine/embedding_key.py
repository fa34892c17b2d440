"""What names an embedding model's vectors, readable without loading the model (doctor).

The key is the file's name, its fingerprint (engine/state_file.py: size and sampled hashes)
and the vector dimension: vectors of another model, or of a file replaced by another, never
share a key, so they are never ranked together.
"""

from __future__ import annotations

from pathlib import Path

from kotonia_tui.engine.model_files import check_gguf
from kotonia_tui.engine.state_file import fingerprint


def embedding_key(path: Path, dimension: int) -> str:
    return f"{path.name}:{fingerprint(path)}:{dimension}"


def header_dimension(path: Path) -> int | None:
    """The vector width the file's header declares (`ModelFileError` for a bad file)."""
    header = check_gguf(path, "embedding model")
    value = header.metadata.get(f"{header.architecture}.embedding_length")
    return value if isinstance(value, int) and value > 0 else None
