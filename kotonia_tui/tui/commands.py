"""The command palette: every binding of the screen it was opened from, with its keys.

Textual's own system commands (Quit, Theme, Keys, ...) are listed by Textual; a binding with
the same title is left out here, so the palette does not offer Quit and Theme twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.dom import DOMNode

from kotonia_tui.tui.literal import markup_escaped


def _describe_key(key: str) -> str:
    return key.replace("ctrl+", "Ctrl+").replace("alt+", "Alt+").replace("shift+", "Shift+")


class BindingCommands(Provider):
    """Commands made from the active bindings that have an id and a description."""

    def _commands(self) -> Iterator[tuple[str, str, DOMNode, str]]:
        system = {command.title.casefold() for command in self.app.get_system_commands(self.screen)}
        seen: set[tuple[int, str]] = set()
        keys_of: dict[tuple[int, str], list[str]] = {}
        entries: list[tuple[str, DOMNode, str]] = []
        for key, active in self.screen.active_bindings.items():
            binding = active.binding
            if not binding.id or not binding.description or not active.enabled:
                continue
            ident = (id(active.node), binding.action)
            keys_of.setdefault(ident, []).append(_describe_key(key))
            if ident in seen or binding.description.casefold() in system:
                continue
            seen.add(ident)
            entries.append((binding.description, active.node, binding.action))
        for description, node, action in entries:
            keys = " / ".join(keys_of[(id(node), action)])
            yield description, keys, node, action

    def _runner(self, action: str, node: DOMNode) -> Callable[[], Awaitable[bool]]:
        """Run the binding's action in the namespace of the widget (or screen) that binds it."""
        return partial(self.app.run_action, action, node)

    async def discover(self) -> Hits:
        for description, keys, node, action in self._commands():
            yield DiscoveryHit(
                description, self._runner(action, node), help=markup_escaped(f"key: {keys}")
            )

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for description, keys, node, action in self._commands():
            score = matcher.match(description)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(description),
                    self._runner(action, node),
                    help=markup_escaped(f"key: {keys}"),
                )
