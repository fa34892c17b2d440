"""LoCoMo's published layout (snap-research/locomo, `data/locomo10.json`) as an evaluation.

The layout, from the project's README and its evaluation code (`task_eval/evaluation.py`,
`task_eval/evaluation_stats.py`): a JSON list of samples (a single sample object is read too),
each with `sample_id`, `conversation` {`speaker_a`, `speaker_b`, `session_<n>`: [{`speaker`,
`dia_id` ("D<session>:<turn>"), `text`, optional `img_url`, `blip_caption` (the BLIP caption of
a shared image), `query`}], `session_<n>_date_time` ("1:56 pm on 8 May, 2023")}, and `qa`
[{`question`, `answer` (the unanswerable category has `adversarial_answer`, the trap, instead),
`evidence` (dialogue ids, "when available"), `category`}]; other keys (`observation`,
`session_summary`, `event_summary`) are not read.

Categories, as the evaluation code treats them and the paper's table orders them (`keys = [4,
1, 2, 3, 5]` against "single-hop, multi-hop, temporal, open-domain, adversarial"; category 1
scored as a comma-separated multi-answer, 5 right when the reader says "no information
available" or "not mentioned"): 1 multi-hop, 2 temporal, 3 open-domain (world knowledge),
4 single-hop, 5 adversarial. Ours: `multihop`, `temporal`, `open-domain`, `fact`,
`adversarial`; another number becomes `category-<n>`, kept.

How it becomes one conversation:
- one sample per run: the first by default (said in a note), or `--sample` by `sample_id` or
  1-based number; a wrong name lists the samples;
- `speaker_b` plays the character and `speaker_a` the user, unless `--character-speaker` names
  the other (by name, or `a` / `b`);
- sessions in their number order, empty ones skipped; each session's first message opens with
  a narration line carrying the session's date (`published.session_opening`);
- a shared image keeps its caption as text, on its own line: `[shares <caption>]`, as the
  evaluation code renders it (`[shares an image]` with no caption);
- evidence ids are read as the evaluation code reads them (parentheses and blanks dropped,
  empty ones skipped), one entry may hold several ids ("D8:6; D9:17"), and "D1:03" names D1:3;
- the adversarial category's reference answer is "Not mentioned in the conversation" (what
  the evaluation code accepts) unless the question has an `answer`; a question with no
  evidence ids is left out and counted in a note; an evidence id that names no message stops
  the run with its sample, question and value, or, with `--skip-bad-evidence`, leaves the
  question out, counted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from kotonia_tui.domain import Role
from kotonia_tui.eval.dataset import (
    EvalCharacter,
    EvalConversation,
    EvalMessage,
    EvalQuestion,
    EvalUser,
)
from kotonia_tui.eval.published import (
    LayoutError,
    PublishedChoice,
    answer_text,
    choose_sample,
    left_out_note,
    session_opening,
    validation_message,
)

CATEGORY_KINDS = {1: "multihop", 2: "temporal", 3: "open-domain", 4: "fact", 5: "adversarial"}
ADVERSARIAL = 5
NOT_MENTIONED = "Not mentioned in the conversation"

_SESSION = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"D\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s;,]+")


class _Turn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    speaker: str
    dia_id: str
    text: str
    img_url: list[str] | str | None = None
    blip_caption: str | None = None


class _Question(BaseModel):
    model_config = ConfigDict(extra="ignore")

    question: str
    answer: Any = None
    adversarial_answer: Any = None
    evidence: list[Any] = []
    category: int | str


class _Sample(BaseModel):
    model_config = ConfigDict(extra="ignore")

    sample_id: str | int | None = None
    conversation: dict[str, Any]
    qa: list[_Question]


_TURNS = TypeAdapter(list[_Turn])


def read_locomo(path: Path, raw: Any, choice: PublishedChoice) -> EvalConversation:
    """One sample of a LoCoMo file as an `EvalConversation` (see the module docstring)."""
    samples = raw if isinstance(raw, list) else [raw]
    names = [_sample_name(s, i) for i, s in enumerate(samples)]
    index, chosen_note = choose_sample(path, names, choice.sample, "sample")
    name = names[index]
    where = f"{path}: sample {name}"
    try:
        sample = _Sample.model_validate(samples[index])
    except ValidationError as exc:
        raise LayoutError(validation_message(exc, f"{where}: ")) from exc
    conv = sample.conversation
    speaker_a, speaker_b = (_speaker(conv, key, where) for key in ("speaker_a", "speaker_b"))
    character, user, cast_note = _cast(speaker_a, speaker_b, choice.character_speaker, where)

    messages: list[EvalMessage] = []
    by_dia: dict[str, int] = {}
    by_number: dict[tuple[int, int], int] = {}
    for number, key in _sessions(conv):
        try:
            turns = _TURNS.validate_python(conv[key])
        except ValidationError as exc:
            raise LayoutError(validation_message(exc, f"{where}: conversation.{key}")) from exc
        if not turns:
            continue
        written = conv.get(f"{key}_date_time")
        if not isinstance(written, str) or not written.strip():
            raise LayoutError(f"{where}: conversation.{key}_date_time: missing or not text")
        for position, turn in enumerate(turns):
            field = f"conversation.{key}[{position}]"
            if turn.speaker not in (speaker_a, speaker_b):
                raise LayoutError(
                    f"{where}: {field}.speaker: {turn.speaker!r} is neither speaker_a "
                    f"({speaker_a!r}) nor speaker_b ({speaker_b!r})"
                )
            if turn.dia_id in by_dia:
                raise LayoutError(f"{where}: {field}.dia_id: {turn.dia_id!r} is used twice")
            text = _with_image(turn)
            if position == 0:
                text = f"{session_opening(number, written)}\n{text}"
            message_id = len(messages) + 1
            user_turn = turn.speaker == user
            messages.append(
                EvalMessage(
                    id=message_id,
                    role=Role.USER if user_turn else Role.CHARACTER,
                    speaker=turn.speaker,
                    text=text,
                )
            )
            by_dia[turn.dia_id] = message_id
            if parsed := _DIA_ID.fullmatch(turn.dia_id.strip()):
                by_number.setdefault((int(parsed[1]), int(parsed[2])), message_id)
    if not messages:
        raise LayoutError(f"{where}: conversation: no session_<n> holds a turn")

    questions: list[EvalQuestion] = []
    left_out: dict[str, int] = {}
    for position, qa in enumerate(sample.qa):
        field = f"qa[{position}]"
        kind = _kind(qa.category)
        evidence, bad = _evidence(qa.evidence, by_dia, by_number)
        if bad is not None:
            if not choice.skip_bad_evidence:
                raise LayoutError(
                    f"{where}: {field}.evidence: {bad!r} names no message of the sample "
                    f"(its ids run {messages_span(by_dia)}; --skip-bad-evidence leaves such "
                    "questions out)"
                )
            reason = "with an evidence id that names no message"
            left_out[reason] = left_out.get(reason, 0) + 1
            continue
        if not evidence:
            reason = f"{kind} with no evidence ids"
            left_out[reason] = left_out.get(reason, 0) + 1
            continue
        questions.append(
            EvalQuestion(
                id=f"qa{position}",
                question=qa.question,
                answer=_reference(qa, field, where),
                evidence=evidence,
                kind=kind,
            )
        )
    notes = [n for n in (chosen_note, cast_note, left_out_note(path, name, left_out)) if n]
    return EvalConversation(
        title=f"LoCoMo {name}: {speaker_a} and {speaker_b}",
        source=f"{path}#{name}",
        character=EvalCharacter(name=character),
        user=EvalUser(name=user),
        messages=messages,
        questions=questions,
        notes=notes,
    )


def _sample_name(sample: Any, index: int) -> str:
    if isinstance(sample, dict) and isinstance(sample.get("sample_id"), str | int):
        return str(sample["sample_id"])
    return str(index + 1)


def _speaker(conv: dict[str, Any], key: str, where: str) -> str:
    value = conv.get(key)
    if not isinstance(value, str) or not value.strip():
        raise LayoutError(f"{where}: conversation.{key}: missing or not a name")
    return value


def _cast(a: str, b: str, wanted: str | None, where: str) -> tuple[str, str, str | None]:
    """(character, user, note): speaker_b plays the character unless `wanted` names a."""
    if wanted is None:
        note = (
            f"{where}: {b} (speaker_b) plays the character and {a} (speaker_a) the user; "
            "--character-speaker chooses"
        )
        return b, a, note
    picked = wanted.strip().casefold()
    if picked in {b.casefold(), "b", "speaker_b"}:
        return b, a, None
    if picked in {a.casefold(), "a", "speaker_a"}:
        return a, b, None
    raise LayoutError(
        f"{where}: --character-speaker {wanted!r} is neither speaker_a ({a!r}) nor "
        f"speaker_b ({b!r})"
    )


def _sessions(conv: dict[str, Any]) -> list[tuple[int, str]]:
    found = [(int(m[1]), key) for key in conv if (m := _SESSION.match(key))]
    return sorted(found)


def _with_image(turn: _Turn) -> str:
    urls = [turn.img_url] if isinstance(turn.img_url, str) else list(turn.img_url or [])
    caption = (turn.blip_caption or "").strip()
    if not caption and not any(u.strip() for u in urls):
        return turn.text
    shared = f"[shares {caption}]" if caption else "[shares an image]"
    return f"{turn.text}\n{shared}" if turn.text.strip() else shared


def _kind(category: int | str) -> str:
    number = int(category) if str(category).strip().isdigit() else None
    if number is not None and number in CATEGORY_KINDS:
        return CATEGORY_KINDS[number]
    return f"category-{str(category).strip()}"


def _evidence(
    entries: list[Any], by_dia: dict[str, int], by_number: dict[tuple[int, int], int]
) -> tuple[list[int], str | None]:
    """The message ids the entries name, and the first entry that names none (or None)."""
    found: set[int] = set()
    for entry in entries:
        text = str(entry).replace("(", "").replace(")", "").strip()
        if not text:
            continue
        if text in by_dia:
            found.add(by_dia[text])
            continue
        ids = _DIA_ID.findall(text)
        if not ids or _SEPARATORS.sub("", _DIA_ID.sub("", text)):
            return [], str(entry)
        for session, turn in ids:
            message_id = by_number.get((int(session), int(turn)))
            if message_id is None:
                return [], str(entry)
            found.add(message_id)
    return sorted(found), None


def messages_span(by_dia: dict[str, int]) -> str:
    ids = list(by_dia)
    return f"{ids[0]} to {ids[-1]}" if ids else "nowhere"


def _reference(qa: _Question, field: str, where: str) -> str:
    if qa.answer is not None and answer_text(qa.answer):
        return answer_text(qa.answer)
    if _kind(qa.category) == CATEGORY_KINDS[ADVERSARIAL]:
        return NOT_MENTIONED
    raise LayoutError(f"{where}: {field}.answer: missing")
