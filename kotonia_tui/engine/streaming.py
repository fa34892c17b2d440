"""Turning a token stream into visible text: UTF-8 reassembly, stop strings, thinking blocks.

All three hold back a little text while it is still ambiguous (half a character, the start of a
stop string, the start of a `<think>` tag) and release it as soon as it is not.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field

from kotonia_tui.engine.types import ReasoningDelta, StreamEvent, TextDelta


class Utf8Stream:
    """Bytes in, whole characters out: a token can end in the middle of a multi-byte character."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> str:
        return self._decoder.decode(data)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


def _partial_suffix(text: str, needle: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `needle`."""
    for size in range(min(len(text), len(needle) - 1), 0, -1):
        if needle.startswith(text[-size:]):
            return size
    return 0


@dataclass
class StopMatcher:
    """Finds the first stop string in a stream; releases text that can no longer start one."""

    stops: tuple[str, ...]
    _pending: str = ""
    stopped_by: str | None = None

    def feed(self, text: str) -> str:
        """Text that is safe to show now. After a stop matched, returns the text before it."""
        if self.stopped_by is not None:
            return ""
        self._pending += text
        hits = [(self._pending.find(s), s) for s in self.stops if s and s in self._pending]
        if hits:
            index, stop = min(hits)
            self.stopped_by = stop
            out, self._pending = self._pending[:index], ""
            return out
        hold = max((_partial_suffix(self._pending, s) for s in self.stops if s), default=0)
        out = self._pending[: len(self._pending) - hold]
        self._pending = self._pending[len(self._pending) - hold :]
        return out

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return out if self.stopped_by is None else ""


@dataclass
class ReasoningSplitter:
    """Routes text between an opening and a closing tag to `reasoning`, the rest to `reply`.

    A model may also emit only the closing tag (its template opened the block in the prompt);
    then everything before it was reasoning. `starts_inside` covers that case.
    """

    open_tag: str = "<think>"
    close_tag: str = "</think>"
    starts_inside: bool = False
    _inside: bool = False
    _pending: str = ""
    _seen_any_reply: bool = False
    reasoning: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._inside = self.starts_inside

    def feed(self, text: str) -> tuple[str, str]:
        """Returns (reply text, reasoning text) that can be released now."""
        self._pending += text
        reply_out: list[str] = []
        reason_out: list[str] = []
        while self._pending:
            tag = self.close_tag if self._inside else self.open_tag
            index = self._pending.find(tag)
            if index >= 0:
                (reason_out if self._inside else reply_out).append(self._pending[:index])
                self._pending = self._pending[index + len(tag) :]
                self._inside = not self._inside
                continue
            hold = _partial_suffix(self._pending, tag)
            (reason_out if self._inside else reply_out).append(
                self._pending[: len(self._pending) - hold]
            )
            self._pending = self._pending[len(self._pending) - hold :]
            break
        reply, reason = "".join(reply_out), "".join(reason_out)
        if not self._seen_any_reply:
            # Whitespace between a closed thinking block and the reply is not part of the reply.
            reply = reply.lstrip() if self.reasoning or reason else reply
            self._seen_any_reply = bool(reply)
        if reason:
            self.reasoning.append(reason)
        return reply, reason

    def flush(self) -> tuple[str, str]:
        out, self._pending = self._pending, ""
        if self._inside:
            self.reasoning.append(out)
            return "", out
        return out, ""

    @property
    def inside(self) -> bool:
        return self._inside


class ReplyText:
    """The visible reply of a stream: thinking kept apart, stop strings cut, the leading space
    after "Name:" dropped. Shared by every backend, so they show the same text."""

    def __init__(
        self,
        *,
        stops: tuple[str, ...],
        reasoning_tags: tuple[str, str],
        starts_in_reasoning: bool,
        continues: bool,
    ) -> None:
        open_tag, close_tag = reasoning_tags
        self.splitter = ReasoningSplitter(open_tag, close_tag, starts_inside=starts_in_reasoning)
        self.stops = StopMatcher(stops)
        self.parts: list[str] = []
        self._leading = not continues

    def feed(self, text: str, *, final: bool = False) -> tuple[str, str]:
        """(visible text, reasoning text) to release now; `final` flushes what was held."""
        visible, reasoning = self.splitter.feed(text)
        if final:
            more_visible, more_reasoning = self.splitter.flush()
            visible, reasoning = visible + more_visible, reasoning + more_reasoning
        shown = self.stops.feed(visible) + (self.stops.flush() if final else "")
        if self._leading:
            # "Name:" is followed by the model's own space; the reply starts after it.
            shown = shown.lstrip()
            self._leading = not shown
        if shown:
            self.parts.append(shown)
        return shown, reasoning

    def events(self, text: str, *, final: bool = False) -> list[StreamEvent]:
        """`feed`, as the deltas a call delivers: reasoning first, then visible text."""
        shown, reasoning = self.feed(text, final=final)
        events: list[StreamEvent] = [ReasoningDelta(reasoning)] if reasoning else []
        if shown:
            events.append(TextDelta(shown))
        return events

    @property
    def text(self) -> str:
        return "".join(self.parts).rstrip()

    @property
    def reasoning(self) -> str:
        return "".join(self.splitter.reasoning).strip()
