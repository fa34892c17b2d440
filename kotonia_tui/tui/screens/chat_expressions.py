"""The chat screen's expression pictures: the card's expressions, read off the event loop, and
the one the last reply's mood calls for beside the chat."""

from __future__ import annotations

import logging

from textual import work
from textual.containers import VerticalScroll

from kotonia_tui.characters.card import CardImage
from kotonia_tui.characters.expressions import Expression, expression_for
from kotonia_tui.domain import Role
from kotonia_tui.tui.literal import literal_line, notify
from kotonia_tui.tui.screens.chat_base import ChatParts
from kotonia_tui.tui.widgets.expression import ExpressionPane

log = logging.getLogger(__name__)


class ExpressionActions(ChatParts):
    """Mixed into ChatScreen: the expression pane."""

    expressions: list[Expression]
    _card_image: CardImage | None

    @work(thread=True, exclusive=True, group="expressions")
    def load_expressions(self) -> None:
        """Read the card's expression pictures off the event loop (a CHARX can be large)."""
        library = self.reader.library
        card = library.card_of(self.conversation.character_key, self.conversation.character_name)
        if card is None:
            return
        expressions, problems = library.expressions(card)
        for problem in problems:
            log.warning("%s", problem)
        self.app.call_from_thread(self._expressions_loaded, expressions, card.image, problems)

    def _expressions_loaded(
        self, expressions: list[Expression], image: CardImage | None, problems: list[str]
    ) -> None:
        if problems:
            more = f" (and {len(problems) - 1} more, in the log)" if len(problems) > 1 else ""
            notify(self, problems[0] + more, title="Expressions", severity="warning")
        if not self.is_attached:
            return  # the chat was closed while the pictures were read
        self.expressions = expressions
        self._card_image = image
        self.query_one(ExpressionPane).set_class(bool(expressions), "-shown")
        self.show_expression()

    @work(exclusive=True, group="expression")
    async def show_expression(self) -> None:
        """The picture the last reply's mood calls for (and its name under the chat)."""
        if not self.expressions:
            return
        replies = [v.message for v in self._views() if v.message is not None]
        last = next((m for m in reversed(replies) if m.role is Role.CHARACTER), None)
        chosen = expression_for(last.text if last is not None else "", self.expressions)
        await self.query_one(ExpressionPane).show(chosen, self._card_image)
        name = chosen.expression.name if chosen.expression is not None else "picture"
        self.query_one("#log", VerticalScroll).border_subtitle = literal_line(f"mood: {name}")
