"""Splitting a message into narration, dialogue and inner thoughts.

The chronicler must know what was said aloud (a claim) from what happened (narration) and what
was only thought (the truth behind a lie). Role-play text marks them by convention, and the
system prompt asks the model for it: *actions and narration between asterisks*, "speech in
quotes" (「」 and “” too), and `unspoken thoughts between backticks`. Unmarked text is speech
when the message has no quotes at all (plain chat), narration otherwise.
"""

from __future__ import annotations

import re

from kotonia_tui.domain import Segment, SegmentKind

FORMAT_INSTRUCTION = (
    'Write actions and narration between *asterisks*, spoken words in "quotes", and '
    "unspoken thoughts between `backticks`."
)

_MARKED = re.compile(
    r"\*\*?(?P<narration>[^*]+?)\*\*?"
    r"|`(?P<thought>[^`]+?)`"
    r"|\"(?P<dq>[^\"]+?)\""
    r"|“(?P<cq>[^”]+?)”"
    r"|「(?P<jq>[^」]+?)」"
    r"|『(?P<jq2>[^』]+?)』",
    re.DOTALL,
)


def _clean(text: str) -> str:
    return " ".join(text.split())


def parse_segments(text: str, *, speaker: str, listener: str) -> list[Segment]:
    """Segments of one message, in order. The text itself is never changed or dropped."""
    has_quotes = any(q in text for q in ('"', "“", "「", "『"))
    plain_kind = SegmentKind.NARRATION if has_quotes else SegmentKind.DIALOGUE
    segments: list[Segment] = []

    def add(kind: SegmentKind, piece: str) -> None:
        piece = _clean(piece)
        if not piece:
            return
        if kind is SegmentKind.DIALOGUE:
            segments.append(Segment(kind=kind, text=piece, speaker=speaker, listener=listener))
        else:
            segments.append(Segment(kind=kind, text=piece, speaker=speaker))

    position = 0
    for match in _MARKED.finditer(text):
        add(plain_kind, text[position : match.start()])
        if match.group("narration") is not None:
            add(SegmentKind.NARRATION, match.group("narration"))
        elif match.group("thought") is not None:
            add(SegmentKind.THOUGHT, match.group("thought"))
        else:
            quoted = next(g for g in match.groups()[2:] if g is not None)
            add(SegmentKind.DIALOGUE, quoted)
        position = match.end()
    add(plain_kind, text[position:])
    return segments
