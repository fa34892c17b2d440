"""The character's expression beside the chat: the picture the last reply's mood calls for.

Shown only for a card with expression pictures (characters/expressions.py has the rule, the
help screen says it). The picture is drawn as the portrait is (textual-image); under it, which
expression and the word of the reply that chose it.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from kotonia_tui.characters.card import CardImage
from kotonia_tui.characters.expressions import ChosenExpression
from kotonia_tui.tui.literal import literal_line
from kotonia_tui.tui.widgets.portrait import Portrait


def caption(chosen: ChosenExpression) -> Content:
    if chosen.expression is None:
        return Content.styled("no mood word in the reply", "italic $text-muted")
    if not chosen.word:
        return literal_line(f"{chosen.expression.name} (no mood word)", "$text-muted")
    return Content.assemble(
        literal_line(chosen.expression.name, "bold $text-accent"),
        literal_line(f" · “{chosen.word}”", "$text-muted"),
    )


class ExpressionPane(Vertical):
    """The expression picture and its caption."""

    DEFAULT_CSS = """
    ExpressionPane { width: 30; height: auto; max-height: 100%; padding: 0 1; }
    ExpressionPane > Portrait { width: 28; height: 14; }
    ExpressionPane > #expression-caption { height: auto; margin: 1 0 0 0; }
    """

    def __init__(self, name: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.character_name = name
        self.chosen: ChosenExpression | None = None
        self.border_title = "Expression"

    def compose(self) -> ComposeResult:
        yield Static(id="expression-caption")

    async def show(self, chosen: ChosenExpression, default: CardImage | None) -> None:
        """Draw `chosen` (the card's picture, `default`, when it names no expression)."""
        if chosen == self.chosen:
            return
        self.chosen = chosen
        image = chosen.expression.image if chosen.expression is not None else default
        await self.query(Portrait).remove()
        await self.mount(Portrait(image, self.character_name), before=0)
        self.query_one("#expression-caption", Static).update(caption(chosen))
