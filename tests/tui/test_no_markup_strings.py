"""A check on the source of `tui/`: strings reach widgets through `tui/literal.py` only.

The walk over every screen (test_untrusted_text.py) proves what it visits; this catches the
ways a new line of code would bring the markup bug back anywhere else:

- a `notify(...)` that is not `tui.literal.notify` (Textual's parses its message as markup);
- `markup=True`, or `from_markup(...)`, in the TUI;
- an f-string, a string concatenation or a constant holding "[" handed straight to a widget
  that parses `str` as markup (`Static`, `Label`, `Button`, `update`, `add_row`, border
  titles, labels, tooltips, help lines). Wrap it in `literal(...)`/`literal_line(...)`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import kotonia_tui.tui

TUI = Path(kotonia_tui.tui.__file__).parent
HELPER = TUI / "literal.py"
MARKUP_CALLS = {
    "Static",
    "Label",
    "Button",
    "ListItem",
    "update",
    "add_row",
    "add_column",
    "add_columns",
    "Option",
    "Hit",
    "DiscoveryHit",
    "Toast",
}
MARKUP_ATTRIBUTES = {"border_title", "border_subtitle", "label", "tooltip", "placeholder"}
MARKUP_KEYWORDS = {"help", "tooltip", "label", "title", "description"}


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _risky(value: ast.expr) -> str | None:
    """Why `value`, given to a markup-parsing API, could carry markup; None if it cannot."""
    if isinstance(value, ast.JoinedStr):
        return "an f-string"
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add | ast.Mod):
        return "a string built with + or %"
    if isinstance(value, ast.Constant) and isinstance(value.value, str) and "[" in value.value:
        return "a constant with '['"
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in {"format", "join"}
        and isinstance(value.func.value, ast.Constant)  # "...".join(...), not Content.join
    ):
        return "a string built with str.format/str.join"
    return None


def problems_in(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[str] = []

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{path.relative_to(TUI.parent)}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if name == "notify" and isinstance(node.func, ast.Attribute) and path != HELPER:
                report(node, "a Textual notify(); use tui.literal.notify")
            if name == "from_markup":
                report(node, "from_markup() in the TUI")
            for keyword in node.keywords:
                if keyword.arg == "markup" and not (
                    isinstance(keyword.value, ast.Constant) and keyword.value.value is False
                ):
                    report(node, "markup= other than False")
                if keyword.arg in MARKUP_KEYWORDS and (why := _risky(keyword.value)):
                    report(node, f"{why} as {keyword.arg}= of {name}()")
            if name in MARKUP_CALLS:
                for arg in node.args:
                    if why := _risky(arg):
                        report(node, f"{why} given to {name}()")
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr in MARKUP_ATTRIBUTES
                    and (why := _risky(node.value))
                ):
                    report(node, f"{why} assigned to .{target.attr}")
    return found


def test_tui_source_gives_widgets_no_markup_strings() -> None:
    problems = [p for path in sorted(TUI.rglob("*.py")) for p in problems_in(path)]
    assert problems == [], "\n".join(problems)


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The check itself can fail (a file written with each mistake)."""
    bad = TUI / "_lint_probe_tmp.py"
    bad.write_text(
        "def f(self, name, card):\n"
        "    self.notify(name)\n"
        "    Static(f'{name}')\n"
        "    self.query_one(Static).update('[b]' + name)\n"
        "    box.border_title = f'{card.name}'\n"
        "    Label(name, markup=True)\n"
        "    Content.from_markup(name)\n"
        "    Static('\\n'.join(name))\n",
        encoding="utf-8",
    )
    try:
        found = problems_in(bad)
    finally:
        bad.unlink()
    assert len(found) == 7, found
