"""The chat screen's expression pictures: each card's expressions, read off the event loop, and
the one the last reply's mood calls for beside the chat. In a group the pictures follow the
speaker: the last reply's member, with that member's own expressions (or its card's picture
when it has none)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from textual import work
from textual.containers import VerticalScroll

from kotonia_tui.characters.card import CardImage
from kotonia_tui.characters.expressions import ChosenExpression, Expression, expression_for
from kotonia_tui.domain import Role
from kotonia_tui.tui.literal import literal_line, notify
from kotonia_tui.tui.screens.chat_base import ChatParts
from kotonia_tui.tui.widgets.expression import ExpressionPane

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pictures:
    """One cast member's pictures: its expressions (maybe none) and its card's own picture."""

    name: str  # the name the story calls it
    expressions: list[Expression]
    image: CardImage | None


class ExpressionActions(ChatParts):
    """Mixed into ChatScreen: the expression pane."""

    pictures: dict[str, Pictures]  # by character key: the conversation's card, or the cast

    @work(thread=True, exclusive=True, group="expressions")
    def load_expressions(self) -> None:
        """Read the cast's expression pictures off the event loop (a CHARX can be large)."""
        library = self.reader.library
        pictures: dict[str, Pictures] = {}
        problems: list[str] = []
        for member in self.reader.cast(self.conv_id):
            card = library.card_of(member.character_key, member.character_name)
            if card is None:
                continue
            expressions, found = library.expressions(card)
            problems += found
            pictures[member.character_key] = Pictures(card.display_name, expressions, card.image)
        for problem in problems:
            log.warning("%s", problem)
        self.app.call_from_thread(self._expressions_loaded, pictures, problems)

    def _expressions_loaded(self, pictures: dict[str, Pictures], problems: list[str]) -> None:
        if problems:
            more = f" (and {len(problems) - 1} more, in the log)" if len(problems) > 1 else ""
            notify(self, problems[0] + more, title="Expressions", severity="warning")
        if not self.is_attached:
            return  # the chat was closed while the pictures were read
        self.pictures = pictures
        shown = any(p.expressions for p in pictures.values())
        self.query_one(ExpressionPane).set_class(shown, "-shown")
        self.show_expression()

    @work(exclusive=True, group="expression")
    async def show_expression(self) -> None:
        """The picture the last reply's mood calls for, of the member who wrote it (and the
        mood's name under the chat)."""
        if not any(p.expressions for p in self.pictures.values()):
            return
        replies = [v.message for v in self._views() if v.message is not None]
        last = next((m for m in reversed(replies) if m.role is Role.CHARACTER), None)
        key = (last.character_key if last is not None else None) or self.conversation.character_key
        pictures = self.pictures.get(key) or self.pictures.get(self.conversation.character_key)
        if pictures is None:
            return
        text = last.text if last is not None else ""
        chosen = expression_for(text, pictures.expressions)
        group = len(self.pictures) > 1
        await self.query_one(ExpressionPane).show(
            chosen, pictures.image, name=pictures.name if group else None
        )
        self.query_one("#log", VerticalScroll).border_subtitle = literal_line(
            _mood(chosen, pictures, group)
        )


def _mood(chosen: ChosenExpression, pictures: Pictures, group: bool) -> str:
    """What the chat's lower border says: the mood, and in a group whose it is."""
    if not pictures.expressions:
        return f"{pictures.name}: no expression pictures"
    name = chosen.expression.name if chosen.expression is not None else "picture"
    return f"{pictures.name} · mood: {name}" if group else f"mood: {name}"
