"""Evaluation fixtures: a short conversation with known facts, and a scripted engine.

The tiny test model has random weights: greedy output is noise, so a chronicler call always
runs to its cap (and production never stores a cut chapter). `ScriptedEngine` wraps the real
tiny engine: every call still goes through llama.cpp (prompt evaluated, one token sampled),
then the text is replaced by what a well-behaved model would write for that role:

- the chronicler keeps the first `keep` spoken lines (first ten words) of the *new* messages
  (a chapter writes them as the events of its JSON answer, citing their messages)
  (so a chapter holds some facts of its range, and a rolling rewrite, which only sees the old
  summary as "Earlier summary", forgets the old ones: the design difference under test);
  a major GC writes the length its instructions ask for ("about N words", held by the worker
  within +-20%): lines the user said, taken in turn from the earlier synopsis and from each
  chapter it folds (so every range keeps some), in story order;
  for a range `hollow` picks, the chapter's one item names things and says nothing, as a
  degenerate small model writes: the fold quotes the range's own lines instead;
- the reader answers with the reference answer when it appears in the prompt before the
  question, and "unknown" otherwise;
- the judge says yes when the answer equals the reference;
- the examiner writes one Q/A per spoken line of the range.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kotonia_tui.domain import Role
from kotonia_tui.engine import Engine, FinishReason, GenerationRequest, GenerationResult
from kotonia_tui.eval.dataset import (
    EvalCharacter,
    EvalConversation,
    EvalLie,
    EvalMessage,
    EvalQuestion,
    EvalThread,
    EvalUser,
)
from kotonia_tui.eval.examiner import EXAMINER, JUDGE, READER_A
from kotonia_tui.eval.grading import normalize
from kotonia_tui.eval.meter import EngineWrapper
from kotonia_tui.memory.chronicler import CHRONICLER
from tests.chat.conftest import tiny_settings

__all__ = ["ScriptedEngine", "short_conversation", "tiny_settings"]

# An item that names things and says nothing about them (structured.says_something).
HOLLOW_ITEM = "Harwick, Street, Corwin, Lamps, Storm"
_SAYS = re.compile(r"^\[#(\d+)\] (.+?) -> .+? \(says\): (.+)$", re.M)


class ScriptedEngine(EngineWrapper):
    """A real engine whose outputs are replaced per role (see the module docstring)."""

    def __init__(
        self,
        inner: Engine,
        answers: dict[str, str],
        keep: int = 4,
        hollow: Callable[[list[int]], bool] | None = None,
    ) -> None:
        super().__init__(inner)
        self.answers = answers  # question -> reference
        self.keep = keep
        # A chapter whose source messages (stored ids) this says yes to gets items that say
        # nothing, as a degenerate small model writes them: the fold quotes the range instead.
        self.hollow = hollow
        self.calls: list[str] = []
        self.cited: list[int] = []  # the ids the chapters' events cite, as written

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        real = await self.inner.generate(replace(request, max_tokens=1))
        self.calls.append(request.reply_name)
        text = self.script(request)
        return GenerationResult(
            text=text, reasoning="", finish_reason=FinishReason.STOP, metrics=real.metrics
        )

    def script(self, request: GenerationRequest) -> str:
        body = request.messages[-1].content
        if request.reply_name == CHRONICLER and "Chapter (messages" in body:
            return _synopsis(request.messages[0].content, body)
        if request.reply_name == CHRONICLER and request.json_schema is not None:
            # A structured chapter: the same lines, as events citing their messages, as many as
            # the chapter's schema allows.
            limit = json.loads(request.json_schema)["properties"]["events"]["maxItems"]
            source = [int(mid) for mid, _who, _said in _SAYS.findall(body)]
            if self.hollow is not None and source and self.hollow(source):
                return json.dumps({"events": [{"ids": source[:1], "event": HOLLOW_ITEM}]})
            lines = _SAYS.findall(body)[: min(self.keep, limit)]
            self.cited.extend(int(mid) for mid, _who, _said in lines)
            events = [
                {"ids": [int(mid)], "event": f"{who} told them: {' '.join(said.split()[:10])}"}
                for mid, who, said in lines
            ]
            return json.dumps({"events": events})
        if request.reply_name == CHRONICLER:
            new = body.split("New messages", 1)[-1] if "New messages" in body else body
            lines = [
                f"{who} told them: {' '.join(said.split()[:10])}"
                for _id, who, said in _SAYS.findall(new)
            ]
            return "\n".join([*lines[: self.keep], "Open: nothing"])
        if request.reply_name == EXAMINER:
            pairs = [
                f"Q: What did {who} say in message {mid}?\nA: {said}"
                for mid, who, said in _SAYS.findall(body)
            ]
            return "\n".join(pairs)
        if request.reply_name == READER_A:
            question = body.split("\n")[-1]
            reference = self.answers.get(question, "")
            context = "\n".join(m.content for m in request.messages[:-1])
            if reference and normalize(reference) in normalize(context):
                return reference
            return "unknown"
        if request.reply_name == JUDGE:
            ref = re.search(r"Reference answer: (.*)", body)
            got = re.search(r"Answer to grade: (.*)", body)
            same = ref and got and normalize(ref.group(1)) == normalize(got.group(1))
            return "yes" if same else "no"
        return "..."


def _synopsis(instructions: str, body: str) -> str:
    """A major GC's synopsis of about the words the instructions ask for (see the docstring)."""
    asked = re.search(r"Write about (\d+) words", instructions)
    assert asked is not None, instructions
    words = int(asked.group(1))
    body = body.split("Draft:", 1)[0]  # a draft shown again is not a source
    sources = [
        [line for line in block.splitlines() if "(the user) told them: " in line]
        for block in body.split("\n\n")
    ]
    kept: list[tuple[int, int, str]] = []  # (source, place in it, line)
    used = 0
    for place in range(max((len(lines) for lines in sources), default=0)):
        for number, lines in enumerate(sources):
            if place < len(lines) and used < words:
                kept.append((number, place, lines[place]))
                used += len(lines[place].split())
    return "\n".join([*(line for *_, line in sorted(kept)), "Open: nothing"])


def short_conversation(turns: int = 24) -> EvalConversation:
    """A user tells the character one code word per turn; the character repeats it back."""
    messages = []
    questions = []
    for turn in range(1, turns + 1):
        user_id, char_id = 2 * turn - 1, 2 * turn
        word = f"amber{turn}x"
        messages.append(
            EvalMessage(
                id=user_id,
                role=Role.USER,
                speaker="Ann",
                text=f"Remember this: the code word for day {turn} is {word}, and the door is "
                f"painted in the colour of the sea that morning.",
            )
        )
        messages.append(
            EvalMessage(
                id=char_id,
                role=Role.CHARACTER,
                speaker="Bo",
                text=f'*Bo writes it in the ledger.* "Day {turn}: {word}. I will keep it." '
                f"`I already forgot day {max(1, turn - 1)}.`",
            )
        )
        questions.append(
            EvalQuestion(
                id=f"d{turn}",
                question=f"What is the code word for day {turn}?",
                answer=word,
                evidence=[user_id],
            )
        )
    return EvalConversation(
        title="code words",
        source="test",
        character=EvalCharacter(name="Bo", description="Bo keeps a ledger of code words."),
        user=EvalUser(name="Ann"),
        messages=messages,
        questions=questions,
        threads=[
            EvalThread(id="t1", topic="the ledger", keywords=["ledger"], opened=2, resolved=4)
        ],
        lies=[
            EvalLie(id="l1", claim="Bo keeps it", truth="Bo forgot", keywords=["keep"], message=2)
        ],
    )


@pytest.fixture
def conversation() -> EvalConversation:
    return short_conversation()


@pytest.fixture
def eval_settings_for(tiny_model_path: Path) -> Callable[..., Any]:
    def make(**values: Any) -> Any:
        values.setdefault("n_ctx", 2048)
        values.setdefault("reply_max_tokens", 32)
        return tiny_settings(tiny_model_path, **values)

    return make
