"""What an evaluation reads: a conversation, who is in it, and optionally its question set.

Four inputs become one `EvalConversation`:
- a dataset file (JSON object with `character`, `user`, `messages`, `questions`, `threads`), as
  shipped under `assets/eval/`: the questions carry the ids of the messages that hold the
  evidence, so no question has to be generated;
- a public benchmark in its published layout, recognised by content: LoCoMo (`locomo`) or
  LongMemEval (`longmemeval`); `published` holds what they share;
- a chat file (SillyTavern `.jsonl`, or a JSON list of `{speaker, text}`), read by the store's
  own parser: no questions, so the examiner writes them per range;
- a stored conversation by id, read through the Store API.

Message ids in a dataset are its own (1-based, in order); the replay maps them to the ids the
temporary store assigns, so evidence ids stay meaningful whatever the store does.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError, model_validator

from kotonia_tui.characters import CharacterCard, SpecVersion
from kotonia_tui.chatfiles import read_chat_file
from kotonia_tui.domain import Role
from kotonia_tui.eval.published import LayoutError, PublishedChoice, recognise
from kotonia_tui.store import Store


class DatasetError(Exception):
    """An input that cannot be evaluated; the message names the file and the problem."""


class EvalCharacter(BaseModel):
    """The in-story character: a card's fields, or just a name for a chat file."""

    name: str
    description: str = ""
    personality: str = ""
    scenario: str = ""
    key: str = ""  # a card key when the character is a card from the library

    def card(self) -> CharacterCard:
        """A card built from these fields (the shipped dataset defines its own character)."""
        return CharacterCard(
            key=self.key or _slug(self.name),
            spec=SpecVersion.V2,
            name=self.name,
            description=self.description,
            personality=self.personality,
            scenario=self.scenario,
        )


class EvalUser(BaseModel):
    name: str = "User"
    description: str = ""


class EvalMessage(BaseModel):
    id: int
    role: Role
    speaker: str
    text: str


class EvalQuestion(BaseModel):
    id: str
    question: str
    answer: str
    evidence: list[int] = Field(default_factory=list)  # dataset message ids
    # Other messages that state the same answer again (a report that sums up, a confession
    # that repeats a claim's truth): the evidence is in front of the reader when one of these
    # is, as when an evidence message is ("any"); not needed for "all", and not the question's
    # range (its evidence decides when it can first be answered).
    restated: list[int] = Field(default_factory=list)
    # fact | user | temporal (when, in which session, in what order) | multihop (two or more
    # evidence messages) | lie | decision | constraint | resolved | generated
    kind: str = "fact"

    @property
    def newest_evidence(self) -> int:
        """The message a question can first be answered after: it decides its range."""
        return max(self.evidence)


class EvalThread(BaseModel):
    """A topic that opens and (maybe) gets resolved: the audit checks memory closes it."""

    id: str
    topic: str
    keywords: list[str]  # any of these in an "Open:" line marks the line as this thread
    opened: int  # message id
    resolved: int | None = None  # message id where it was settled


class EvalLie(BaseModel):
    """A claim a character makes that the narration or their thoughts show to be false."""

    id: str
    claim: str
    truth: str
    keywords: list[str]  # a memory sentence with all of these states the claim ...
    except_keywords: list[str] = Field(default_factory=list)  # ... unless it has one of these
    message: int  # where the claim is made


class EvalConversation(BaseModel):
    title: str = ""
    source: str = ""  # the file or "store:ID" it came from
    character: EvalCharacter
    user: EvalUser = Field(default_factory=EvalUser)
    messages: list[EvalMessage]
    questions: list[EvalQuestion] = Field(default_factory=list)
    threads: list[EvalThread] = Field(default_factory=list)
    lies: list[EvalLie] = Field(default_factory=list)
    # What the loader chose for the user (a sample, a cast) or left out (questions, counted):
    # printed by the command and kept in the report, never silent.
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_ids(self) -> EvalConversation:
        ids = [m.id for m in self.messages]
        if len(set(ids)) != len(ids):
            raise ValueError("message ids must be unique")
        if ids != sorted(ids):
            raise ValueError("messages must be in ascending id order")
        known = set(ids)
        for question in self.questions:
            if not question.evidence:
                raise ValueError(f"question {question.id} has no evidence ids")
            missing = [e for e in question.evidence if e not in known]
            if missing:
                raise ValueError(f"question {question.id}: evidence {missing} are not messages")
            missing = [e for e in question.restated if e not in known]
            if missing:
                raise ValueError(f"question {question.id}: restated {missing} are not messages")
            if both := sorted(set(question.restated) & set(question.evidence)):
                raise ValueError(f"question {question.id}: {both} are evidence and restated")
        return self


def _slug(name: str) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in name.casefold()).strip("-")
    return slug or "character"


def load_file(
    path: Path, persona_name: str = "User", choice: PublishedChoice | None = None
) -> EvalConversation:
    """A dataset file (JSON object), a LoCoMo or LongMemEval file in its published layout, a
    SillyTavern `.jsonl` chat or a JSON list of messages. `choice` (sample, cast) applies to
    the published layouts only."""
    path = Path(path)
    choice = choice or PublishedChoice()
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read: {exc.strerror}") from exc
    raw: object = None
    if text.lstrip()[:1] in ("[", "{"):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError:
            raw = None  # perhaps a SillyTavern file; the chat parser says what is wrong
    layout = recognise(raw)
    if layout is not None:
        return _published(path, raw, layout, choice, persona_name)
    if choice.given:
        raise DatasetError(
            f"{path}: --sample, --character-speaker and --skip-bad-evidence apply to a LoCoMo "
            "or LongMemEval file; this is not one"
        )
    if isinstance(raw, dict) and "messages" in raw:
        raw.setdefault("source", str(path))
        try:
            return EvalConversation.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            # A check of the whole file (ids, evidence) has no field to name: its message does.
            message = str(first["msg"]).removeprefix("Value error, ")
            raise DatasetError(f"{path}: {where + ': ' if where else ''}{message}") from exc
    conv, messages = read_chat_file(path, persona_name)
    return _from_messages(
        [(m.role, m.speaker, m.text) for m in messages],
        character=conv.character_name,
        user=conv.persona_name,
        title=conv.title,
        source=str(path),
    )


def _published(
    path: Path, raw: object, layout: str, choice: PublishedChoice, persona_name: str
) -> EvalConversation:
    # Imported here: these modules build on the models above.
    from kotonia_tui.eval.locomo import read_locomo
    from kotonia_tui.eval.longmemeval import read_longmemeval

    try:
        if layout == "locomo":
            return read_locomo(path, raw, choice)
        return read_longmemeval(path, raw, choice, persona_name)
    except LayoutError as exc:
        raise DatasetError(str(exc)) from exc


def load_stored(store: Store, conv_id: int) -> EvalConversation:
    """A conversation already in the app's database (read only, through the Store API)."""
    conv = store.get_conversation(conv_id)
    rows = [(m.role, m.speaker, m.text) for m in store.iter_messages(conv_id)]
    evaluated = _from_messages(
        rows,
        character=conv.character_name,
        user=conv.persona_name,
        title=conv.title or f"conversation {conv_id}",
        source=f"store:{conv_id}",
    )
    evaluated.character.key = conv.character_key
    evaluated.user.description = conv.persona_description
    return evaluated


def _from_messages(
    rows: list[tuple[Role, str, str]], *, character: str, user: str, title: str, source: str
) -> EvalConversation:
    if not rows:
        raise DatasetError(f"{source}: the conversation has no messages")
    messages = [
        EvalMessage(id=index, role=role, speaker=speaker, text=text)
        for index, (role, speaker, text) in enumerate(rows, start=1)
    ]
    return EvalConversation(
        title=title,
        source=source,
        character=EvalCharacter(name=character),
        user=EvalUser(name=user),
        messages=messages,
    )
