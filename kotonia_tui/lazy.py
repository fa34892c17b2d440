"""Names a package exports but imports only when first used (PEP 562 module `__getattr__`).

The engine's backends and the evaluation pull in heavy libraries (llama_cpp and numpy,
httpx); a package that re-exports them lazily lets `kotonia --version`, a listing or the app's
first frame start without them. `numpy_hidden` keeps two libraries from loading numpy for
nothing.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def lazy_exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports `where[name]` (a module) on first
    access to `name` and keeps the value in the package."""

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next access is a plain lookup
        return value

    return getattr_


@contextmanager
def numpy_hidden() -> Iterator[None]:
    """While the block runs, `import numpy` fails unless numpy is loaded already.

    For libraries that import numpy only to speed up a corner Kotonia does not need
    (sqlite-utils' numpy column types, textual-image's Sixel packing: 20 ms vs 22 ms for a
    portrait without it), so they do not add numpy's 0.14 s to every start. Use it on the main
    thread while the app starts, before any other thread imports: the hiding is process-wide
    while it lasts. numpy stays importable after the block (llama_cpp needs it).
    """
    if "numpy" in sys.modules:
        yield
        return
    sys.modules["numpy"] = None  # type: ignore[assignment]  # `import numpy` -> ImportError
    try:
        yield
    finally:
        if sys.modules.get("numpy", False) is None:
            del sys.modules["numpy"]
