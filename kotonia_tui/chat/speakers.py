"""Who answers in a group (issue 31): SillyTavern's strategies, as pure functions.

- natural order: the members named in the last message answer first, in the order they are
  named; then each other member answers if a draw under its talkativeness says so, the most
  talkative first; when nobody would, one member is drawn (a group never falls silent). A
  member never answers its own line.
- list order: every member, in the cast's order.
- manual: nobody until the player picks.
Muted members never answer. Auto mode asks `next_auto_speaker` after each reply.
The draws take a `random.Random`, so a test (or a replay) gives the same picks.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kotonia_tui.domain import ReplyOrder
from kotonia_tui.terms import has_unspaced

DEFAULT_TALKATIVENESS = 0.5  # SillyTavern's default for a card that sets none


@dataclass(frozen=True)
class Speaker:
    """A cast member as the strategies see it."""

    key: str
    name: str  # the name the story calls it (display name)
    talkativeness: float = DEFAULT_TALKATIVENESS
    muted: bool = False


def talkativeness(extensions: dict[str, Any]) -> float:
    """A card's `extensions.talkativeness` (SillyTavern writes a number or a numeric string),
    within 0-1; the default when it is missing or not a number."""
    value = extensions.get("talkativeness", DEFAULT_TALKATIVENESS)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return DEFAULT_TALKATIVENESS
    if number != number:  # NaN
        return DEFAULT_TALKATIVENESS
    return min(1.0, max(0.0, number))


def _first_mention(text: str, name: str) -> int | None:
    """Where `text` first names `name` (case-folded): any word of a spaced name standing as a
    word ("Rowan" names "Rowan Ashby", as SillyTavern matches a name's words); a name in a
    script written without spaces anywhere in the text (no word breaks to look for)."""
    if has_unspaced(name):
        at = text.find(name)
        return at if at >= 0 else None
    starts = [
        match.start()
        for word in name.split()
        if (match := re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text)) is not None
    ]
    return min(starts, default=None)


def named_in(text: str, members: Sequence[Speaker]) -> list[Speaker]:
    """The members `text` names, in the order it names them."""
    found: list[tuple[int, Speaker]] = []
    folded = text.casefold()
    for member in members:
        name = member.name.strip().casefold()
        at = _first_mention(folded, name) if name else None
        if at is not None:
            found.append((at, member))
    return [member for _at, member in sorted(found, key=lambda item: item[0])]


def natural_order(
    members: Sequence[Speaker],
    last_text: str,
    last_speaker: str | None,
    rng: random.Random,
) -> list[str]:
    """The keys of who answers, in order (see the module's docstring)."""
    active = [m for m in members if not m.muted]
    others = [m for m in active if m.key != last_speaker]
    if not others:
        return []
    chosen = [m.key for m in named_in(last_text, others)]
    by_talk = sorted(
        (m for m in others if m.key not in chosen), key=lambda m: -m.talkativeness
    )  # sorted() is stable: equal talkativeness keeps the cast's order
    for member in by_talk:
        if rng.random() < member.talkativeness:
            chosen.append(member.key)
    if not chosen:
        chosen.append(rng.choice(others).key)
    return chosen


def list_order(members: Sequence[Speaker]) -> list[str]:
    return [m.key for m in members if not m.muted]


def reply_plan(
    order: ReplyOrder,
    members: Sequence[Speaker],
    last_text: str,
    last_speaker: str | None,
    rng: random.Random,
) -> list[str]:
    """Who answers a new message of the player's (manual: nobody until the player picks)."""
    if order is ReplyOrder.NATURAL:
        return natural_order(members, last_text, last_speaker, rng)
    if order is ReplyOrder.LIST:
        return list_order(members)
    return []


def next_auto_speaker(
    order: ReplyOrder,
    members: Sequence[Speaker],
    last_text: str,
    last_speaker: str | None,
    rng: random.Random,
) -> str | None:
    """Who goes on when the cast talks among itself (auto mode): in natural order the first
    the last line calls on; otherwise the member after the last speaker in the cast's order
    (manual has no order of its own and goes round the list). None: nobody can (all muted,
    or only the last speaker is left)."""
    if order is ReplyOrder.NATURAL:
        picks = natural_order(members, last_text, last_speaker, rng)
        return picks[0] if picks else None
    active = [m for m in members if not m.muted]
    keys = [m.key for m in members]
    if last_speaker in keys:
        start = keys.index(last_speaker) + 1
        ring = [*members[start:], *members[:start]]
        active = [m for m in ring if not m.muted and m.key != last_speaker]
    return active[0].key if active else None
