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


def _fields(path: Path, wanted: set[str] | None = None) -> dict[str, object]:
    """Scalar header fields (all, or only `wanted`: a model's vocabulary is large to decode)."""
    from gguf import GGUFReader  # imported late: reading headers only when a projector is set

    try:
        reader = GGUFReader(str(path), "r")
    except (ValueError, OSError) as exc:
        raise ModelFileError(f"{path}: the GGUF header cannot be read ({exc})") from exc
    values: dict[str, object] = {}
    for name, field in reader.fields.items():
        if wanted is not None and name not in wanted and not name.endswith(".embedding_length"):
            continue
        try:
            values[name] = field.contents()
        except (ValueError, IndexError, TypeError):
            continue
    return values


def check_projector_fits(mmproj: Path, model: Path) -> None:
    """The projector is a vision projector whose output width is the text model's width."""
    projector = _fields(mmproj, {"general.architecture", "clip.has_vision_encoder",
                                 "clip.vision.projection_dim"})
    if projector.get("general.architecture") != "clip":
        raise ModelFileError(
            f"{mmproj}: not a projector (architecture {projector.get('general.architecture')!r}, "
            "expected 'clip'); use the mmproj GGUF published with the model"
        )
    if projector.get("clip.has_vision_encoder") is False:
        raise ModelFileError(f"{mmproj}: this projector has no vision encoder")
    text = _fields(model, {"general.architecture"})
    arch = text.get("general.architecture")
    width = text.get(f"{arch}.embedding_length")
    projection = projector.get("clip.vision.projection_dim")
    if isinstance(width, int) and isinstance(projection, int) and width != projection:
        raise ModelFileError(
            f"{mmproj}: the projector outputs {projection}-wide embeddings but {model.name} "
            f"expects {width}: this mmproj belongs to a different model"
        )
