"""The forgetting-curve evaluation and the memory audit (`kotonia eval`; assets/eval/README.md).

A conversation is replayed through the real fold policy (`replay`), questions per fold range
are asked of four memory designs built on the same fold points (`arms`), graded by the model
as judge and by exact/F1 match (`examiner`, `grading`), and the chronicler's output is audited
(`audit`). `harness.run_eval` ties it together; `command` is the CLI; `report` and `plot_png`
render the results; `pinning` hashes the model file; `meter` counts model calls.
"""

from kotonia_tui.eval.arms import ARMS
from kotonia_tui.eval.dataset import (
    DatasetError,
    EvalConversation,
    EvalQuestion,
    load_file,
    load_stored,
)
from kotonia_tui.eval.harness import EvalOptions, run_eval

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
