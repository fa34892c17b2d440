"""GLM-4.6V-Flash stand-ins (tests/tiny_glm.py): the real architecture in miniature."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import gguf
import pytest

from tests.chat.conftest import make_service
from tests.tiny_glm import write_scripted_glm, write_tiny_glm, write_tiny_glm_mmproj

__all__ = ["make_service"]


@pytest.fixture(scope="session")
def glm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny_glm")


@pytest.fixture(scope="session")
def glm_model_path(glm_dir: Path) -> Path:
    """Random-weight glm4 GGUF (n_embd 64, M-RoPE, GLM vocabulary and chat template)."""
    return write_tiny_glm(glm_dir / "tiny-glm.gguf")


@pytest.fixture(scope="session")
def glm_endless_model_path(glm_dir: Path) -> Path:
    """Same shape, but the end-of-turn tokens are suppressed: it never stops by itself."""
    return write_tiny_glm(glm_dir / "tiny-glm-endless.gguf", eot_bias=-30.0)


@pytest.fixture(scope="session")
def glm_mmproj_path(glm_dir: Path) -> Path:
    """glm4v projector fitting glm_model_path: a 32x32 image becomes 4x4 = 16 KV cells."""
    return write_tiny_glm_mmproj(glm_dir / "tiny-glm-mmproj.gguf", text_n_embd=64)


@pytest.fixture(scope="session")
def scripted_glm(glm_dir: Path) -> Callable[..., Path]:
    """Factory: ``scripted_glm(text)`` is a glm4 GGUF whose greedy reply to any prompt is
    exactly ``text``, then ``<|user|>``; ``think_tags_control=True`` writes the thinking tags
    as control tokens. Written once per arguments per session."""
    cache: dict[tuple[str, bool], Path] = {}

    def make(text: str, *, think_tags_control: bool = False) -> Path:
        key = (text, think_tags_control)
        if key not in cache:
            digest = hashlib.sha256(f"{text}|{think_tags_control}".encode()).hexdigest()[:16]
            cache[key] = write_scripted_glm(
                glm_dir / f"scripted-glm-{digest}.gguf", text, think_tags_control=think_tags_control
            )
        return cache[key]

    return make


@pytest.fixture(scope="session")
def mmproj_for(glm_dir: Path) -> Callable[[Path], Path]:
    """Factory: a glm4v projector whose output width fits the given glm4 GGUF."""
    cache: dict[int, Path] = {}

    def make(model: Path) -> Path:
        field = gguf.GGUFReader(model).fields["glm4.embedding_length"]
        width = int(field.parts[field.data[0]][0])
        if width not in cache:
            cache[width] = write_tiny_glm_mmproj(
                glm_dir / f"mmproj-{width}.gguf", text_n_embd=width
            )
        return cache[width]

    return make
