"""The evaluation's report as typed records, and the JSON `kotonia eval --json` writes.

Every record is a dataclass whose field names are the JSON keys, so the JSON is
`dataclasses.asdict` of the report (`EvalReport.to_json`). A field named `in_` is written as
`in` (a Python keyword). The terminal table, the plot and the PNG read these records, never
nested dicts by string keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from kotonia_tui.memory.budgets import Budgets


def _json_key(key: str) -> str:
    return key.removesuffix("_")


def _json_fields(items: list[tuple[str, Any]]) -> dict[str, Any]:
    return {_json_key(k): v for k, v in items}


def to_json(record: Any) -> dict[str, Any]:
    """A report record (a dataclass) as JSON-ready dicts, lists and scalars."""
    data: dict[str, Any] = asdict(record, dict_factory=_json_fields)
    return data


def rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def mean(values: Sequence[float | bool]) -> float | None:
    return round(sum(float(v) for v in values) / len(values), 4) if values else None


# ---- one run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RangeRecord:
    """One folded range (or the verbatim tail), in the input's own message ids."""

    index: int
    first_message: int
    last_message: int
    messages: int
    tokens: int
    folded: bool


@dataclass(frozen=True)
class FoldEvent:
    """What the replay saw of the fold queue: a job queued, landed or failed, a notice."""

    state: str  # queued | landed | failed | notice
    kind: str | None = None  # the job's kind (landed, failed)
    detail: str = ""
    seconds: float | None = None  # how long the job ran (landed, failed)
    at_message: int | None = None  # the input message whose turn queued it (queued)
    first: int | None = None  # the queued range, input message ids
    last: int | None = None


@dataclass(frozen=True)
class FoldSummary:
    fold_points: int
    chapters: int
    synopsis_versions: int
    applied: int
    forced_cuts: list[int]  # input message ids cut at the ceiling with no chapter ready
    events: list[FoldEvent]


@dataclass(frozen=True)
class CallStats:
    """Model calls of one phase: how many, how long, how many tokens in and out."""

    calls: int
    seconds: float
    evaluated_tokens: int
    generated_tokens: int


@dataclass(frozen=True)
class BuildCost:
    """What building an arm's memory cost (folds or rewrites)."""

    calls: int
    seconds: float


@dataclass(frozen=True)
class EvidenceFound:
    """One evidence message of a question (input id) and where the reader's prompt holds it:
    window, recalled, cited, quoted, or absent (eval/evidence.py)."""

    message: int
    where: list[str]
    carried: str | None = None  # the part of it recalled, when only a part was quoted
    restated: bool = False  # a message that states the answer again (the question's `restated`)


@dataclass(frozen=True)
class GradedAnswer:
    """One question of one arm: what the reader's prompt held, and (unless evidence only) the
    answer and its grade."""

    id: str
    kind: str
    range: int
    question: str
    reference: str
    answer: str
    judge: bool | None  # the judge's verdict; None: not asked (unknown answer) or unclear
    judge_output: str
    correct: bool | None  # None: the reader was not asked (evidence only)
    exact: bool | None
    f1: float | None
    recalled: list[int] = field(default_factory=list)  # input message ids quoted (recall arms)
    # The messages recall's ranking found, best first (input ids; recall arms): an evidence
    # message ranked but not quoted was left out by the budget, one not ranked was not found.
    ranked: list[int] = field(default_factory=list)
    evidence: list[int] = field(default_factory=list)  # input message ids
    restated: list[int] = field(default_factory=list)  # messages stating the answer again
    found: list[EvidenceFound] = field(default_factory=list)  # the evidence, then restated
    # The reference's content words, and those the prompt does not hold anywhere.
    answer_words: list[str] = field(default_factory=list)
    answer_words_missing: list[str] = field(default_factory=list)
    prompt_tokens: int = 0  # the reader's whole prompt: the arm's, recalled excerpts, question
    new_positions: int = 0  # of them, past the arm's own prompt: what a warm cache evaluates
    recalled_tokens: int = 0  # what the recalled excerpts cost
    recalled_text: str = ""  # the recalled excerpts as the reader read them (recall arms)
    evaluated: int | None = None  # positions the reader's call evaluated (None: not asked)


@dataclass(frozen=True)
class EvidenceShare:
    """Of `questions` questions, the share with at least one evidence message in the prompt
    (`any`) and with every one (`all`)."""

    any: float | None
    all: float | None
    questions: int


class ArmStatus(StrEnum):
    OK = "ok"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class ArmResult:
    """One arm in one run: its prompt's size, and how its answers were graded."""

    status: ArmStatus
    note: str
    memory_tokens: int
    verbatim_tokens: int
    verbatim_messages: int
    prompt_tokens: int
    n_ctx: int
    memory_text: str  # as the reader read it: the messages it cites numbered, as the chat does
    build: BuildCost
    failures: list[str]
    recall_by_range: list[float | None] = field(default_factory=list)
    # Per question kind (fact, lie, decision, constraint, resolved, user): what a memory keeps
    # of the user's own facts and rules is read here, not from the mean.
    recall_by_kind: dict[str, float | None] = field(default_factory=dict)
    mean_recall: float | None = None
    judge_only_recall: float | None = None
    mean_f1: float | None = None
    exact_match: float | None = None
    questions_asked: int = 0
    # Where the evidence stood in the reader's prompts (eval/evidence.py): over the questions,
    # by question kind, by range (None where a range has no question), and the share of
    # evidence messages in each place (a message can be in several).
    evidence_in_prompt: EvidenceShare | None = None
    evidence_by_kind: dict[str, EvidenceShare] = field(default_factory=dict)
    evidence_by_range: list[EvidenceShare | None] = field(default_factory=list)
    evidence_places: dict[str, float] = field(default_factory=dict)
    answer_in_prompt: float | None = None  # share of questions whose reference words are all there
    reader_prompt_tokens: float | None = None  # mean over questions, excerpts and question included
    evaluated_per_question: float | None = None  # mean new positions past the arm's prompt
    recalled_tokens: float | None = None  # mean over questions (recall arms)
    answer_calls: CallStats | None = None  # None: the reader is not metered
    judge_calls: CallStats | None = None
    questions: list[GradedAnswer] = field(default_factory=list)

    @property
    def calls(self) -> int:
        """Every model call the arm cost: building it, answering, judging."""
        return (
            self.build.calls
            + (self.answer_calls.calls if self.answer_calls else 0)
            + (self.judge_calls.calls if self.judge_calls else 0)
        )

    @property
    def seconds(self) -> float:
        return (
            self.build.seconds
            + (self.answer_calls.seconds if self.answer_calls else 0.0)
            + (self.judge_calls.seconds if self.judge_calls else 0.0)
        )


# ---- the audit ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimExample:
    """A memory sentence that states a claim as a fact (see `audit.py` for the three checks)."""

    in_: str  # the memory piece ("chapter #1-#8", "synopsis v2")
    memory: str
    lie: str | None = None  # the dataset's lie it repeats (known-lie check)
    source: str | None = None  # the character's line it matches (lexical check)
    message: int | None = None
    f1: float | None = None


@dataclass(frozen=True)
class ClaimsAsFacts:
    established_fact_phrase: int
    lexical: int
    known_lies_as_fact: int
    examples: list[ClaimExample]


@dataclass(frozen=True)
class Attribution:
    pieces_with_attribution: int
    on_the_surface_in_fact_pairs: int


@dataclass(frozen=True)
class LeftOpen:
    """An "Open:" line naming a thread the dataset resolves inside what the piece covers."""

    in_: str
    thread: str
    open_line: str
    resolved_at_message: int


@dataclass(frozen=True)
class Topics:
    resolved_markers: int
    open_items: int
    resolved_left_open: int
    threads_known: int
    examples: list[LeftOpen]


@dataclass(frozen=True)
class Refusals:
    chronicler_calls: int
    refused: int
    stored: int
    examples: list[str]


@dataclass(frozen=True)
class MemoryText:
    in_: str
    text: str


@dataclass(frozen=True)
class LedgerAudit:
    """What the ledger kept: entries by kind (live, and ended by a later chapter), the names and
    numbers the readback still found missing, and the fold jobs' failed attempts by reason."""

    live: dict[str, int]
    ended: dict[str, int]
    readback_misses: int
    fold_attempts: int
    failed_attempts: dict[str, int]
    # The chronicler's items the chapter checks left out, by reason (memory/structured.py).
    dropped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditResult:
    pieces: int
    claims_as_facts: ClaimsAsFacts
    attribution: Attribution
    topics: Topics
    refusals: Refusals
    limits: list[str]
    chapters: list[MemoryText] = field(default_factory=list)  # every piece audited, as stored
    ledger: LedgerAudit | None = None


@dataclass(frozen=True)
class RunResult:
    run: int
    ranges: list[RangeRecord]
    folds: FoldSummary
    arms: dict[str, ArmResult]
    audit: AuditResult
    seconds: float
    # The seed the run's sampling (the chronicler) drew with; None: a random one per call.
    seed: int | None = None
    # What recall matched by in this run: semantic recall's status line ("on: <model>, ...",
    # "off (semantic_recall = false): ..."), since the default changed (D-46).
    semantic: str = ""
    # The kept replay the run opened instead of folding (`--replay-cache`; its folder): the
    # fold figures are those of the run that made it. None: replayed in this run.
    replay_reused: str | None = None


# ---- over runs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """A figure over runs."""

    min: float
    mean: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        if not values:
            return None
        return cls(
            min=round(min(values), 4),
            mean=round(sum(values) / len(values), 4),
            max=round(max(values), 4),
        )


@dataclass(frozen=True)
class EvidenceSpread:
    """`EvidenceShare` over runs."""

    any: Spread | None
    all: Spread | None

    @classmethod
    def of(cls, shares: Sequence[EvidenceShare | None]) -> EvidenceSpread | None:
        present = [s for s in shares if s is not None]
        if not present:
            return None
        return cls(
            any=Spread.of([s.any for s in present if s.any is not None]),
            all=Spread.of([s.all for s in present if s.all is not None]),
        )


@dataclass(frozen=True)
class ArmSummary:
    """One arm over every run (min, mean, max of each figure)."""

    status: ArmStatus
    note: str = ""
    runs: int = 0
    mean_recall: Spread | None = None
    mean_f1: Spread | None = None
    exact_match: Spread | None = None
    judge_only_recall: Spread | None = None
    memory_tokens: Spread | None = None
    prompt_tokens: Spread | None = None
    calls: Spread | None = None
    seconds: Spread | None = None
    recall_by_range: list[Spread | None] = field(default_factory=list)
    recall_by_kind: dict[str, Spread | None] = field(default_factory=dict)
    evidence_in_prompt: EvidenceSpread | None = None
    evidence_by_kind: dict[str, EvidenceSpread | None] = field(default_factory=dict)
    evidence_by_range: list[EvidenceSpread | None] = field(default_factory=list)
    evidence_places: dict[str, Spread | None] = field(default_factory=dict)
    answer_in_prompt: Spread | None = None
    reader_prompt_tokens: Spread | None = None
    evaluated_per_question: Spread | None = None
    questions_asked: Spread | None = None


@dataclass(frozen=True)
class Split:
    """Of the questions compared, how many went `arm`'s way only, the other's only, and the
    two-sided sign test's p of that split (1.0 when the arms never differ)."""

    here: int
    there: int
    p: float


@dataclass(frozen=True)
class PairedCount:
    """`arm` against `against` over the questions both were asked in every run."""

    arm: str
    against: str
    questions: int
    right: Split | None  # None: the reader was not asked (evidence only)
    evidence: Split


@dataclass(frozen=True)
class EvalInput:
    title: str
    source: str
    character: str
    user: str
    messages: int
    questions: str  # "dataset" or "generated by the examiner"
    dataset_questions: int
    notes: list[str] = field(default_factory=list)  # the loader's choices and left-out counts


@dataclass(frozen=True)
class ModelPin:
    """What was evaluated: the model file by hash, or a server's model id, and its setup."""

    key: str
    n_ctx: int
    prompt_format: str
    backend: str
    sha256: str | None = None  # None: a server's model, whose file is not here
    model_id: str | None = None
    path: str | None = None
    name: str | None = None
    bytes: int | None = None
    mtime_ns: int | None = None
    fold_n_ctx: int | None = None
    n_ctx_train_reported: int | None = None
    threads: int | None = None
    gpu_offload: bool | None = None
    llama_cpp_version: str | None = None


@dataclass
class EvalReport:
    """The whole evaluation. `model`, `command` and `wall_seconds` are set by the command."""

    kotonia_version: str
    llama_cpp_python: str
    created_at: str
    input: EvalInput
    options: dict[str, Any]
    method: list[str]
    settings: dict[str, Any]
    profile: dict[str, Any]
    budgets: Budgets | None
    runs: list[RunResult]
    summary: dict[str, ArmSummary]
    seconds: float
    model: ModelPin | None = None
    command: list[str] = field(default_factory=list)
    wall_seconds: float | None = None
    # Arms against each other question by question, pooled over runs (eval/paired.py).
    paired: list[PairedCount] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @property
    def evidence_only(self) -> bool:
        """The reader was not asked: the figures are where the evidence stood, not recall."""
        return bool(self.options.get("evidence_only"))

    @property
    def curve_label(self) -> str:
        return "evidence in prompt" if self.evidence_only else "recall"

    def spreads(self) -> dict[str, tuple[list[Spread | None], Spread | None]]:
        """Per arm that ran, the figure plotted (recall; evidence only: the share of questions
        with evidence in the prompt): per range over runs, and over every question."""
        figures: dict[str, tuple[list[Spread | None], Spread | None]] = {}
        for name, row in self.summary.items():
            if row.status is not ArmStatus.OK:
                continue
            if self.evidence_only:
                cells = [None if cell is None else cell.any for cell in row.evidence_by_range]
                overall = row.evidence_in_prompt.any if row.evidence_in_prompt else None
                figures[name] = (cells, overall)
            else:
                figures[name] = (row.recall_by_range, row.mean_recall)
        return figures

    def curves(self) -> dict[str, list[float | None]]:
        """The curve to show per arm: the mean over runs, per range index."""
        return {
            name: [None if cell is None else cell.mean for cell in cells]
            for name, (cells, _overall) in self.spreads().items()
        }
