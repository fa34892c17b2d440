"""Where a question's evidence stands in the prompt the reader got, read from the prompt itself.

A question of the dataset names the messages that hold its answer. Whether the reader could
answer depends first on whether those messages are in front of it, and that does not depend on
the reader: a small reader may fail with the evidence there; the memory failed when it was not.
Each evidence message is found in one or more places of the prompt:

- `window`: verbatim in the history the prompt carries;
- `recalled`: quoted in the excerpts recalled for the question (recall arms): whole, or in a
  part that holds every word of the reference answer the whole message holds;
- `recalled_part`: recalled, but only a part of it that leaves out some of the answer's words
  the message holds (recall quotes a long message by its pieces): not present, since what of
  the message reached the prompt is what counts;
- `cited`: named by a memory item, the `(#12 #14)` a structured chapter's event or claim and a
  ledger entry end with (memory/structured.py, memory/ledger.py), also where a quoted synopsis
  quotes such an item with its ids;
- `quoted`: its own sentences quoted under its label, `#12 Mara: ...`, in a chapter quoted from
  its range or a synopsis quoted from its chapters (memory/extract.py), when they hold the
  answer's words the message holds; `quoted_part` (not present) when they leave them out;
- `absent`: none of these.

The memory is read as the prompt carries it (its text), not from the rows that made it: whatever
wrote the block, only what reached the prompt counts. A prose synopsis or rolling summary names
no message, so a message only it covers counts as absent; whether the reference answer's words
are in the prompt at all (`answer_words`) is the second figure, and tells those cases apart.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from kotonia_tui.eval.grading import answer_tokens, content_words
from kotonia_tui.sentences import sentences


class Place(StrEnum):
    WINDOW = "window"
    RECALLED = "recalled"
    RECALLED_PART = "recalled_part"  # a part of it, without the answer's words it holds
    CITED = "cited"
    QUOTED = "quoted"
    QUOTED_PART = "quoted_part"  # its sentences quoted, without the answer's words it holds
    ABSENT = "absent"


# The ids an item cites, at its end: "(#12)", "(#12 #14)", and those left of a citation some of
# whose messages were deleted, "(#12 and a deleted message)" (memory/numbering.py
# `numbered_text`: a deleted one is said in words, and is no message to find).
# Ids are at most 19 ASCII digits (SQLite's): int() of a story's longer run would stop a run.
_CITATION = re.compile(
    r"\((#[0-9]{1,19}(?: #[0-9]{1,19})*)(?: and (?:(?:a|[0-9]{1,19}) )?deleted messages?)?\)"
)
_ID = re.compile(r"#([0-9]{1,19})(?![0-9])")
# A quoted sentence's label: one message id and its speaker, at the start of a line or after a
# space (a quote quoted again sits inside a longer line: "#1-#20: #12 Mara: ... #14 Bo: ...").
# A range label ("#1-#20: ") is not one message; the speaker holds no "#" or brackets, so the
# first id of a citation ("(#3 #4) ... Mara: ") is never read as a label.
_QUOTED_LABEL = re.compile(r"(?:^|(?<=\s))#([0-9]{1,19}) [^:\n#()\[\]]{1,60}: ", re.MULTILINE)


@dataclass(frozen=True)
class MemoryRefs:
    """The messages a memory block names, as its text names them: the prompt numbers them in
    their conversation, as the chat does (chat/numbering.py; the stored text cites store
    ids), so a caller maps them to its own numbering (`mapped`)."""

    cited: frozenset[int]
    quoted: frozenset[int]
    # What is quoted of each message: its sentences under its labels, joined.
    quoted_text: Mapping[int, str] = field(default_factory=dict)

    def mapped(self, to: Mapping[int, int]) -> MemoryRefs:
        """The same messages in another numbering (a number `to` does not know stays as it
        is). Two quoted labels that `to` takes to one message have their texts joined."""
        quoted_text: dict[int, str] = {}
        for number, text in self.quoted_text.items():
            target = to.get(number, number)
            quoted_text[target] = " ".join(filter(None, (quoted_text.get(target, ""), text)))
        return MemoryRefs(
            frozenset(to.get(i, i) for i in self.cited),
            frozenset(to.get(i, i) for i in self.quoted),
            quoted_text,
        )


def memory_refs(memory_text: str) -> MemoryRefs:
    """The messages the memory block cites (items, ledger entries) and quotes (quoted
    extracts), by the numbers its text gives them, and the text quoted under each label (up
    to the next label or the line's end)."""
    cited = {
        int(number) for group in _CITATION.findall(memory_text) for number in _ID.findall(group)
    }
    quoted_text: dict[int, str] = {}
    for line in memory_text.splitlines():
        labels = list(_QUOTED_LABEL.finditer(line))
        for k, label in enumerate(labels):
            end = labels[k + 1].start() if k + 1 < len(labels) else len(line)
            number = int(label.group(1))
            quoted_text[number] = " ".join(
                filter(None, (quoted_text.get(number, ""), line[label.end() : end].strip()))
            )
    return MemoryRefs(frozenset(cited), frozenset(quoted_text), quoted_text)


def places(
    message_id: int,
    *,
    window: Collection[int],
    recalled: Collection[int],
    refs: MemoryRefs,
    recalled_short: Collection[int] = (),
    quoted_short: Collection[int] = (),
) -> list[Place]:
    """Where message `message_id` stands in the prompt (`[ABSENT]` when nowhere); every id in
    one numbering (the evaluation passes the input's own ids). `recalled_short`,
    `quoted_short`: the messages whose recalled or quoted part leaves out the answer's words
    (`carries_answer`)."""
    found = [
        place
        for place, ids in (
            (Place.WINDOW, window),
            (Place.RECALLED, set(recalled) - set(recalled_short)),
            (Place.RECALLED_PART, set(recalled) & set(recalled_short)),
            (Place.CITED, refs.cited),
            (Place.QUOTED, refs.quoted - set(quoted_short)),
            (Place.QUOTED_PART, refs.quoted & set(quoted_short)),
        )
        if message_id in ids
    ]
    return found or [Place.ABSENT]


def carries_answer(part: str, whole: str, reference: str) -> bool:
    """Whether a part of a message quoted in the prompt holds the answer as the message says
    it: the reference's content words (the same tokens as `answer_words`) that the message's
    answering sentence holds, the sentence holding the most of them (any one, on a tie). Read
    by sentence, so a common word of the reference that the message also uses elsewhere ("so
    he doesn't get addicted": "get" in another line) is not asked of the part. A message
    none of whose sentences holds any of them (the answer is said in other words, or lies in
    another message) has nothing a part could leave out: any part of it counts."""
    words = content_words(reference)
    held = set(answer_tokens(part))
    answering: list[set[str]] = []
    for sentence in sentences(whole):
        found = {word for word in words if word in set(answer_tokens(sentence))}
        if found:
            answering.append(found)
    if not answering:
        return True
    most = max(len(found) for found in answering)
    return any(found <= held for found in answering if len(found) == most)


@dataclass(frozen=True)
class AnswerWords:
    """The reference answer's content words, and those the prompt does not hold."""

    words: tuple[str, ...]
    missing: tuple[str, ...]

    @property
    def all_there(self) -> bool | None:
        """Every content word is in the prompt; None when the reference has none."""
        return not self.missing if self.words else None

    @property
    def any_there(self) -> bool:
        """At least one content word is in the prompt (the dataset builders' check that a
        line states its answer)."""
        return len(self.missing) < len(self.words)


def answer_words(reference: str, prompt_texts: Iterable[str]) -> AnswerWords:
    """Which of the reference's content words appear in the prompt's texts (as whole tokens,
    after the same normalisation as the grading: case, width, number words)."""
    words = content_words(reference)
    held = {token for text in prompt_texts for token in answer_tokens(text)}
    return AnswerWords(tuple(words), tuple(w for w in words if w not in held))


@dataclass(frozen=True)
class Located:
    """One evidence message of a question and where it stands (input message ids)."""

    message: int
    where: tuple[Place, ...]
    carried: str | None = None  # the part of it recalled, when not the whole message

    @property
    def present(self) -> bool:
        return any(place in PRESENT for place in self.where)


# The places where a message is in front of the reader (a part without the answer is not).
PRESENT = frozenset((Place.WINDOW, Place.RECALLED, Place.CITED, Place.QUOTED))  # no parts


def locate(
    evidence: Sequence[int],
    *,
    window: Collection[int],
    recalled: Collection[int],
    refs: MemoryRefs,
    parts: Mapping[int, tuple[str, str]] | None = None,
    reference: str = "",
    wholes: Mapping[int, str] | None = None,
) -> list[Located]:
    """Where each evidence message stands. `parts`: the recalled messages quoted in part, as
    (the part quoted, the whole message); such a message is `recalled` only when its part
    carries the `reference` answer's words the whole holds (`carries_answer`). `wholes`: the
    evidence messages' texts, against which what the memory quotes of them (`refs`) is read
    the same way (without them, a quote counts whatever it holds)."""
    parts = parts or {}
    short = {m for m, (part, whole) in parts.items() if not carries_answer(part, whole, reference)}
    quoted_short = {
        m
        for m, whole in (wholes or {}).items()
        if m in refs.quoted_text and not carries_answer(refs.quoted_text[m], whole, reference)
    }
    return [
        Located(
            m,
            tuple(
                places(
                    m,
                    window=window,
                    recalled=recalled,
                    refs=refs,
                    recalled_short=short,
                    quoted_short=quoted_short,
                )
            ),
            parts[m][0] if m in parts and m in recalled else None,
        )
        for m in evidence
    ]
