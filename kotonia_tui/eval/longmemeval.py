"""LongMemEval's published layout (xiaowu0162/LongMemEval: `longmemeval_s.json`, `_m`,
`_oracle`) as an evaluation.

The layout, from the project's README ("Dataset Format"): a JSON list of question records,
each with `question_id`, `question_type` (`single-session-user`, `single-session-assistant`,
`single-session-preference`, `temporal-reasoning`, `knowledge-update`, `multi-session`; an id
ending in `_abs` marks an abstention question), `question`, `answer`, `question_date`,
`haystack_session_ids`, `haystack_dates` ("2023/05/20 (Sat) 02:21"), `haystack_sessions`
(each a list of turns {`role`: user | assistant, `content`, `has_answer`: true on the turns
holding the evidence}) and `answer_session_ids` (the evidence sessions). The sessions are
sorted by date in `_s` and `_m`, not in `_oracle`.

How it becomes one conversation:
- every record carries its own haystack, so records are grouped by haystack (the same session
  ids, dates and turn counts, in the same order): one group is one conversation with the
  questions of its records. `--sample QUESTION_ID` picks the group holding that question; by
  default the first record's group, said in a note. One group is read, never a union of
  haystacks (a session may carry another date in another record);
- sessions sorted by date when every date is in LongMemEval's format (else in file order),
  empty ones skipped; each session's first message opens with a narration line carrying its
  date (`published.session_opening`); the assistant plays the character (named "Assistant"),
  the user is the user;
- a question is asked on its `question_date`: the question text starts "Today is <date>.", as
  LongMemEval's own reader is told the current date;
- evidence: the turns marked `has_answer`; a question with none marked takes every turn of its
  `answer_session_ids` (session-level evidence, LongMemEval's other recall measure), said in
  a note. Abstention questions are left out and counted (the README: they "refer to
  non-existing events and do not have a ground truth answer location"). An answer session
  that is not in the haystack stops the run, or with `--skip-bad-evidence` leaves the question
  out, counted.

Kinds: `single-session-user` -> `user`, `single-session-assistant` -> `fact` (what the
character said), `multi-session` -> `multihop`, `temporal-reasoning` -> `temporal`;
`single-session-preference` -> `preference` and `knowledge-update` -> `knowledge-update` have
no kind of ours and keep their own, as does any other type.
"""

from __future__ import annotations

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
    parse_when,
    session_opening,
    spoken_when,
    validation_message,
)

TYPE_KINDS = {
    "single-session-user": "user",
    "single-session-assistant": "fact",
    "single-session-preference": "preference",
    "multi-session": "multihop",
    "temporal-reasoning": "temporal",
    "knowledge-update": "knowledge-update",
}
ABSTENTION_SUFFIX = "_abs"
ASSISTANT = "Assistant"


class _Turn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    content: str
    has_answer: bool = False


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")

    question_id: str
    question_type: str
    question: str
    answer: Any
    question_date: str
    haystack_session_ids: list[str]
    haystack_dates: list[str]
    haystack_sessions: list[list[_Turn]]
    answer_session_ids: list[str]


_RECORDS = TypeAdapter(list[_Record])


def read_longmemeval(
    path: Path, raw: Any, choice: PublishedChoice, user_name: str = "User"
) -> EvalConversation:
    """The records sharing one haystack as an `EvalConversation` (see the module docstring)."""
    wanted = choice.character_speaker
    if wanted is not None and wanted.strip().casefold() != ASSISTANT.casefold():
        raise LayoutError(
            f"{path}: --character-speaker {choice.character_speaker!r}: in LongMemEval the "
            "assistant plays the character"
        )
    try:
        records = _RECORDS.validate_python(raw if isinstance(raw, list) else [raw])
    except ValidationError as exc:
        raise LayoutError(validation_message(exc, f"{path}: ")) from exc
    if not records:
        raise LayoutError(f"{path}: no question records")
    for index, record in enumerate(records):
        _check_lengths(path, index, record)
    names = [r.question_id for r in records]
    index, chosen_note = choose_sample(path, names, choice.sample, "question")
    key = _haystack_key(records[index])
    group = [r for r in records if _haystack_key(r) == key]
    first = group[0]
    if chosen_note and len(records) > 1:
        groups = len({_haystack_key(r) for r in records})
        chosen_note += (
            f"; {len(records)} records with {groups} haystack{'s' if groups != 1 else ''}: "
            f"this one holds {len(group)} question{'s' if len(group) != 1 else ''}"
        )

    notes = [chosen_note] if chosen_note else []
    order = _session_order(first)
    if order is None:
        order = list(range(len(first.haystack_sessions)))
        notes.append(
            f"{path}: {first.question_id}: haystack_dates not all in LongMemEval's format "
            "(2023/05/20 (Sat) 02:21): sessions kept in file order, dates shown as written"
        )
    messages: list[EvalMessage] = []
    at: dict[tuple[int, int], int] = {}  # (session index in the file, turn) -> message id
    by_session: dict[str, list[int]] = {}
    number = 0
    for session_index in order:
        turns = first.haystack_sessions[session_index]
        if not turns:
            continue
        number += 1
        session_id = first.haystack_session_ids[session_index]
        for position, turn in enumerate(turns):
            if turn.role not in ("user", "assistant"):
                raise LayoutError(
                    f"{path}: {first.question_id}: haystack_sessions[{session_index}]"
                    f"[{position}].role: {turn.role!r} is neither user nor assistant"
                )
            text = turn.content
            if position == 0:
                written = first.haystack_dates[session_index]
                text = f"{session_opening(number, written)}\n{text}"
            message_id = len(messages) + 1
            user_turn = turn.role == "user"
            messages.append(
                EvalMessage(
                    id=message_id,
                    role=Role.USER if user_turn else Role.CHARACTER,
                    speaker=user_name if user_turn else ASSISTANT,
                    text=text,
                )
            )
            at[(session_index, position)] = message_id
            by_session.setdefault(session_id, []).append(message_id)
    if not messages:
        raise LayoutError(f"{path}: {first.question_id}: haystack_sessions: no session has a turn")

    questions: list[EvalQuestion] = []
    left_out: dict[str, int] = {}
    whole_sessions = 0
    for record in group:
        kind = _kind(record)
        if kind == "abstention":
            left_out["abstention (no evidence location)"] = (
                left_out.get("abstention (no evidence location)", 0) + 1
            )
            continue
        evidence = sorted(
            at[(s, t)]
            for s, session in enumerate(record.haystack_sessions)
            for t, turn in enumerate(session)
            if turn.has_answer
        )
        if not evidence:
            missing = [s for s in record.answer_session_ids if s not in by_session]
            if missing:
                if not choice.skip_bad_evidence:
                    raise LayoutError(
                        f"{path}: {record.question_id}: answer_session_ids: {missing[0]!r} "
                        "is not a session of the haystack (--skip-bad-evidence leaves such "
                        "questions out)"
                    )
                reason = "with an answer session that is not in the haystack"
                left_out[reason] = left_out.get(reason, 0) + 1
                continue
            evidence = sorted(m for s in record.answer_session_ids for m in by_session[s])
            whole_sessions += 1 if evidence else 0
        if not evidence:
            left_out[f"{kind} with no evidence"] = left_out.get(f"{kind} with no evidence", 0) + 1
            continue
        questions.append(
            EvalQuestion(
                id=record.question_id,
                question=_asked_on(record.question_date, record.question),
                answer=answer_text(record.answer),
                evidence=evidence,
                kind=kind,
            )
        )
    name = first.question_id
    if counted := left_out_note(path, name, left_out):
        notes.append(counted)
    if whole_sessions:
        notes.append(
            f"{path}: {name}: {whole_sessions} question{'s' if whole_sessions != 1 else ''} "
            "with no has_answer turn take every turn of their answer sessions as evidence"
        )
    return EvalConversation(
        title=f"LongMemEval {name}"
        + (f" (+{len(group) - 1} sharing its haystack)" * (len(group) > 1)),
        source=f"{path}#{name}",
        character=EvalCharacter(name=ASSISTANT),
        user=EvalUser(name=user_name),
        messages=messages,
        questions=questions,
        notes=notes,
    )


def _check_lengths(path: Path, index: int, record: _Record) -> None:
    sessions = len(record.haystack_sessions)
    for field in ("haystack_session_ids", "haystack_dates"):
        if len(getattr(record, field)) != sessions:
            raise LayoutError(
                f"{path}: [{index}] {record.question_id}: {field}: "
                f"{len(getattr(record, field))} entries for {sessions} haystack_sessions"
            )


def _haystack_key(record: _Record) -> tuple[tuple[str, str, int], ...]:
    return tuple(
        zip(
            record.haystack_session_ids,
            record.haystack_dates,
            (len(s) for s in record.haystack_sessions),
            strict=True,
        )
    )


def _session_order(record: _Record) -> list[int] | None:
    """Session indices by date (a stable sort); None when a date does not parse."""
    moments = [parse_when(d) for d in record.haystack_dates]
    known = [m for m in moments if m is not None]
    if len(known) != len(moments):
        return None
    return sorted(range(len(known)), key=known.__getitem__)


def _kind(record: _Record) -> str:
    if record.question_id.endswith(ABSTENTION_SUFFIX):
        return "abstention"
    return TYPE_KINDS.get(record.question_type, record.question_type)


def _asked_on(written: str, question: str) -> str:
    moment = parse_when(written)
    when = spoken_when(moment, with_time=False) if moment is not None else written.strip()
    return f"Today is {when}. {question}" if when else question
