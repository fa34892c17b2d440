"""The three model roles of the evaluation: examiner (writes questions), reader, judge.

- The examiner reads one range as the chronicler reads it (narration, dialogue and thoughts
  apart) and writes factual questions with short answers. It plays an in-story role for the
  same reason the chronicler does: asked plainly, models sometimes continue the story.
- The reader gets an arm's prompt exactly as a turn would carry it (setup, memory, verbatim
  window) with a question appended at the very end, so every question of an arm reuses the
  same KV prefix and only the question is evaluated.
- The judge compares the reader's answer with the reference (yes/no). An empty answer or one
  that only says "unknown" is wrong without a call.

Limits (seed 002): the same model writes the memory, the questions, the answers and the
grades, and a small model is a weak judge; the lexical scores in `grading.py` are reported
beside the verdict for that reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kotonia_tui.domain import ChatMessage, Message
from kotonia_tui.engine import GenerationRequest, Priority, Slot
from kotonia_tui.memory.chronicler import render_source

EXAMINER = "Examiner"
READER_Q = "Question"
READER_A = "Answer"
JUDGE = "Judge"

EXAMINER_INSTRUCTIONS = """\
You are the examiner of the story between {char} and {user}. Read the messages below and \
write {n} questions about facts that happened or were said in them, each with its answer.

Rules:
- Ask about concrete facts: names, numbers, places, objects, decisions and their reasons, \
promises, rules that were set, what someone said about themselves.
- Each answer is short: a name, a number or a few words, exactly as in the messages.
- A question must be answerable from these messages alone.
- Write each pair on two lines, exactly:
Q: <question>
A: <answer>
- Write only the questions and answers."""

READER_INSTRUCTIONS = (
    "(Outside the story.) Answer the question about the story so far in a few words, using "
    "only what the story above says. If the story above does not say, answer: unknown."
)

JUDGE_INSTRUCTIONS = (
    "You grade answers to questions about a story. Given the question, the reference answer "
    "and an answer to grade, reply with one word: yes if the answer states the same fact as "
    "the reference answer, no otherwise."
)


@dataclass(frozen=True)
class QA:
    question: str
    answer: str


def examiner_request(
    messages: Sequence[Message], *, char: str, user: str, n: int, max_tokens: int
) -> GenerationRequest:
    source = render_source(messages, char=char, user=user)
    first, last = messages[0].id, messages[-1].id
    prompt = (
        ChatMessage("system", EXAMINER_INSTRUCTIONS.format(char=char, user=user, n=n)),
        ChatMessage("user", f"Messages #{first} to #{last}:\n\n{source}", name="Story"),
    )
    return GenerationRequest(
        messages=prompt,
        max_tokens=max_tokens,
        slot=Slot.FOLD,
        priority=Priority.BACKGROUND,
        reply_name=EXAMINER,
        user_name="Story",
        temperature=0.0,
    )


_Q = re.compile(r"^\s*(?:\d+[.)]\s*)?(?:Q|Question|問|问)\s*\d*\s*[:：.]\s*(?P<q>.+)$", re.I)
_A = re.compile(r"^\s*(?:A|Answer|答)\s*\d*\s*[:：.]\s*(?P<a>.+)$", re.I)


def parse_questions(text: str, limit: int) -> list[QA]:
    """`Q: ... / A: ...` pairs; a question without an answer line is dropped."""
    pairs: list[QA] = []
    pending: str | None = None
    for line in text.splitlines():
        if match := _Q.match(line):
            pending = match.group("q").strip()
        elif (match := _A.match(line)) and pending:
            answer = match.group("a").strip()
            if answer:
                pairs.append(QA(pending, answer))
            pending = None
    seen: set[str] = set()
    unique = []
    for pair in pairs:
        if pair.question.casefold() not in seen:
            seen.add(pair.question.casefold())
            unique.append(pair)
    return unique[:limit]


def reader_request(
    arm_prompt: Sequence[ChatMessage], question: str, *, max_tokens: int, notes: str = ""
) -> GenerationRequest:
    # The question goes last, after the arm's whole prompt: the prefix is shared by every
    # question of the arm and stays in the KV cache. A recall arm's excerpts for the question
    # (`notes`) go between them, after the history, so that "the story above" holds them.
    recalled = (ChatMessage("system", notes),) if notes else ()
    messages = (
        *arm_prompt,
        *recalled,
        ChatMessage("user", f"{READER_INSTRUCTIONS}\n{question}", READER_Q),
    )
    return GenerationRequest(
        messages=messages,
        max_tokens=max_tokens,
        slot=Slot.CHAT,
        priority=Priority.INTERACTIVE,
        reply_name=READER_A,
        user_name=READER_Q,
        extra_stops=("\n",),  # one line: the answer, not a continuation of the story
        temperature=0.0,
    )


def clean_answer(text: str) -> str:
    return text.strip().splitlines()[0].strip() if text.strip() else ""


# Worked examples before the real case: a base model (no chat template) follows a pattern far
# better than an instruction, and an instruct model loses nothing by them. They are about
# nothing in any story, so they cannot leak an answer.
JUDGE_EXAMPLES = (
    ("What colour was the boat?", "red", "It was painted red.", "yes"),
    ("Who wrote the letter?", "her brother Tom", "Her sister wrote it.", "no"),
    ("How many days did they wait?", "three", "3 days", "yes"),
    ("Where did she hide the key?", "under the mat", "unknown", "no"),
)


def _judge_case(question: str, reference: str, answer: str) -> str:
    return f"Question: {question}\nReference answer: {reference}\nAnswer to grade: {answer}"


def judge_request(question: str, reference: str, answer: str) -> GenerationRequest:
    messages = [ChatMessage("system", JUDGE_INSTRUCTIONS)]
    for q, ref, ans, verdict in JUDGE_EXAMPLES:
        messages.append(ChatMessage("user", _judge_case(q, ref, ans), "Grader"))
        messages.append(ChatMessage("assistant", verdict, JUDGE))
    messages.append(ChatMessage("user", _judge_case(question, reference, answer), "Grader"))
    return GenerationRequest(
        messages=tuple(messages),
        max_tokens=4,
        slot=Slot.FOLD,  # keeps the reader's prefix in the chat slot untouched
        priority=Priority.BACKGROUND,
        reply_name=JUDGE,
        user_name="Grader",
        extra_stops=("\n",),
        temperature=0.0,
    )
