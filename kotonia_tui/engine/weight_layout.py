"""How llama.cpp lays out a model's weights in memory: its AMX repacking is left off.

A llama.cpp built for a CPU with AMX (Sapphire Rapids and later Xeons) repacks quantized
weights into an "AMX" buffer at load, and its matrix product over that buffer can crash the
whole process (docs/decisions.md D-17). A crash loses the reply and the session, so on such a
build the weights stay in llama.cpp's plain CPU layout (its "extra buffer types", which the AMX
buffer is one of, are not used). Builds without AMX keep their repacking.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import llama_cpp
import llama_cpp.llama_cpp as bindings

log = logging.getLogger(__name__)


def amx_build() -> bool:
    """Whether this llama.cpp was built with its AMX kernels (it then repacks into them)."""
    info = bytes(llama_cpp.llama_print_system_info()).decode("utf-8", "replace")
    return "AMX_INT8 = 1" in info


@contextlib.contextmanager
def plain_weights_on_amx() -> Iterator[bool]:
    """Load models inside this block without the AMX repacking when the build has it;
    yields whether it was turned off. Only the owner thread (or one loading thread) loads."""
    if not amx_build():
        yield False
        return
    original = bindings.llama_model_default_params

    def params() -> Any:
        made = original()
        made.use_extra_bufts = False
        return made

    bindings.llama_model_default_params = params
    try:
        yield True
    finally:
        bindings.llama_model_default_params = original
