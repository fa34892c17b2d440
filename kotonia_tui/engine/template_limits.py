"""Chat templates come from model files, so they render with limits: time, output and numbers.

Jinja's sandbox stops a template from reaching Python, not from running forever: two nested
`range(100000)` loops hung a chat at 6.6 GB. `BoundedEnvironment` is the sandbox plus a budget
for one render: every call, attribute or item lookup, operator and range item counts, and the
render stops with `TemplateLimitError` once it has run `RENDER_DEADLINE_S`; the output stops at
`max_output` characters; a number passed to a call (`"x".center(10**9)`), a repetition
(`"x" * 10**9`) or a power past the bounds is refused before it allocates anything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import Context
from jinja2.sandbox import MAX_RANGE, ImmutableSandboxedEnvironment

RENDER_DEADLINE_S = 2.0  # a real template renders a long conversation in milliseconds
MAX_NUMBER = 1_000_000  # an integer argument or repetition count a template may use
MAX_EXPONENT = 1_000
MIN_OUTPUT_CHARS = 1_000_000  # plus a few times the messages' own text (see `render`)
_CHECK_EVERY = 256  # steps between two looks at the clock


class TemplateLimitError(jinja2.TemplateError):
    """The template ran past a limit; the message says which."""


class _Budget(threading.local):
    deadline = float("inf")
    steps = 0
    max_size = MIN_OUTPUT_CHARS  # the longest string or list a render may build


class _Generator(CodeGenerator):
    """Compiles `a ~ b` to `environment.concat(...)`, so string building is bounded too."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.concat((")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("))")


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+", "//", "%"})
    code_generator_class = _Generator

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._budget = _Budget()
        self.globals["range"] = self._range
        self.filters = {name: self._bounded(f) for name, f in self.filters.items()}

    # ---- the budget ----------------------------------------------------------------------

    def step(self) -> None:
        budget = self._budget
        budget.steps += 1
        if budget.steps % _CHECK_EVERY == 0 and time.monotonic() > budget.deadline:
            raise TemplateLimitError(
                f"the template ran for more than {RENDER_DEADLINE_S:g} s ({budget.steps:,} steps)"
            )

    def render(self, template: jinja2.Template, max_output: int, **variables: Any) -> str:
        """Render with the limits; `max_output` bounds the characters produced."""
        budget = self._budget
        budget.deadline = time.monotonic() + RENDER_DEADLINE_S
        budget.steps = 0
        budget.max_size = max_output
        parts: list[str] = []
        size = 0
        try:
            for part in template.generate(**variables):
                size += len(part)
                if size > max_output:
                    raise TemplateLimitError(
                        f"the template printed more than {max_output:,} characters"
                    )
                parts.append(part)
                self.step()
        finally:
            budget.deadline = float("inf")
        return "".join(parts)

    # ---- what a template can do, counted and bounded --------------------------------------

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        __self.step()
        _check_numbers((*args, *kwargs.values()))
        return super().call(__context, __obj, *args, **kwargs)

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.step()
        return super().getitem(obj, argument)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        self.step()
        limit = self._budget.max_size
        if operator == "*":
            for sized, count in ((left, right), (right, left)):
                if isinstance(count, int) and _size(sized) * max(count, 0) > limit:
                    raise TemplateLimitError(
                        f"a repetition of {_size(sized):,} characters {count:,} times is too large"
                    )
        if operator == "+" and _size(left) + _size(right) > limit:
            raise TemplateLimitError(f"a value grew past {limit:,} characters")
        if operator == "%" and isinstance(left, str):
            _check_numbers(right if isinstance(right, tuple) else (right,))  # "%*s" % (10**9, "")
        if operator == "**" and isinstance(right, int) and abs(right) > MAX_EXPONENT:
            raise TemplateLimitError(f"a power of {right:,} is too large")
        return super().call_binop(context, operator, left, right)

    def concat(self, values: Iterable[Any]) -> str:
        """The `~` operator (compiled to call this, see `_Generator`)."""
        self.step()
        text = "".join(map(str, values))
        if len(text) > self._budget.max_size:
            raise TemplateLimitError(f"a value grew past {self._budget.max_size:,} characters")
        return text

    def _range(self, *args: int) -> _CountedRange:
        _check_numbers(args)
        items = range(*args)
        if len(items) > MAX_RANGE:
            raise TemplateLimitError(f"a range of {len(items):,} items (at most {MAX_RANGE:,})")
        return _CountedRange(items, self)

    def _bounded(self, function: Any) -> Any:
        def bounded(*args: Any, **kwargs: Any) -> Any:
            self.step()
            _check_numbers((*args, *kwargs.values()))
            if any(_size(value) > self._budget.max_size for value in args):
                raise TemplateLimitError(
                    f"a filter was given more than {self._budget.max_size:,} characters"
                )
            return function(*args, **kwargs)

        # Jinja reads the filter's pass_context / pass_environment marks from these.
        bounded.__dict__.update(getattr(function, "__dict__", {}))
        return bounded


class _CountedRange:
    """A range whose iteration counts against the render's budget."""

    def __init__(self, items: range, environment: BoundedEnvironment) -> None:
        self._items = items
        self._environment = environment

    def __iter__(self) -> Iterator[int]:
        for item in self._items:
            self._environment.step()
            yield item

    def __reversed__(self) -> Iterator[int]:
        return iter(_CountedRange(self._items[::-1], self._environment))

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __contains__(self, item: object) -> bool:
        return item in self._items


def _size(value: Any) -> int:
    """Characters in a string, or in a list's strings (one level: what `join` would build)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list | tuple):
        return sum(len(item) if isinstance(item, str) else 1 for item in value)
    return 0


def _check_numbers(values: tuple[Any, ...]) -> None:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_NUMBER:
            raise TemplateLimitError(f"the number {value:,} is too large for a chat template")
