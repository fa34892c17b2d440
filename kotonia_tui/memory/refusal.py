"""Telling a chronicler's refusal from a summary: a stock phrase in its own voice, and short.

A refusal is the chronicler speaking for itself ("I'm sorry, but I can't help with that"), and
short for what was asked (seed 002: the refusal was 101 characters, the shortest real summary
519). A chapter often *quotes* such words: a character who says "I won't pay" or
「申し訳ありません」 is the story, not a refusal. So the check reads only the chronicler's own
words (quoted speech taken out) and compares the answer's length with what a real answer to
the request would be. The fold retries a refusal once and never stores it as memory.

The check takes an `Answer`: `Prose` for free text (a synopsis, a rolling summary, or free
text a server wrote where a structured chapter's JSON should be). A structured chapter is
judged on its structure (memory/chronicler.py read_reply): an answer that parses under the
chapter's schema is a record, never a refusal, whatever story words its items carry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

# Stock refusal phrases (English, Japanese, Chinese), matched on whole words in the
# chronicler's own voice ("Mei can't" is not "I can't").
REFUSAL_PHRASES = (
    "i can't",
    "i cannot",
    "i can not",
    "i'm not able",
    "i am not able",
    "i'm unable",
    "i am unable",
    "i won't",
    "i will not",
    "as an ai",
    "i'm sorry, but",
    "i apologize, but",
    "not able to help",
    "cannot help with",
    "can't help with",
    "against my guidelines",
    "できません",
    "お手伝いできません",
    "申し訳ありません",
    "申し訳ございません",
    "お応えできません",
    "作成できません",
    "我不能",
    "我无法",
    "抱歉",
    "对不起",
    "无法提供",
    "无法协助",
    "不能提供",
)
_PHRASE = re.compile(
    "|".join(
        # Latin phrases on word boundaries; CJK ones have no spaces to bound them.
        rf"(?<![\w']){re.escape(p)}(?!\w)" if p.isascii() else re.escape(p)
        for p in REFUSAL_PHRASES
    )
)
# The shortest real summary seen in production was 519 characters, the refusal 101 (seed 002):
# an answer this long is never a refusal, however it is worded.
REFUSAL_MAX_CHARS = 400
# ... and an answer shorter than this may be one, however short the expected answer is.
REFUSAL_MIN_CHARS = 120
# Relative to what was asked: a refusal is well under the length a real answer would have.
REFUSAL_SHARE_OF_EXPECTED = 0.5

# Quoted speech, in the marks the story languages use: "...", “...”, 「...」, 『...』, «...»,
# ‘...’ (not the apostrophe of "can't"), lines quoted Markdown-style ("> ..."), and the
# source's own dialogue lines copied back ("Ann -> Wren (says): ...").
_QUOTES = re.compile(
    r'"[^"\n]*"|“[^”]*”|「[^」]*」|『[^』]*』|«[^»]*»|‘(?:[^’]|’(?=\w))*’'
    r"|(?<!\w)'(?:[^'\n]|'(?=\w))+'(?!\w)"
    r"|^\s*>.*$|\(says\):.*$",
    re.MULTILINE,
)


class Answer(Protocol):
    """What a refusal is judged on: a chronicler's answer, whatever its shape."""

    def own_words(self) -> str:
        """The text the chronicler wrote in its own voice (no quoted speech of the story)."""
        ...

    def size(self) -> int:
        """The size of the whole answer, in characters."""
        ...


def without_quotes(text: str) -> str:
    """The text with quoted speech taken out (what the story's characters said)."""
    return _QUOTES.sub(" ", text)


@dataclass(frozen=True)
class Prose:
    """A free-text answer (a chapter or a synopsis in prose)."""

    text: str

    def own_words(self) -> str:
        return without_quotes(self.text)

    def size(self) -> int:
        return len(self.text.strip())


def short_for(expected_chars: int | None) -> int:
    """Below how many characters an answer counts as short, for an expected answer length."""
    if expected_chars is None:
        return REFUSAL_MAX_CHARS
    share = int(expected_chars * REFUSAL_SHARE_OF_EXPECTED)
    return max(REFUSAL_MIN_CHARS, min(REFUSAL_MAX_CHARS, share))


def is_refusal(answer: Answer | str, *, expected_chars: int | None = None) -> bool:
    """A stock refusal phrase in the chronicler's own words, in an answer short for what was
    asked (`expected_chars`: the length a real answer would have; None: the absolute bound)."""
    if isinstance(answer, str):
        answer = Prose(answer)
    if answer.size() >= short_for(expected_chars):
        return False
    own = answer.own_words().lower().replace("’", "'")
    return _PHRASE.search(own) is not None
