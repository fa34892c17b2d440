"""Grading answers against reference answers: normalisation, exact match and token F1.

The model-as-judge verdict is the primary grade (see `examiner.py`); these lexical scores are a
second opinion that does not depend on the model, used when the reference answer is short
(a name, a number, a few words), where overlap means something.

Normalisation follows the usual reading-comprehension practice (SQuAD for English, the
character-level variant used for Chinese and Japanese benchmarks): NFKC, lower case,
punctuation dropped, English articles dropped; words and numbers are the term module's tokens
(kotonia_tui/terms.py), and every character of a script written without spaces (kanji/hanzi,
kana, Thai, ...) is a token of its own, because those scripts do not separate words and a word
segmenter would be one more model to trust.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from kotonia_tui import terms
from kotonia_tui.terms import ARTICLES

# References at most this many tokens long are "short": exact/F1 are reported for them.
SHORT_ANSWER_TOKENS = 8
# An answer that only says it does not know is wrong without asking the judge.
_UNKNOWN = re.compile(
    r"^\s*(unknown|i don'?t know|not (?:stated|mentioned|known)|no idea|\[missing\]|n/?a|"
    r"不明|わかりません|分かりません|不知道|未知|没有提到)\W*$",
    re.IGNORECASE,
)


_UNITS = [
    *["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"],
    *[
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ],
]
_TENS = {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
_NUMBER_WORD = re.compile(
    rf"\b(?:(?P<tens>{'|'.join(_TENS)})(?:[- ](?P<unit>{'|'.join(_UNITS[1:10])}))?"
    rf"|(?P<small>{'|'.join(_UNITS)}))\b"
)


def _number(match: re.Match[str]) -> str:
    if match.group("small"):
        return str(_UNITS.index(match.group("small")))
    value = _TENS[match.group("tens")]
    if match.group("unit"):
        value += _UNITS.index(match.group("unit"))
    return str(value)


def normalize(text: str) -> str:
    """NFKC, lower case, English number words as digits ("forty" and "40" are one answer)."""
    folded = unicodedata.normalize("NFKC", text).casefold().strip()
    return _NUMBER_WORD.sub(_number, folded)


def answer_tokens(text: str) -> list[str]:
    """Words and numbers as tokens (articles dropped); each character of a script written
    without spaces a token."""
    return [t for t in terms.tokens(normalize(text), unspaced_gram=1) if t not in ARTICLES]


# Short words that say nothing about which answer it is (the tokens already lose articles and
# punctuation): "her brother Tom" is found by "brother" and "tom".
_FUNCTION_WORDS = frozenset(
    (
        *("and", "but", "for", "nor", "not", "the", "with", "from", "into", "onto", "that"),
        *("this", "his", "her", "hers", "him", "she", "they", "them", "their", "its", "our"),
        *("you", "your", "was", "were", "are", "has", "had", "have", "been", "who", "what"),
    )
)
_MIN_LETTERS = 3


def content_words(reference: str) -> list[str]:
    """The reference answer's words that name something: numbers (number words as digits),
    each CJK character, and Latin words of three letters or more that are not function words;
    in order, each once."""
    kept = [
        token
        for token in answer_tokens(reference)
        if any(c.isdigit() for c in token)
        or not token.isascii()
        or (len(token) >= _MIN_LETTERS and token not in _FUNCTION_WORDS)
    ]
    return list(dict.fromkeys(kept))


def exact_match(answer: str, reference: str) -> bool:
    """Equal after normalisation (token sequences), or the reference appears whole in it."""
    got, want = answer_tokens(answer), answer_tokens(reference)
    if not want:
        return False
    if got == want:
        return True
    # A short reference stated inside a longer answer ("It was Tomas, his brother") counts.
    n = len(want)
    return any(got[i : i + n] == want for i in range(len(got) - n + 1))


def token_f1(answer: str, reference: str) -> float:
    """Harmonic mean of token precision and recall (character-level for CJK)."""
    got, want = answer_tokens(answer), answer_tokens(reference)
    if not got or not want:
        return 0.0
    common = Counter(got) & Counter(want)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(got)
    recall = same / len(want)
    return 2 * precision * recall / (precision + recall)


def is_short(reference: str) -> bool:
    return 0 < len(answer_tokens(reference)) <= SHORT_ANSWER_TOKENS


def says_unknown(answer: str) -> bool:
    return not answer.strip() or bool(_UNKNOWN.match(answer.strip()))


@dataclass(frozen=True)
class LexicalGrade:
    exact: bool | None  # None: the reference is not short, so lexical scores are not used
    f1: float | None
    # The answer holds one of the reference's content words; None when the reference is not
    # short or has none ("to her", "in it"), where only the F1 can tell.
    shares_content: bool | None = None


def lexical_grade(answer: str, reference: str) -> LexicalGrade:
    if not is_short(reference):
        return LexicalGrade(None, None)
    words = content_words(reference)
    held = set(answer_tokens(answer))
    return LexicalGrade(
        exact_match(answer, reference),
        round(token_f1(answer, reference), 4),
        any(word in held for word in words) if words else None,
    )


def parse_verdict(text: str) -> bool | None:
    """A judge's yes/no: the first verdict word in its (short) output; None when there is none.

    Small models wrap the word ("The answer is: yes"), so the whole output is searched, word
    by word; a negative checked first would misread "not correct" as "correct".
    """
    head = normalize(text)
    for match in re.finditer(r"[a-z]+|[^\sa-z0-9]+", head):
        word = match.group(0)
        if word in ("not", "incorrect", "wrong", "false", "no") or word.startswith(_NO_CJK):
            return False
        if word in ("yes", "correct", "true", "right") or word.startswith(_YES_CJK):
            return True
    return None


_YES_CJK = ("はい", "正しい", "是", "对", "正确", "對")
_NO_CJK = ("いいえ", "違う", "否", "不", "错", "錯")
