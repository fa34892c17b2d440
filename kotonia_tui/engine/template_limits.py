"""Chat templates come from model files, so they render with limits: time, output and numbers.

Jinja's sandbox stops a template from reaching Python, not from running forever: two nested
`range(100000)` loops hung a chat at 6.6 GB. `BoundedEnvironment` is the sandbox plus a budget
for one render: every call, attribute or item lookup, operator and range item counts, and the
render stops with `TemplateLimitError` once it has run `RENDER_DEADLINE_S`; the output stops at
`max_output` characters; a number passed to a call (`"x".center(10**9)`), a repetition
(`"x" * 10**9`) or a power past the bounds is refused before it allocates anything.

The limits hold inside what a template calls, too: a width written in a format string
(`"{:>999999999}".format(x)`, `"%0999999999d" % 1`, `"%09999999d"|format(1)`) is a number
like any other; `lipsum` builds its paragraphs one at a time against the budget; `wordwrap`
counts every piece it places (textwrap with a width of 1 is quadratic: docs/decisions.md D-20).
"""

from __future__ import annotations

import re
import textwrap
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator
from functools import update_wrapper
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import Context
from jinja2.sandbox import (
    MAX_RANGE,
    ImmutableSandboxedEnvironment,
    SandboxedEscapeFormatter,
    SandboxedFormatter,
)
from jinja2.utils import _PassArg, generate_lorem_ipsum
from markupsafe import Markup

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
        self.globals["lipsum"] = self._lipsum
        self.filters["wordwrap"] = self._wordwrap
        self.filters = {name: self._bounded(f, name) for name, f in self.filters.items()}

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
            _check_percent_widths(left)  # "%0999999999d" % 1
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

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """`str.format` and `format_map` as the sandbox wraps them, with every width and
        precision (written or passed as `{:{w}}`) checked before a field is formatted."""
        if not isinstance(value, types.MethodType | types.BuiltinMethodType) or (
            value.__name__ not in ("format", "format_map")
        ):
            return None
        text = value.__self__
        if not isinstance(text, str):
            return None
        formatter: SandboxedFormatter
        if isinstance(text, Markup):
            formatter = _BoundedEscapeFormatter(self, escape=text.escape)
        else:
            formatter = _BoundedFormatter(self)
        is_format_map = value.__name__ == "format_map"

        def wrapper(*args: Any, **kwargs: Any) -> str:
            self.step()
            if is_format_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                kwargs, args = args[0], ()
            return type(text)(formatter.vformat(text, args, kwargs))

        return update_wrapper(wrapper, value)

    def _lipsum(self, n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str | Markup:
        """Jinja's `lipsum`, one paragraph at a time against the budget."""
        _check_numbers((n, min, max))
        parts: list[str] = []
        size = 0
        for _ in range(n):
            self.step()
            part = generate_lorem_ipsum(1, html, min, max)
            size += len(part) + 2
            if size > self._budget.max_size:
                raise TemplateLimitError(
                    f"lipsum({n:,}) would build more than {self._budget.max_size:,} characters"
                )
            parts.append(part)
        return Markup("\n".join(parts)) if html else "\n\n".join(parts)

    def _wordwrap(
        self,
        s: str,
        width: int = 79,
        break_long_words: bool = True,
        wrapstring: str | None = None,
        break_on_hyphens: bool = True,
    ) -> str:
        """Jinja's `wordwrap` (the same result), counting each piece it places."""
        if wrapstring is None:
            wrapstring = self.newline_sequence
        wrapper = _SteppingWrapper(
            self,
            width=width,
            expand_tabs=False,
            replace_whitespace=False,
            break_long_words=break_long_words,
            break_on_hyphens=break_on_hyphens,
        )
        return wrapstring.join(wrapstring.join(wrapper.wrap(line)) for line in s.splitlines())

    def _bounded(self, function: Any, name: str) -> Any:
        """The filter, counted and checked. It takes the render's context, which a compile
        does not have: Jinja then never runs it while compiling (constant folding ran
        `{{ 'x'|center(999999)|wordwrap(1) }}` for minutes, with no clock to stop it)."""
        wants = _PassArg.from_obj(function)

        @jinja2.pass_context
        def bounded(context: Context, *args: Any, **kwargs: Any) -> Any:
            self.step()
            _check_numbers((*args, *kwargs.values()))
            if name == "format" and args and isinstance(args[0], str):
                _check_percent_widths(args[0])  # `"%09999999d"|format(1)`
            if any(_size(value) > self._budget.max_size for value in args):
                raise TemplateLimitError(
                    f"a filter was given more than {self._budget.max_size:,} characters"
                )
            if wants is _PassArg.context:
                return function(context, *args, **kwargs)
            if wants is _PassArg.eval_context:
                return function(context.eval_ctx, *args, **kwargs)
            if wants is _PassArg.environment:
                return function(context.environment, *args, **kwargs)
            return function(*args, **kwargs)

        return bounded


class _SteppingWrapper(textwrap.TextWrapper):
    """A TextWrapper whose pieces count against the render's budget as they are placed."""

    def __init__(self, environment: BoundedEnvironment, **options: Any) -> None:
        super().__init__(**options)
        self._environment = environment

    def _split_chunks(self, text: str) -> list[str]:
        return _SteppingList(super()._split_chunks(text), self._environment)

    def _handle_long_word(
        self, reversed_chunks: list[str], cur_line: list[str], cur_len: int, width: int
    ) -> None:
        # A word longer than the width is cut one line at a time, a copy of the rest each
        # time: quadratic, so each cut is a step of the budget (D-20).
        self._environment.step()
        super()._handle_long_word(reversed_chunks, cur_line, cur_len, width)


class _SteppingList(list[str]):
    def __init__(self, items: list[str], environment: BoundedEnvironment) -> None:
        super().__init__(items)
        self._environment = environment

    def pop(self, index: Any = -1) -> str:
        self._environment.step()
        return super().pop(index)


class _SpecChecks:
    """A formatter that checks each field's format spec (resolved) before formatting it."""

    def format_field(self, value: Any, format_spec: str) -> Any:
        _check_spec_numbers(format_spec)
        return super().format_field(value, format_spec)  # type: ignore[misc]


class _BoundedFormatter(_SpecChecks, SandboxedFormatter):
    pass


class _BoundedEscapeFormatter(_SpecChecks, SandboxedEscapeFormatter):
    pass


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


_DIGITS = re.compile(r"\d+")
# A %-conversion: %(key)flags width .precision (the conversion letter is not needed here).
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\d*)(?:\.(\d*))?")
_MAX_DIGITS = len(str(MAX_NUMBER))


def _too_large(digits: str) -> bool:
    digits = digits.lstrip("0")
    return len(digits) > _MAX_DIGITS or (bool(digits) and int(digits) > MAX_NUMBER)


def _refuse_width(digits: str) -> None:
    shown = digits.lstrip("0") or "0"
    shown = shown if len(shown) <= 20 else f"{shown[:12]}... ({len(shown):,} digits)"
    raise TemplateLimitError(f"a format width of {shown} is too large for a chat template")


def _check_spec_numbers(spec: str) -> None:
    """The widths and precisions in a `str.format` spec (`>999999999`, `.5000f`)."""
    for digits in _DIGITS.findall(spec):
        if _too_large(digits):
            _refuse_width(digits)


def _check_percent_widths(text: str) -> None:
    """The widths and precisions of the %-conversions in `text` (`%0999999999d`)."""
    for found in _PERCENT_SPEC.finditer(text):
        for digits in found.groups():
            if digits and _too_large(digits):
                _refuse_width(digits)
