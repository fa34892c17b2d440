"""A model's vocabulary alone, to count tokens exactly as the model does without loading its
weights or a context: `kotonia memory` fits a landed ledger to its share as the next turn will."""

from __future__ import annotations

from pathlib import Path

import llama_cpp

from kotonia_tui.engine import native_logs
from kotonia_tui.engine.model_files import check_gguf

VOCAB_N_CTX = 64  # llama-cpp-python makes a context even for the vocabulary: the smallest


class VocabCounter:
    """Counts tokens with a GGUF file's vocabulary (as `LlamaEngine.count_tokens`: no BOS)."""

    def __init__(self, model_path: Path) -> None:
        native_logs.install()
        check_gguf(model_path, "model")  # some header values abort llama.cpp: checked first
        self._llama = llama_cpp.Llama(
            model_path=str(model_path), vocab_only=True, n_ctx=VOCAB_N_CTX, verbose=False
        )

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        return len(self._llama._model.tokenize(text.encode("utf-8"), False, True))

    def close(self) -> None:
        self._llama.close()
