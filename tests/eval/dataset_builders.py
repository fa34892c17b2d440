"""The shipped datasets' builder scripts (assets/eval/make_*.py), loaded as modules: they are
scripts beside the data, not part of the package."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from kotonia_tui.eval.command import SHIPPED_DATASET


def load_builder(name: str) -> ModuleType:
    """assets/eval/`name`.py, e.g. "make_lighthouse"."""
    path = SHIPPED_DATASET.parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
