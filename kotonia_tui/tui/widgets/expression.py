"""The character's expression beside the chat: the picture the last reply's mood calls for
(in a group, of the member who wrote it).

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


def caption(chosen: ChosenExpression, speaker: str | None = None) -> Content:
    """Which expression, and the word that chose it; in a group, whose picture it is first."""
    if chosen.expression is None:
        said = Content.styled("no mood word in the reply", "italic $text-muted")
    elif not chosen.word:
        said = literal_line(f"{chosen.expression.name} (no mood word)", "$text-muted")
    else:
        said = Content.assemble(
            literal_line(chosen.expression.name, "bold $text-accent"),
            literal_line(f" · “{chosen.word}”", "$text-muted"),
        )
    if speaker is None:
        return said
    return Content.assemble(literal_line(f"{speaker}: ", "bold"), said)


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
        self.speaker = name  # whose picture is shown (in a group, the last reply's member)
        self.border_title = "Expression"

    def compose(self) -> ComposeResult:
        yield Static(id="expression-caption")

    async def show(
        self, chosen: ChosenExpression, default: CardImage | None, *, name: str | None = None
    ) -> None:
        """Draw `chosen` (the card's picture, `default`, when it names no expression); `name`:
        the group member whose picture it is (it follows the speaker; the caption names it)."""
        speaker = name or self.character_name
        if chosen == self.chosen and speaker == self.speaker:
            return
        self.chosen = chosen
        self.speaker = speaker
        image = chosen.expression.image if chosen.expression is not None else default
        await self.query(Portrait).remove()
        await self.mount(Portrait(image, speaker), before=0)
        self.query_one("#expression-caption", Static).update(caption(chosen, name))
