"""The forgetting-curve evaluation and the memory audit (`kotonia eval`; assets/eval/README.md).

A conversation is replayed through the real fold policy (`replay`), questions per fold range
are asked of four memory designs built on the same fold points (`arms`), graded by the model
as judge and by exact/F1 match (`examiner`, `grading`), and the chronicler's output is audited
(`audit`); `evidence` finds where each question's evidence stands in the prompt the reader got
(window, recalled, cited, quoted, absent), with or without the reader (`--evidence-only`).
`dataset` reads the input (with `published`, `locomo` and `longmemeval`: public benchmarks
in their own layouts); `harness.run_eval` ties it together; `command` is the CLI; `report`
and `plot_png` render the results; `pinning` hashes the model file; `meter` counts model
calls; `arguments` declares the command's options (imported by the CLI's parser without the
rest).
"""

from typing import TYPE_CHECKING

from kotonia_tui.eval.arguments import ARMS
from kotonia_tui.lazy import lazy_exports

if TYPE_CHECKING:
    from kotonia_tui.eval.dataset import (
        DatasetError,
        EvalConversation,
        EvalQuestion,
        load_file,
        load_stored,
    )
    from kotonia_tui.eval.harness import EvalOptions, run_eval

__getattr__ = lazy_exports(
    __name__,
    {
        "DatasetError": "kotonia_tui.eval.dataset",
        "EvalConversation": "kotonia_tui.eval.dataset",
        "EvalQuestion": "kotonia_tui.eval.dataset",
        "load_file": "kotonia_tui.eval.dataset",
        "load_stored": "kotonia_tui.eval.dataset",
        "EvalOptions": "kotonia_tui.eval.harness",
        "run_eval": "kotonia_tui.eval.harness",
    },
)

__all__ = [
    "ARMS",
    "DatasetError",
    "EvalConversation",
    "EvalOptions",
    "EvalQuestion",
    "load_file",
    "load_stored",
    "run_eval",
]
