"""The evaluation run: replay, questions, arms, answers, grades, audit; repeated `runs` times.

One run:
1. replay the conversation through the real fold policy (`replay.py`): fold points + memory;
2. the question set: the dataset's (each question goes to the range holding its newest
   evidence message), or, without one, the examiner's, written once per range on the first
   run and kept for the others so every run and arm answers the same questions;
3. build each arm's prompt (`arms.py`), find where each question's evidence stands in the
   prompt the reader gets (`evidence.py`), and let the model answer every question from it;
4. grade: the judge's yes/no is the recall; exact match and token F1 are reported beside it
   for short reference answers;
5. audit the chronicler's chapters and synopses (`audit.py`).

Evidence only (`EvalOptions.evidence_only`): steps 3-4 stop before the reader: where the
evidence stands does not depend on the answers, so recall designs and budgets are measured in
seconds. The replay folds only when an arm needs its memory (generational, rolling).

Runs differ only where the model samples: the chronicler writes at the profile's temperature
(as in production), while the examiner, the reader and the judge are greedy; with a seed set,
run k draws with seed + k - 1 (one seed for all would make every run the same). The spread over
runs is therefore the spread of the memory itself (seed 002 saw 4,785 to 7,016 characters on
one conversation).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from kotonia_tui import __version__
from kotonia_tui.characters import CharacterCard
from kotonia_tui.config import Settings
from kotonia_tui.domain import utcnow
from kotonia_tui.engine import Engine, GenerationRequest, llama_cpp_version
from kotonia_tui.eval import arms as arm_builders
from kotonia_tui.eval import block_variants as variants
from kotonia_tui.eval.arguments import ARMS, RECALL
from kotonia_tui.eval.arms import ArmPrompt, EngineFactory
from kotonia_tui.eval.audit import audit, ledger_audit, memory_pieces
from kotonia_tui.eval.dataset import EvalConversation, EvalQuestion
from kotonia_tui.eval.evidence import (
    AnswerWords,
    Located,
    Place,
    answer_words,
    locate,
    memory_refs,
)
from kotonia_tui.eval.examiner import (
    clean_answer,
    examiner_request,
    judge_request,
    parse_questions,
    reader_request,
)
from kotonia_tui.eval.grading import LexicalGrade, lexical_grade, parse_verdict, says_unknown
from kotonia_tui.eval.meter import MeteredEngine
from kotonia_tui.eval.paired import PAIRS, paired_counts
from kotonia_tui.eval.replay import Range, Replay, replay
from kotonia_tui.eval.replay_cache import ReplayCache
from kotonia_tui.eval.results import (
    ArmResult,
    ArmStatus,
    ArmSummary,
    BuildCost,
    EvalInput,
    EvalReport,
    EvidenceFound,
    EvidenceShare,
    EvidenceSpread,
    FoldSummary,
    GradedAnswer,
    RunResult,
    Spread,
    mean,
)
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.memory.chronicler import CHRONICLER
from kotonia_tui.memory.policy import WindowMessage, split_source

Progress = Callable[[str], None]

# How this evaluation differs from a live session, written into every report.
METHOD = [
    "replay: each user message is planned by Prompter.prepare as in ChatService.send; the "
    "conversation's own replies are stored, none is generated",
    "folds: fold_delay_s 0 and the replay waits for the worker after every user turn, so a "
    "chapter lands before the next turn; a failed fold is retried after the worker's backoff "
    "(30 s, 2 min, 10 min, ...) on a virtual clock of 30 s per user turn, up to its attempt "
    "limit",
    "ranges: each queued chapter job ends a range; the messages after the last one are the "
    "newest range (the verbatim tail)",
    "questions: dataset questions go to the range of their newest evidence message, at most "
    "questions_per_range each, in dataset order",
    "rolling: one summary rewritten at the same fold points with the chronicler's rules, the "
    "same retry budget, and the generational arm's final verbatim window",
    "truncation: the newest messages within the generational prompt's memory + verbatim tokens",
    "full: the whole conversation; a wider load of the same model when it does not fit",
    "grading: correct when the answer states a short reference (exact match after "
    "normalisation) or the judge (few-shot) says yes, but a yes for a short reference with no "
    "content word in common (no token when it has none) is overruled; an empty or 'unknown' "
    "answer is wrong without a call; "
    "judge_only_recall and token F1 (character-level for CJK) are reported beside it",
    "sampling: the chronicler at the profile's temperature; examiner, reader and judge greedy",
    "evidence: each evidence message is found in the reader's prompt verbatim in the window, "
    "in the excerpts recalled for the question (a part of it counts only when it holds the "
    "reference's words the whole message holds, else recalled_part: not present), cited by a "
    "memory item ('(#12 #14)': a "
    "structured chapter's event or claim, a ledger entry), quoted under its label ('#12 "
    "Mara: ...': a quoted chapter or synopsis; by the same rule, else quoted_part), or absent; "
    "a prose summary names no message. A question's restated messages (its answer said "
    "again) are found the same way and listed after its evidence ('restated'): one present "
    "counts for evidence any, not for all, the places or the question's range. "
    "answer_in_prompt: the reference's content words are all somewhere in the prompt",
    "positions: reader_prompt_tokens is the reader's whole prompt (the arm's, the recalled "
    "excerpts, the question); evaluated_per_question what of it lies past the arm's own "
    "prompt, which a warm KV cache evaluates for each question",
]
EVIDENCE_ONLY_METHOD = [
    "evidence only: the reader and the judge were not asked; recall figures are empty",
    "full (evidence only): measured, never loaded with a wider window",
]
NO_FOLDS_METHOD = [
    "no folds (evidence only, no arm needs memory): the worker ran no job, no chapter landed "
    "and the policy cut the oldest messages at the ceiling down to the settle level; ranges "
    "end at these forced cuts; truncation keeps the window the policy kept",
]
# The arms whose prompts carry the memory the replay folds.
FOLDED_ARMS = frozenset({"generational", "rolling"})


@dataclass(frozen=True)
class EvalOptions:
    questions_per_range: int = 8
    runs: int = 1
    arms: tuple[str, ...] = ARMS
    answer_max_tokens: int = 48
    examiner_max_tokens: int = 768
    full_max_ctx: int = 32768  # the full arm may open the model with a window up to this
    evidence_only: bool = False  # where the evidence stands; the reader and judge not asked
    # Other memory blocks rendered beside each generational arm from the same replay
    # (block_variants.py): what the block should hold, compared at the same fold phase.
    block_variants: tuple[str, ...] = ()
    # Keep each replay here and reuse it when nothing it depends on changed (replay_cache.py).
    replay_cache: Path | None = None

    def __post_init__(self) -> None:
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown:
            raise ValueError(f"unknown arms {unknown}; known: {', '.join(ARMS)}")
        if bad := variants.unknown(self.block_variants):
            raise ValueError(f"unknown block variants {bad}; known: {', '.join(variants.VARIANTS)}")
        if self.block_variants and not any(
            a.removesuffix(RECALL) == "generational" for a in self.arms
        ):
            raise ValueError("block variants are rendered beside a generational arm: add one")
        if self.runs < 1 or self.questions_per_range < 1:
            raise ValueError("runs and questions per range must be at least 1")

    @property
    def arm_names(self) -> tuple[str, ...]:
        """Every arm a run reports: the arms asked for, then each block variant of each
        generational one."""
        bases = [a for a in self.arms if a.removesuffix(RECALL) == "generational"]
        return self.arms + tuple(
            variants.variant_arm_name(base, v) for v in self.block_variants for base in bases
        )

    @property
    def variant_pairs(self) -> list[tuple[str, str]]:
        """Each block variant against its generational arm and the truncation arm beside it."""
        pairs = []
        for base in self.arms:
            if base.removesuffix(RECALL) != "generational":
                continue
            truncation = base.replace("generational", "truncation")
            for v in self.block_variants:
                name = variants.variant_arm_name(base, v)
                pairs += [(name, base), (name, truncation)]
        return pairs

    @property
    def recalls(self) -> bool:
        """Whether an arm recalls from the archive (only then is semantic recall opened)."""
        return any(arm.endswith(RECALL) for arm in self.arms)

    @property
    def folds(self) -> bool:
        """Whether the replay runs the folds: always when the reader answers (truncation's
        budget is then the generational prompt's), and for an arm carrying the memory."""
        return not self.evidence_only or any(
            arm.removesuffix(RECALL) in FOLDED_ARMS for arm in self.arms
        )


def _semantic_unused(options: EvalOptions) -> str:
    return "not used (no recall arm)" if not options.recalls else "not used (recall is off)"


@dataclass
class Graded:
    question: EvalQuestion
    range_index: int
    answer: str = ""
    verdict: bool | None = None  # the judge; None: not asked (unknown answer) or unclear
    correct: bool | None = None  # None: not asked (evidence only)
    exact: bool | None = None
    f1: float | None = None
    judge_text: str = ""
    recalled: list[int] = field(default_factory=list)  # input message ids (recall arms)
    ranked: list[int] = field(default_factory=list)  # what recall's ranking found, best first
    notes: str = ""  # the recalled excerpts as the prompt carries them
    # The recalled messages quoted in part: (the part, the whole message), by input id.
    parts: dict[int, tuple[str, str]] = field(default_factory=dict)
    located: list[Located] = field(default_factory=list)
    restated: list[Located] = field(default_factory=list)  # where the restatements stand
    words: AnswerWords = field(default_factory=lambda: AnswerWords((), ()))
    prompt_tokens: int = 0
    new_positions: int = 0
    recalled_tokens: int = 0
    evaluated: int | None = None

    @property
    def evidence_any(self) -> bool:
        return any(found.present for found in (*self.located, *self.restated))

    @property
    def evidence_all(self) -> bool:
        return bool(self.located) and all(found.present for found in self.located)

    def record(self) -> GradedAnswer:
        return GradedAnswer(
            id=self.question.id,
            kind=self.question.kind,
            range=self.range_index,
            question=self.question.question,
            reference=self.question.answer,
            answer=self.answer,
            judge=self.verdict,
            judge_output=self.judge_text,
            correct=self.correct,
            exact=self.exact,
            f1=self.f1,
            recalled=self.recalled,
            ranked=self.ranked,
            evidence=list(self.question.evidence),
            restated=list(self.question.restated),
            found=[
                EvidenceFound(
                    found.message, [str(place) for place in found.where], found.carried, again
                )
                for located, again in ((self.located, False), (self.restated, True))
                for found in located
            ],
            answer_words=list(self.words.words),
            answer_words_missing=list(self.words.missing),
            prompt_tokens=self.prompt_tokens,
            new_positions=self.new_positions,
            recalled_tokens=self.recalled_tokens,
            recalled_text=self.notes,
            evaluated=self.evaluated,
        )


@dataclass
class RunState:
    """What carries over between runs: the generated questions and a larger engine."""

    generated: list[EvalQuestion] | None = None
    big_engines: dict[int, MeteredEngine] = field(default_factory=dict)


def _nothing(_: str) -> None:
    pass


async def run_eval(
    conv: EvalConversation,
    settings: Settings,
    engine: Engine,
    options: EvalOptions,
    *,
    open_bigger: EngineFactory | None = None,
    progress: Progress = _nothing,
    card: CharacterCard | None = None,
) -> EvalReport:
    """Run the evaluation; returns the report, without the model pin (the command adds it)."""
    meter = MeteredEngine(engine)
    state = RunState()
    if options.evidence_only:
        open_bigger = None  # nobody reads the full arm: it is measured, never loaded wider

    async def bigger(n_ctx: int) -> Engine:
        assert open_bigger is not None
        if n_ctx not in state.big_engines:
            state.big_engines[n_ctx] = MeteredEngine(await open_bigger(n_ctx))
        return state.big_engines[n_ctx]

    started = time.monotonic()
    runs: list[RunResult] = []
    budgets: Budgets | None = None
    profile = engine.profile
    try:
        for run in range(options.runs):
            # A fixed seed gives every sampled call the same draw for the same prompt, so K
            # runs at one seed are K copies with no spread (seen: three identical runs). Run k
            # draws with seed + k - 1: each run reproducible, the runs different.
            seed = None if profile.seed is None else profile.seed + run
            engine.profile = profile.model_copy(update={"seed": seed})
            progress(f"run {run + 1}/{options.runs}: replaying {len(conv.messages)} messages")
            result, budgets = await _one_run(
                run,
                conv,
                settings,
                meter,
                options,
                state,
                bigger if open_bigger else None,
                progress,
                card,
            )
            runs.append(replace(result, seed=seed))
    finally:
        engine.profile = profile
        for big in state.big_engines.values():
            big.close()
    return EvalReport(
        kotonia_version=__version__,
        llama_cpp_python=llama_cpp_version(),
        created_at=utcnow().isoformat(timespec="seconds"),
        input=EvalInput(
            title=conv.title,
            source=conv.source,
            character=conv.character.name,
            user=conv.user.name,
            messages=len(conv.messages),
            questions="dataset" if conv.questions else "generated by the examiner",
            dataset_questions=len(conv.questions),
            notes=list(conv.notes),
        ),
        options={
            **asdict(options),
            "folds": options.folds,
            "replay_cache": None if options.replay_cache is None else str(options.replay_cache),
        },
        method=[
            *METHOD,
            *(EVIDENCE_ONLY_METHOD if options.evidence_only else []),
            *(NO_FOLDS_METHOD if not options.folds else []),
        ],
        settings=settings.model_dump(mode="json"),
        profile=settings.active_profile().model_dump(mode="json"),
        budgets=budgets,
        runs=runs,
        summary=summarize(runs, options.arm_names),
        seconds=round(time.monotonic() - started, 2),
        paired=paired_counts(runs, options.arm_names, [*PAIRS, *options.variant_pairs]),
    )


def _recall_budget(arm: ArmPrompt, replayed: Replay) -> int:
    """What a chat turn would recall beside the arm's history at the conversation's end
    (chat/prompting.py `Prompter.recall`): the recall share, and where recall takes the room
    (`Prompter.recall_takes_room`) the room that history leaves under the trigger. The
    truncation arm's history is as long as the generational arm's, so both recall the same
    amount."""
    prompter = replayed.service.prompter
    budgets = prompter.budgets
    fitted = replayed.final.plan.budgets or budgets
    if not prompter.recall_takes_room():
        return budgets.recall
    return fitted.recall_with_room(budgets.recall, arm.memory_tokens + arm.verbatim_tokens)


async def _one_run(
    run: int,
    conv: EvalConversation,
    settings: Settings,
    meter: MeteredEngine,
    options: EvalOptions,
    state: RunState,
    bigger: EngineFactory | None,
    progress: Progress,
    card: CharacterCard | None,
) -> tuple[RunResult, Budgets]:
    """One run, and the budgets it folded with (the same in every run)."""
    run_started = time.monotonic()
    mark = meter.mark()
    # Semantic recall only where an arm recalls: embedding the archive for nothing would cost
    # minutes, and a missing model would stop a run that does not need it.
    semantic = options.recalls and settings.recall_budget_ratio > 0
    cache = None
    if options.replay_cache is not None:
        cache = ReplayCache(options.replay_cache, warn=progress)
        if (why := cache.usable(meter)) is not None:
            progress(f"run {run + 1}: the replay is not kept: {why}")
            cache = None
    key = cache.key(conv, card, settings, meter, folds=options.folds) if cache else ""
    kept = cache.load(key) if cache else None
    # The kept replay's folder when this run opens one instead of folding.
    reused = cache.root / key if cache is not None and kept is not None else None
    replayed = await replay(
        conv,
        settings,
        meter,
        card=card,
        folds=options.folds,
        semantic=semantic,
        stored=kept[0] if kept is not None else None,
    )
    try:
        if kept is not None:
            # The calls the replay made when it was fed: the fold figures and the audit read
            # them.
            meter.log.extend(kept[1])
            progress(f"run {run + 1}: the replay kept in {reused} (nothing folded now)")
        elif cache is not None and (folder := cache.save(key, replayed, meter.since(mark))):
            progress(f"run {run + 1}: the replay kept in {folder}")
        fold_calls = meter.since(mark)
        fold_stats = meter.stats(mark)
        folded = sum(1 for r in replayed.ranges if r.folded)
        if replayed.folds:
            progress(
                f"run {run + 1}: {folded} fold points, {len(replayed.all_chapters())} chapters, "
                f"{len(replayed.synopses())} synopsis versions "
                f"({fold_stats.seconds:.0f} s of model)"
            )
        else:
            progress(f"run {run + 1}: no folds, {folded} forced cuts")
        questions = await _questions(conv, replayed, meter, options, state, progress)
        assigned = assign(questions, replayed.ranges, options.questions_per_range)
        progress(f"run {run + 1}: {len(assigned)} questions over {len(replayed.ranges)} ranges")

        prompts: list[ArmPrompt] = []
        built: dict[str, ArmPrompt] = {}
        for name in options.arms:
            arm_mark = meter.mark()
            if name.endswith(RECALL):
                base = name.removesuffix(RECALL)
                if base not in built:
                    built[base] = _base_arm(base, replayed, meter)
                arm = arm_builders.with_recall(built[base], _recall_budget(built[base], replayed))
            elif name == "generational":
                arm = arm_builders.generational(replayed, meter)
                arm.build_calls, arm.build_seconds = fold_stats.calls, fold_stats.seconds
            elif name == "rolling":
                progress(f"run {run + 1}: rolling rewrites at the same fold points")
                arm = await arm_builders.rolling(
                    replayed,
                    meter,
                    max_output=replayed.service.worker.max_output,
                    progress=progress,
                )
                arm.build_seconds = meter.stats(arm_mark).seconds
            elif name == "truncation":
                arm = _base_arm(name, replayed, meter)
            else:
                arm = await arm_builders.full(
                    replayed,
                    meter,
                    bigger=bigger,
                    max_ctx=options.full_max_ctx,
                    answered=not options.evidence_only,
                )
            built.setdefault(name, arm)
            prompts.append(arm)
        prompts.extend(_variant_arms(options, prompts, replayed, meter))

        results: dict[str, ArmResult] = {}
        for arm in prompts:
            results[arm.name] = await _answer_arm(arm, assigned, replayed, meter, options, progress)

        ledger = replayed.store.ledger(replayed.conv_id, include_ended=True)
        pieces = memory_pieces(
            replayed.all_chapters(),
            replayed.synopses(),
            replayed.all_messages(),
            replayed.to_source,
            ledger,
        )
        audited = audit(
            pieces,
            conv=conv,
            chronicler_calls=[c for c in fold_calls if c.reply_name == CHRONICLER],
            to_source=replayed.to_source,
        )
        audited = replace(
            audited,
            ledger=ledger_audit(
                ledger,
                replayed.store.chapters(
                    replayed.conv_id, include_in_synopsis=True, include_superseded=True
                ),
                replayed.store.fold_jobs(replayed.conv_id),
            ),
        )
        result = RunResult(
            run=run + 1,
            ranges=[r.record() for r in replayed.ranges],
            folds=FoldSummary(
                fold_points=folded,
                chapters=len(replayed.all_chapters()),
                synopsis_versions=len(replayed.synopses()),
                applied=replayed.applied_folds,
                forced_cuts=replayed.forced_cuts,
                events=replayed.events,
            ),
            arms=results,
            audit=audited,
            semantic=replayed.service.semantic.status if semantic else _semantic_unused(options),
            seconds=round(time.monotonic() - run_started, 2),
            replay_reused=None if reused is None else str(reused),
        )
        return result, replayed.service.prompter.budgets
    finally:
        await replayed.close()


async def _questions(
    conv: EvalConversation,
    replayed: Replay,
    meter: MeteredEngine,
    options: EvalOptions,
    state: RunState,
    progress: Progress,
) -> list[EvalQuestion]:
    if conv.questions:
        return list(conv.questions)
    if state.generated is not None:
        return state.generated
    progress("the examiner writes questions per range")
    prompter = replayed.service.prompter
    char, user = replayed.setup.display_name, replayed.persona.name
    generated: list[EvalQuestion] = []
    for span in replayed.ranges:
        source = replayed.messages(span.first_id, span.last_id)
        pieces = split_source(
            [WindowMessage(m.id, prompter.message_tokens(m)) for m in source],
            prompter.budgets.chapter_source,
        )
        per_piece = -(-options.questions_per_range // len(pieces))
        found = []
        for first, last in pieces:
            part = [m for m in source if first <= m.id <= last]
            result = await meter.generate(
                examiner_request(
                    part, char=char, user=user, n=per_piece, max_tokens=options.examiner_max_tokens
                )
            )
            found.extend(parse_questions(result.text, per_piece))
        evidence = list(range(span.first_source, span.last_source + 1))
        for number, pair in enumerate(found[: options.questions_per_range], start=1):
            generated.append(
                EvalQuestion(
                    id=f"r{span.index}q{number}",
                    question=pair.question,
                    answer=pair.answer,
                    evidence=evidence,
                    kind="generated",
                )
            )
    state.generated = generated
    return generated


def assign(
    questions: Sequence[EvalQuestion], ranges: Sequence[Range], per_range: int
) -> list[tuple[EvalQuestion, int]]:
    """Each question to the range holding its newest evidence; at most `per_range` each.

    The newest evidence decides: a question cannot be answered before its last piece of
    evidence was said. Within a range, questions are kept in dataset order.
    """
    counts: dict[int, int] = {}
    assigned = []
    for question in questions:
        newest = question.newest_evidence
        span = next((r for r in ranges if r.first_source <= newest <= r.last_source), None)
        if span is None:
            continue
        if counts.get(span.index, 0) >= per_range:
            continue
        counts[span.index] = counts.get(span.index, 0) + 1
        assigned.append((question, span.index))
    return assigned


def _base_arm(name: str, replayed: Replay, meter: MeteredEngine) -> ArmPrompt:
    """The generational or the truncation arm (the recall arms are built on them)."""
    if name == "generational":
        return arm_builders.generational(replayed, meter)
    final = replayed.final.plan
    arm = arm_builders.truncation(replayed, meter, final.memory_tokens + final.verbatim_tokens)
    if not replayed.folds:
        arm.note = (
            f"the newest messages within {final.verbatim_tokens} history tokens (no fold ran: "
            "the window the policy kept with no memory, cut at the ceiling)"
        )
    return arm


def _variant_arms(
    options: EvalOptions, prompts: Sequence[ArmPrompt], replayed: Replay, meter: MeteredEngine
) -> list[ArmPrompt]:
    """Each block variant beside each generational arm built (with or without recall), at
    that arm's history tokens and recall budget."""
    out: list[ArmPrompt] = []
    bases = [p for p in prompts if p.name.removesuffix(RECALL) == "generational"]
    for variant in options.block_variants:
        for base in bases:
            history = base.memory_tokens + base.verbatim_tokens
            out.append(
                arm_builders.block_variant(
                    replayed,
                    meter,
                    variants.render_variant(replayed, meter, variant, history),
                    name=variants.variant_arm_name(base.name, variant),
                    recall_budget=base.recall_budget,
                )
            )
    return out


async def _answer_arm(
    arm: ArmPrompt,
    assigned: Sequence[tuple[EvalQuestion, int]],
    replayed: Replay,
    meter: MeteredEngine,
    options: EvalOptions,
    progress: Progress,
) -> ArmResult:
    base = ArmResult(
        status=ArmStatus.SKIPPED if arm.skipped else ArmStatus.OK,
        note=arm.note,
        memory_tokens=arm.memory_tokens,
        verbatim_tokens=arm.verbatim_tokens,
        verbatim_messages=arm.verbatim_messages,
        prompt_tokens=arm.prompt_tokens,
        n_ctx=arm.n_ctx,
        memory_text=arm.shown_memory,
        build=BuildCost(calls=arm.build_calls, seconds=round(arm.build_seconds, 3)),
        failures=arm.failures,
    )
    if arm.skipped or arm.engine is None or arm.messages is None:
        return base
    graded = [Graded(question, index) for question, index in assigned]
    requests = await _prompts(arm, graded, replayed, options)
    figures = _with_evidence(base, graded, len(replayed.ranges))
    if options.evidence_only:
        return replace(figures, questions_asked=len(graded), questions=[g.record() for g in graded])
    progress(f"{arm.name}: answering {len(assigned)} questions")
    reader = arm.engine
    reader_mark = reader.mark() if isinstance(reader, MeteredEngine) else 0
    # All answers first, then all verdicts: the arm's prompt prefix stays in the chat slot.
    for item, request in zip(graded, requests, strict=True):
        result = await reader.generate(request)
        item.answer = clean_answer(result.text)
        item.evaluated = result.metrics.evaluated
    reader_stats = reader.stats(reader_mark) if isinstance(reader, MeteredEngine) else None
    judge_mark = meter.mark()
    for item in graded:
        lexical = lexical_grade(item.answer, item.question.answer)
        item.exact, item.f1 = lexical.exact, lexical.f1
        if says_unknown(item.answer):
            item.verdict, item.correct = None, False
            continue
        result = await meter.generate(
            judge_request(item.question.question, item.question.answer, item.answer)
        )
        item.judge_text = result.text.strip()
        item.verdict = parse_verdict(result.text)
        item.correct = combine(item.verdict, lexical)
    judge_stats = meter.stats(judge_mark)
    curve = recall_curve(graded, len(replayed.ranges))
    f1s = [g.f1 for g in graded if g.f1 is not None]
    exact = [g.exact for g in graded if g.exact is not None]
    return replace(
        figures,
        recall_by_range=curve,
        recall_by_kind={
            kind: mean([g.correct is True for g in graded if g.question.kind == kind])
            for kind in sorted({g.question.kind for g in graded})
        },
        mean_recall=mean([g.correct is True for g in graded]),
        judge_only_recall=mean([g.verdict is True for g in graded]),
        mean_f1=mean(f1s),
        exact_match=mean(exact),
        questions_asked=len(graded),
        answer_calls=reader_stats,
        judge_calls=judge_stats,
        questions=[g.record() for g in graded],
    )


async def _prompts(
    arm: ArmPrompt, graded: Sequence[Graded], replayed: Replay, options: EvalOptions
) -> list[GenerationRequest]:
    """Each question's reader prompt, with what it recalled (recall arms), where its evidence
    stands in it, and what it costs; the prompts in question order."""
    assert arm.messages is not None and arm.engine is not None
    to_source = replayed.to_source
    window = {to_source.get(i, i) for i in arm.window_ids}
    # The memory as the reader read it numbers messages in the conversation, as the chat does
    # (the stored text cites store ids): from there to the input's own ids.
    refs = memory_refs(arm.shown_memory).mapped(replayed.source_of_numbers())
    # The evidence messages as said, to read what the memory quotes of them against.
    wholes = {
        m: replayed.store.get_message(replayed.to_stored[m]).text
        for m in {m for item in graded for m in (*item.question.evidence, *item.question.restated)}
        if m in refs.quoted and m in replayed.to_stored
    }
    arm_texts = [message.content for message in arm.messages]
    requests = []
    for item in graded:
        if arm.recall_budget:
            # The question is the turn's new message: the archive older than the arm's window
            # is asked about it, as a chat turn asks (chat/recall.py).
            recall = await replayed.service.prompter.recaller.recall(
                replayed.conv_id,
                item.question.question,
                older_than=arm.recall_from,
                memory_text=arm.memory_text,
                budget=arm.recall_budget,
                names=(replayed.setup.display_name, replayed.persona.name),
            )
            item.notes = recall.render()
            item.recalled = [to_source.get(i, i) for i in recall.message_ids]
            item.recalled_tokens = recall.tokens
            item.ranked = [to_source.get(i, i) for i in recall.ranked]
            # What of each message the excerpts quote: a part counts only by what it holds,
            # with what the excerpt says of it (its speaker, its marker's in-story time).
            item.parts = {
                to_source.get(line.message_id, line.message_id): (
                    f"{excerpt.marker()}\n{line.render()}",
                    line.text,
                )
                for excerpt in recall.excerpts
                for line in excerpt.lines
                if line.shown() != line.text
            }
        request = reader_request(
            arm.messages,
            item.question.question,
            max_tokens=options.answer_max_tokens,
            notes=item.notes,
        )
        requests.append(request)
        item.located, item.restated = (
            locate(
                messages,
                window=window,
                recalled=set(item.recalled),
                refs=refs,
                parts=item.parts,
                reference=item.question.answer,
                wholes=wholes,
            )
            for messages in (item.question.evidence, item.question.restated)
        )
        # The prompt as the reader reads it, without the question (it must not count as
        # holding its own answer's words).
        item.words = answer_words(item.question.answer, [*arm_texts, item.notes])
        item.prompt_tokens = arm.engine.prompt_cells(request)
        item.new_positions = max(0, item.prompt_tokens - arm.prompt_tokens)
    return requests


def _with_evidence(result: ArmResult, graded: Sequence[Graded], ranges: int) -> ArmResult:
    """The arm's result with its evidence figures over its questions."""
    located = [found for g in graded for found in g.located]
    kinds = sorted({g.question.kind for g in graded})
    return replace(
        result,
        evidence_in_prompt=evidence_share(graded),
        evidence_by_kind={
            kind: share
            for kind in kinds
            if (share := evidence_share([g for g in graded if g.question.kind == kind]))
        },
        evidence_by_range=[
            evidence_share([g for g in graded if g.range_index == index]) for index in range(ranges)
        ],
        # Of the evidence messages (counted per question), the share found in each place.
        evidence_places={
            str(place): part
            for place in Place
            if (part := mean([place in f.where for f in located])) is not None
        },
        answer_in_prompt=mean(
            [all_there for g in graded if (all_there := g.words.all_there) is not None]
        ),
        reader_prompt_tokens=mean([g.prompt_tokens for g in graded]),
        evaluated_per_question=mean([g.new_positions for g in graded]),
        recalled_tokens=mean([g.recalled_tokens for g in graded]),
    )


def evidence_share(graded: Sequence[Graded]) -> EvidenceShare | None:
    """Of these questions, the share with any and with all evidence in the prompt."""
    if not graded:
        return None
    return EvidenceShare(
        any=mean([g.evidence_any for g in graded]),
        all=mean([g.evidence_all for g in graded]),
        questions=len(graded),
    )


def combine(verdict: bool | None, lexical: LexicalGrade) -> bool:
    """The grade: the reference stated in the answer, or the judge's yes, except that a yes
    for a short reference with no content word in common is overruled (small judges say yes
    to almost anything; "14" is not "twenty" whatever the judge says, and "Mara is a good
    woman" is not "she is afraid of heights" for sharing "is")."""
    if lexical.exact:
        return True
    if verdict is not True:
        return False
    if lexical.shares_content is not None:
        return lexical.shares_content
    return lexical.f1 is None or lexical.f1 > 0


def recall_curve(graded: Sequence[Graded], ranges: int) -> list[float | None]:
    """Recall per range, oldest first; None where a range has no question."""
    curve: list[float | None] = []
    for index in range(ranges):
        hits = [g.correct is True for g in graded if g.range_index == index]
        curve.append(mean(hits))
    return curve


def summarize(runs: Sequence[RunResult], arms: Sequence[str]) -> dict[str, ArmSummary]:
    """Per arm over runs: min/mean/max of mean recall, F1, memory tokens, calls and time."""
    summary: dict[str, ArmSummary] = {}
    for name in arms:
        rows = [r.arms[name] for r in runs if name in r.arms]
        done = [row for row in rows if row.status is ArmStatus.OK]
        if not done:
            summary[name] = ArmSummary(ArmStatus.SKIPPED, note=rows[0].note if rows else "")
            continue

        def over_runs(values: Sequence[float | None]) -> Spread | None:
            return Spread.of([v for v in values if v is not None])

        summary[name] = ArmSummary(
            status=ArmStatus.OK,
            note=done[0].note,
            runs=len(done),
            mean_recall=over_runs([row.mean_recall for row in done]),
            mean_f1=over_runs([row.mean_f1 for row in done]),
            exact_match=over_runs([row.exact_match for row in done]),
            judge_only_recall=over_runs([row.judge_only_recall for row in done]),
            memory_tokens=over_runs([row.memory_tokens for row in done]),
            prompt_tokens=over_runs([row.prompt_tokens for row in done]),
            calls=over_runs([row.calls for row in done]),
            seconds=over_runs([row.seconds for row in done]),
            recall_by_range=_curve_spread([row.recall_by_range for row in done]),
            recall_by_kind={
                kind: over_runs([row.recall_by_kind.get(kind) for row in done])
                for kind in sorted({kind for row in done for kind in row.recall_by_kind})
            },
            evidence_in_prompt=EvidenceSpread.of([row.evidence_in_prompt for row in done]),
            evidence_by_kind={
                kind: EvidenceSpread.of([row.evidence_by_kind.get(kind) for row in done])
                for kind in sorted({kind for row in done for kind in row.evidence_by_kind})
            },
            evidence_by_range=_evidence_spread([row.evidence_by_range for row in done]),
            evidence_places={
                place: over_runs([row.evidence_places.get(place) for row in done])
                for place in sorted({place for row in done for place in row.evidence_places})
            },
            answer_in_prompt=over_runs([row.answer_in_prompt for row in done]),
            reader_prompt_tokens=over_runs([row.reader_prompt_tokens for row in done]),
            evaluated_per_question=over_runs([row.evaluated_per_question for row in done]),
            questions_asked=over_runs([row.questions_asked for row in done]),
        )
    return summary


def _evidence_spread(
    curves: Sequence[Sequence[EvidenceShare | None]],
) -> list[EvidenceSpread | None]:
    """Per range index, over runs, as `_curve_spread`."""
    length = max((len(c) for c in curves), default=0)
    return [
        EvidenceSpread.of([c[index] for c in curves if index < len(c)]) for index in range(length)
    ]


def _curve_spread(curves: Sequence[Sequence[float | None]]) -> list[Spread | None]:
    """Per range index, over runs (runs can fold at slightly different points)."""
    length = max((len(c) for c in curves), default=0)
    return [
        Spread.of([v for c in curves if index < len(c) and (v := c[index]) is not None])
        for index in range(length)
    ]
