"""Telling a chronicler's refusal from a summary: short output with a stock phrase.

A refusal is short (seed 002: the shortest real summary was 519 characters, the refusal 101)
and holds a stock phrase in one of the languages the app speaks. The fold retries a refusal
once and never stores it as memory.
"""

from __future__ import annotations

# Stock refusal phrases (English, Japanese, Chinese). A refusal is short and contains one.
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
# The shortest real summary seen in production was 519 characters, the refusal 101 (seed 002).
REFUSAL_MAX_CHARS = 400


def is_refusal(text: str) -> bool:
    """Short output with a stock refusal phrase, in any language the app speaks."""
    stripped = text.strip()
    if len(stripped) > REFUSAL_MAX_CHARS:
        return False
    lowered = stripped.lower().replace("’", "'")
    return any(phrase in lowered for phrase in REFUSAL_PHRASES)
