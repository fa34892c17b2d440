"""What every fold job works with: the store, the engine, a conversation's budgets and cast,
and the chronicler's output ceiling, built once by the worker (chat/fold/worker.py).

The jobs (chat/fold/chapters.py, chat/fold/synopsis.py, chat/fold/quote_first.py) are the
orchestrators; this is what they share, a value that calls nothing: the chronicler's call is
chat/fold/chronicle.py, the chronicler's prompts and the reading of its answers
memory/chronicler.py, and a quote of a range's or a synopsis's own lines (what a fold stores
when the chronicler's answer cannot be stored) memory/extract.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kotonia_tui.engine import Engine
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.memory.chronicler import Cast
from kotonia_tui.store import Store

# The output cap holds at least this many times a synopsis's target: the +20% a draft may run
# over and a little more, so a draft the cap stops is one far too long (and asked again).
SYNOPSIS_CAP_SHARE = 1.25


@dataclass
class FoldContext:
    store: Store
    engine: Engine
    # A conversation's budgets, fitted to its setup (counted without holding the event loop).
    budgets_for: Callable[[int], Awaitable[Budgets]]
    cast_of: Callable[[int], Cast]  # who a conversation's story is between
    max_output: int  # the chronicler's output ceiling (so nothing is cut; never a target)

    def synopsis_target(self, budgets: Budgets) -> int:
        """The length a synopsis is asked for: the budgets' target, or less when the output
        cap could not hold a draft over it. A draft is stored within +-20% of its target, and
        a prose draft runs past it: a target near the cap has every draft cut
        (docs/decisions.md D-10)."""
        return max(1, min(budgets.synopsis_target, int(self.max_output / SYNOPSIS_CAP_SHARE)))
