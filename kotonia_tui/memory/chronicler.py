"""The chronicler of the story: prompts that fold messages into chapters, chapters into a synopsis.

The summarizer plays an in-story role (asked plainly to "summarize", models sometimes continue
the story instead). Its input keeps narration, dialogue (speaker -> listener) and inner
thoughts apart, as stored in the segments, because a character's claim is not a fact: a liar's
story about their past must come out of memory as what they *said*, with "on the surface /
in fact" where the narration or their thoughts show otherwise. What the user says about
themselves is taken as fact (over-doubting it lost most of an everyday conversation's memory).

A fold job talks to the chronicler by request and reply: it builds a `ChronicleRequest` (a
chapter of messages, a synopsis of chapters, or the evaluation's rolling summary), the
chronicler turns it into a `ChroniclerPrompt` (messages, lead, stop strings) for the one place
that calls the model (chat/fold/chronicle.py), and reads what the model wrote into a
`ChronicleReply`: the text and structure to store, or why it cannot be stored and whether to
ask again. It is a leaf: prompt in, parsed answer out; it calls nothing above memory/.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from kotonia_tui.config import ModelProfile, PromptFormat
from kotonia_tui.domain import (
    Chapter,
    ChatMessage,
    LedgerKind,
    Message,
    Role,
    SegmentKind,
    StoredLedgerEntry,
)
from kotonia_tui.memory.budgets import LENGTH_TOLERANCE
from kotonia_tui.memory.chapter_schema import (
    ChapterSource,
    chapter_schema,
    schema_text,
)
from kotonia_tui.memory.cut_items import finish_answer, time_cut
from kotonia_tui.memory.ledger import entry_line
from kotonia_tui.memory.policy import EXPECTED_CHAPTER_RATIO
from kotonia_tui.memory.readback import missing, user_specifics
from kotonia_tui.memory.refusal import Prose, is_refusal
from kotonia_tui.memory.segments import parse_segments
from kotonia_tui.memory.structured import (
    MalformedAnswerError,
    StructuredChapter,
    chapter_words,
    parse_answer,
    read_chapter,
    render_chapter,
    with_quotes,
)
from kotonia_tui.terms import is_unspaced_char

CHRONICLER = "Chronicler"


@dataclass(frozen=True)
class Cast:
    """Who a story is between: the character's name and the name the user goes by in it. A
    group (issue 31) names every member in `members`, in the cast's order, and `char` joins
    them ("Rowan, Mira, Lin"): the chronicler is told the story is between all of them, and
    each line of its source is signed by the member who spoke it (`render_source`)."""

    char: str
    user: str
    members: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The characters' names, each whole (a group's members, or the one character)."""
        return self.members or (self.char,)

    @classmethod
    def group(cls, members: Sequence[str], user: str) -> Cast:
        return cls(char=", ".join(members), user=user, members=tuple(members))

    def in_story(self, messages: Sequence[Message]) -> Cast:
        """The cast as these messages name it: the user is called what the user's own lines
        are signed with (an imported chat, a persona renamed), the persona's name otherwise."""
        names = Counter(
            m.speaker.strip() for m in messages if m.role is Role.USER and m.speaker.strip()
        )
        if not names:
            return self
        name, _count = names.most_common(1)[0]
        return replace(self, user=name)


# Where a chronicler's text ends even if the model does not stop by itself: a base model
# (the transcript format) goes on to copy more source lines ("[#12] ...") or a new speaker.
CHRONICLER_STOPS = ("\n[#", "\nStory:", "\nChronicler:")
# In a transcript a base model's chapter is its one paragraph: after a blank line it goes on
# to invent the next turn of the document ("Narrator: ..."), which is not part of the chapter.
TRANSCRIPT_CHRONICLER_STOPS = (*CHRONICLER_STOPS, "\n\n")
# How a base model's chapter begins when its profile names no lead: given a transcript of
# source lines it goes on copying them; the start of a sentence of prose puts it into prose.
TRANSCRIPT_LEAD = "In this part of the story,"
# A synopsis tells the whole story so far, not one part of it: it begins with its own words.
SYNOPSIS_LEAD = "So far in the story,"


def chronicler_stops(profile: ModelProfile) -> tuple[str, ...]:
    """Where the chronicler's text ends, for the profile's prompt format."""
    if profile.prompt_format is PromptFormat.TRANSCRIPT:
        return TRANSCRIPT_CHRONICLER_STOPS
    return CHRONICLER_STOPS


def chronicler_lead(profile: ModelProfile, kind: ChronicleKind | None = None) -> str:
    """The words the chronicler's text starts with ("" for none).

    A chapter: the profile's own lead, or TRANSCRIPT_LEAD in the transcript format (a chat
    template makes the model answer anyway). A synopsis: the profile's `synopsis_lead`, or
    SYNOPSIS_LEAD wherever chapters have a lead (a synopsis that opened with "In this part of
    the story," would describe one part, not the story so far).
    """
    if profile.chronicler_lead is not None:
        chapter = profile.chronicler_lead.strip()
    else:
        chapter = TRANSCRIPT_LEAD if profile.prompt_format is PromptFormat.TRANSCRIPT else ""
    if kind is not ChronicleKind.SYNOPSIS:
        return chapter
    if profile.synopsis_lead is not None:
        return profile.synopsis_lead.strip()
    return SYNOPSIS_LEAD if chapter else ""


def with_lead(lead: str, written: str) -> str:
    """The summary as stored: the lead (the prompt's last words) and what followed.

    Empty when the model wrote nothing after the lead: a lead alone is not a summary.
    """
    return f"{lead}{written}".strip() if written.strip() else ""


CHAPTER_INSTRUCTIONS = """\
You are the chronicler of the story between {char} and {user}. You keep the record that lets \
the story go on for years without losing what happened. Write the chapter for the messages \
below, in the language of the story.

Rules:
- What in-story characters say is a claim, not a fact. Write it as who said what to whom \
("{char} told {user} that ..."). Do not write it as fact unless the narration or the \
speaker's own thoughts confirm it.
- Where the narration or a character's thoughts show that a claim is a lie or an act, write \
both: "On the surface: ... In fact: ...".
- What {user} says about themselves (plans, likes, friends, their past) is a fact: record it.
- Keep decisions with their reasons, promises, the rules that were set, and \
how feelings and the relationship changed.
- When a topic or question is settled, close it with "Resolved: ..."; list what is still \
open at the end as "Open: ...".
- Name people instead of using pronouns. Keep numbers, names and places exact.
- Do not invent. If something needed is unclear, write [missing].
- If the messages show when this happens in the story, begin with "When: ..." on its own line.
- Write only the chapter: no preface, no comments."""


STRUCTURED_CHAPTER_INSTRUCTIONS = """\
You are the chronicler of the story between {char} and {user}. You keep the record that lets \
the story go on for years without losing what happened. Record the messages below as a JSON \
object, in the language of the story. Each item is one short sentence that names people \
(no pronouns) and keeps names, numbers and dates exact, then "ids": the numbers of the \
messages it rests on (the [#N] before each line).

Fields:
- "events": what happened.
- "user_facts": what {user} says about themselves (name, family, health, likes, plans, dates, \
prices). "replaces": the label of a known fact this one changes, or "".
- "rules": rules and limits {user} set. "replaces" as above.
- "claims": what a character said that may not be true: "said" is the claim; "in_fact" what \
the narration or the speaker's own thoughts show instead ("" if nothing does).
- "decisions": what was decided, "because" why, "rejected" the alternative turned down.
- "promises": who promised what to whom.
- "open_threads": questions, plans and problems still open at the end of these messages.
- "resolved": open threads (by their label) these messages settle, and "how".
- "time": when this happens in the story, if the messages say ("" if not).
A list with nothing to record stays empty: []. Write each thing once. Do not copy the lines; \
say what they mean. Do not invent."""


def structured_instructions(cast: Cast) -> str:
    """A structured chapter's fixed instructions."""
    return STRUCTURED_CHAPTER_INSTRUCTIONS.format(char=cast.char, user=cast.user)


# The evaluation's baseline (the seed's first design): one summary rewritten at every fold.
ROLLING_INSTRUCTIONS = (
    "You are the chronicler of the story between {char} and {user}. You keep the one record "
    "that lets the story go on without losing what happened. Rewrite the summary of the story "
    "so far: fold the earlier summary and the new messages below into one new summary, in the "
    "language of the story.\n\nRules:" + CHAPTER_INSTRUCTIONS.split("Rules:", 1)[1]
)

SYNOPSIS_INSTRUCTIONS = """\
You are the chronicler of the story between {char} and {user}. Fold the earlier synopsis and \
the chapters below into one new synopsis of everything so far, in the language of the story.

Rules:
- Keep every fact the story rests on: who people are to each other, what happened, decisions \
with reasons, promises, rules {user} set.
- Keep claims as claims (who said what to whom) and keep "On the surface / In fact" pairs.
- Drop topics marked "Resolved:" to one line each; keep them marked resolved.
- End with the open threads, each on its own line starting with "Open: ". They must survive.
- Name people instead of using pronouns. Keep numbers and names exact. Do not invent; write \
[missing] where something is unclear.
- Write about {length}: fold older detail to make room, never drop an open thread.
- Write only the synopsis."""

# A synopsis that came out far from its length is asked for once more, with the draft.
SYNOPSIS_TOO_LONG = (
    "Your draft below is about {draft}, far longer than the {length} the synopsis must hold. "
    "Write it again in about {length}: fold resolved topics into one line each and merge "
    "details, but keep every name, number, fact about {user} and open thread."
)
SYNOPSIS_TOO_SHORT = (
    "Your draft below is about {draft}, far shorter than the {length} the synopsis must hold: "
    "it left out what the story rests on. Write it again in about {length}, putting back the "
    "facts, claims, decisions, promises and open threads of the chapters that the draft lost."
)

# Characters per word in languages that put spaces between words (for "about N words").
CHARS_PER_WORD = 6.0


def length_words(tokens: int, sample: str, sample_tokens: int) -> str:
    """A length in tokens said the way a writer counts in the story's language: "about N
    words", or "about N characters" (字) where words are not spaced (Japanese, Chinese, Thai:
    terms.is_unspaced_char).

    `sample` is text in that language and `sample_tokens` its count in the model's tokens: a
    token is ~4.7 characters of English but ~1.2 of Chinese (seed 002), so the words a number
    of tokens makes is measured, not assumed.
    """
    chars_per_token = len(sample) / sample_tokens if sample and sample_tokens > 0 else 4.0
    chars = max(1, round(tokens * chars_per_token))
    unspaced = sum(1 for char in sample if is_unspaced_char(char))
    if sample and unspaced > len(sample) * 0.3:
        return f"{chars} characters"
    return f"{max(1, round(chars / CHARS_PER_WORD))} words"


class LengthFit(StrEnum):
    OK = "ok"
    SHORT = "short"
    LONG = "long"


def length_fit(tokens: int, target: int) -> LengthFit:
    """Where a length stands against its target (+-LENGTH_TOLERANCE)."""
    if tokens < target * (1 - LENGTH_TOLERANCE):
        return LengthFit.SHORT
    if tokens > target * (1 + LENGTH_TOLERANCE):
        return LengthFit.LONG
    return LengthFit.OK


def render_source(messages: Sequence[Message], *, char: str, user: str) -> str:
    """The messages as the chronicler reads them: one line per segment, kinds kept apart."""
    lines: list[str] = []
    for message in messages:
        if message.role is Role.SYSTEM:
            continue  # an imported note ("[Start a new chat]"), not part of the story
        speaker = message.speaker
        listener = char if message.role is Role.USER else user
        who = f"{speaker} (the user)" if message.role is Role.USER else speaker
        segments = message.segments or parse_segments(
            message.text, speaker=speaker, listener=listener
        )
        for segment in segments:
            if segment.kind is SegmentKind.DIALOGUE:
                to = segment.listener or listener
                lines.append(f"[#{message.id}] {who} -> {to} (says): {segment.text}")
            elif segment.kind is SegmentKind.THOUGHT:
                lines.append(f"[#{message.id}] {who} (thinks, unspoken): {segment.text}")
            else:
                lines.append(f"[#{message.id}] (narration) {segment.text}")
        for _image in message.images:
            lines.append(f"[#{message.id}] {who} shows an image.")
    return "\n".join(lines)


def ledger_prompt(ledger: Sequence[StoredLedgerEntry]) -> str:
    """The part of the ledger a chapter may end: the open threads, the facts and rules."""
    parts = []
    threads = [entry_line(e) for e in ledger if e.kind is LedgerKind.THREAD]
    if threads:
        heading = "Open threads (resolve one by its label if these messages settle it):"
        parts.append("\n".join([heading, *threads]))
    replaceable = set(ChapterSource.of((), ledger).replaceable)
    known = [entry_line(e) for e in ledger if e.label in replaceable]
    if known:
        heading = 'Known facts and rules (name one in "replaces" if these messages change it):'
        parts.append("\n".join([heading, *known]))
    return "\n\n".join(parts)


def structured_chapter_prompt(
    messages: Sequence[Message],
    ledger: Sequence[StoredLedgerEntry],
    misses: Sequence[str],
    *,
    char: str,
    user: str,
    part: tuple[int, int] | None = None,
    hollow: bool = False,
) -> tuple[ChatMessage, ...]:
    """The structured chapter's prompt: the source, the open threads a range may resolve and
    the facts and rules it may replace (by label), on a readback retry what was missed, and
    on a retry after an answer that said nothing (`hollow`), that it said nothing."""
    instructions = structured_instructions(Cast(char, user))
    first, last = messages[0].id, messages[-1].id
    if part is not None:
        # One long message, read in parts: each part is written up as a chapter of its own.
        heading = f"Message #{first}, part {part[0]} of {part[1]}"
    else:
        heading = f"Messages #{first} to #{last}"
    parts = [f"{heading}:\n\n{render_source(messages, char=char, user=user)}"]
    if ledger_text := ledger_prompt(ledger):
        parts.append(ledger_text)
    if misses:
        parts.append(
            f"Your last record left out these names and numbers from {user}'s lines: "
            + ", ".join(misses)
            + ". Keep each of them, exactly, in the item it belongs to."
        )
    if hollow:
        # Asked again unchanged, a model at a low temperature writes the same answer again.
        parts.append(
            "Your last record said nothing about these messages. Write what happens in them: "
            "who does what, naming people, one sentence each."
        )
    return (
        ChatMessage("system", instructions),
        ChatMessage("user", "\n\n".join(parts), name="Story"),
    )


def synopsis_prompt(request: ChronicleRequest) -> tuple[ChatMessage, ...]:
    char, user = request.cast.char, request.cast.user
    length = request.target_words()
    instructions = SYNOPSIS_INSTRUCTIONS.format(char=char, user=user, length=length)
    parts = []
    if request.previous:
        parts.append(f"Earlier synopsis:\n{request.previous.strip()}")
    for chapter in request.chapters:
        parts.append(f"{chapter_heading(chapter)}\n{chapter.text.strip()}")
    if request.draft is not None:
        fit = length_fit(request.draft_tokens, request.target_tokens or request.draft_tokens)
        note = SYNOPSIS_TOO_SHORT if fit is LengthFit.SHORT else SYNOPSIS_TOO_LONG
        draft_length = request.words_for(request.draft_tokens)
        parts.append(
            note.format(draft=draft_length, length=length, user=user)
            + f"\n\nDraft:\n{request.draft.strip()}"
        )
    return (
        ChatMessage("system", instructions),
        ChatMessage("user", "\n\n".join(parts), name="Story"),
    )


def chapter_heading(chapter: Chapter, *, time: bool = True) -> str:
    """ "Chapter (messages #33-#51; in-story time: ...)", without the time when `time` is
    False (the memory block says a time once for a run of chapters with the same one)."""
    when = f"; in-story time: {chapter.story_time}" if chapter.story_time and time else ""
    return f"Chapter (messages #{chapter.first_message_id}-#{chapter.last_message_id}{when})"


# ---- request and reply ----------------------------------------------------------------------


class ChronicleKind(StrEnum):
    CHAPTER = "chapter"  # one range of messages
    SYNOPSIS = "synopsis"  # the older chapters and the previous synopsis, folded (a major GC)
    ROLLING = "rolling summary"  # the previous summary and new messages (the evaluation's arm)


@dataclass(frozen=True)
class ChronicleRequest:
    """What the fold worker asks the chronicler to write, and from what."""

    kind: ChronicleKind
    cast: Cast
    messages: tuple[Message, ...] = ()  # the source of a chapter or a rolling rewrite
    chapters: tuple[Chapter, ...] = ()  # the chapters a synopsis folds
    previous: str | None = None  # the synopsis (or rolling summary) it replaces
    ledger: tuple[StoredLedgerEntry, ...] = ()  # a chapter's live ledger (it may end entries)
    misses: tuple[str, ...] = ()  # a readback retry: what the last answer left out
    hollow: bool = False  # a retry after an answer whose items all said nothing
    target_tokens: int | None = None  # the length a synopsis must hold
    draft: str | None = None  # an earlier attempt far from that length, to write again
    draft_tokens: int = 0
    part: tuple[int, int] | None = None  # (k, of): part k of one message too long for a call

    @classmethod
    def chapter(
        cls,
        messages: Sequence[Message],
        cast: Cast,
        ledger: Sequence[StoredLedgerEntry] = (),
        part: tuple[int, int] | None = None,
    ) -> ChronicleRequest:
        return cls(
            ChronicleKind.CHAPTER,
            cast.in_story(messages),
            messages=tuple(messages),
            ledger=tuple(ledger),
            part=part,
        )

    @property
    def structured(self) -> bool:
        """Answered in a JSON schema (a chapter) rather than prose (a synopsis, a summary)."""
        return self.kind is ChronicleKind.CHAPTER

    @property
    def source(self) -> ChapterSource:
        return ChapterSource.of(self.messages, self.ledger)

    def schema(self, budget_tokens: int, per_char: float) -> str | None:
        """The JSON schema of the answer, sized so that any answer fits `budget_tokens` with a
        string character at `per_char` tokens (None for a prose answer).
        NoRoomForChapterError when none can."""
        if not self.structured:
            return None
        return schema_text(chapter_schema(self.source, budget_tokens, per_char))

    @classmethod
    def synopsis(
        cls,
        previous: str | None,
        chapters: Sequence[Chapter],
        cast: Cast,
        target_tokens: int | None = None,
    ) -> ChronicleRequest:
        return cls(
            ChronicleKind.SYNOPSIS,
            cast,
            chapters=tuple(chapters),
            previous=previous,
            target_tokens=target_tokens,
        )

    @classmethod
    def rolling(
        cls, previous: str | None, messages: Sequence[Message], cast: Cast
    ) -> ChronicleRequest:
        return cls(
            ChronicleKind.ROLLING, cast.in_story(messages), tuple(messages), previous=previous
        )

    def again_with(self, draft: str, draft_tokens: int) -> ChronicleRequest:
        """The same synopsis asked once more, showing the draft that missed its length."""
        return replace(self, draft=draft, draft_tokens=draft_tokens)

    def words_for(self, tokens: int) -> str:
        """`tokens` said in words (or characters) of the story's language, measured on the
        chapters this request folds."""
        sample = "".join(c.text for c in self.chapters)
        return length_words(tokens, sample, sum(c.tokens for c in self.chapters))

    def target_words(self) -> str:
        """The synopsis's target length as the instructions say it."""
        if self.target_tokens is None:
            return "the length the story needs"
        return self.words_for(self.target_tokens)

    def expected_chars(self) -> int | None:
        """About how long a real answer is, in characters (a refusal is far shorter)."""
        if self.kind is ChronicleKind.CHAPTER:
            source = sum(len(m.text) for m in self.messages)
            return int(source * EXPECTED_CHAPTER_RATIO)
        if self.kind is ChronicleKind.SYNOPSIS and self.target_tokens is not None:
            text = sum(len(c.text) for c in self.chapters)
            tokens = sum(c.tokens for c in self.chapters)
            return int(self.target_tokens * (text / tokens if tokens else 4.0))
        return None


@dataclass(frozen=True)
class ChroniclerPrompt:
    """A request as the model call takes it."""

    messages: tuple[ChatMessage, ...]
    lead: str  # the words the answer starts with (the prompt's last words; "" for none)
    stops: tuple[str, ...]
    source: str = ""  # a structured chapter's source as the prompt shows it (sizes its schema)


def chronicler_prompt(request: ChronicleRequest, profile: ModelProfile) -> ChroniclerPrompt:
    """The prompt for a request on a model with this profile (its format decides the lead and
    the stop strings)."""
    char, user = request.cast.char, request.cast.user
    if request.structured:
        # The grammar starts the answer at its first brace: no lead, and no stop string can
        # occur in it (strings hold no line breaks).
        messages = structured_chapter_prompt(
            request.messages,
            request.ledger,
            request.misses,
            char=char,
            user=user,
            part=request.part,
            hollow=request.hollow,
        )
        source = render_source(request.messages, char=char, user=user)
        return ChroniclerPrompt(messages, "", (), source)
    if request.kind is ChronicleKind.SYNOPSIS:
        messages = synopsis_prompt(request)
    else:
        messages = _rolling_prompt(request.previous, request.messages, char=char, user=user)
    lead = chronicler_lead(profile, request.kind)
    return ChroniclerPrompt(messages, lead, chronicler_stops(profile))


MIN_SUMMARY_ROOM = 48  # tokens; less than this cannot hold a useful chapter


def source_room(fold_n_ctx: int, max_output: int, instructions: int) -> int:
    """Tokens of source one chronicler call can read beside its instructions (`instructions`
    tokens), keeping room for the answer in a fold context of `fold_n_ctx`."""
    reserve = min(max_output, max(4 * MIN_SUMMARY_ROOM, fold_n_ctx // 4))
    return max(1, fold_n_ctx - instructions - reserve - 64)


def chronicler_instructions(kind: ChronicleKind, cast: Cast) -> str:
    """The fixed part of a prompt (sizing a chapter's source leaves room for it)."""
    if kind is ChronicleKind.CHAPTER:
        return structured_instructions(cast)
    template = {
        ChronicleKind.SYNOPSIS: SYNOPSIS_INSTRUCTIONS,
        ChronicleKind.ROLLING: ROLLING_INSTRUCTIONS,
    }[kind]
    return template.format(char=cast.char, user=cast.user, length="the length it needs")


class Verdict(StrEnum):
    OK = "ok"
    EMPTY = "empty"  # nothing after the lead
    CUT = "cut"  # the output cap stopped it: a cut summary is never stored
    REFUSED = "refused"  # a refusal: never stored
    MALFORMED = "malformed"  # not a chapter in its schema (a server that ignored the schema)
    HOLLOW = "hollow"  # a structured chapter with no item: it keeps nothing of its messages


@dataclass(frozen=True)
class ChronicleReply:
    """What the chronicler wrote, read: the text to store, or why not."""

    request: ChronicleRequest
    verdict: Verdict
    text: str  # as stored: the lead and what followed (a chapter without its "When:" line)
    # A chapter's in-story time, from its "When:" line when it is no speaker's line: the whole
    # line, or the dates the grammar did not cut of one it cut (read_chapter).
    story_time: str | None = None
    retry: ChronicleRequest | None = field(default=None, compare=False)  # ask once more
    structure: StructuredChapter | None = None  # a structured chapter, as read
    misses: tuple[str, ...] = ()  # the readback's misses (names and numbers left out)
    # The structured chapter as stored: what the chronicler wrote, and in the ledger the
    # user's sentences that hold the names and numbers it left out (`_kept`).
    kept: StructuredChapter | None = None

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK


def read_reply(
    request: ChronicleRequest,
    prompt: ChroniclerPrompt,
    written: str,
    *,
    cut: bool,
    schema: str | None = None,
) -> ChronicleReply:
    """Read what the model wrote after the prompt (`cut`: it stopped at the output cap;
    `schema`: the JSON schema a structured answer was written in, whose limits say which of
    its strings the grammar ended: memory/cut_items.py).

    A refusal is worth one more try with the same request; an empty or cut summary is not
    (the fold job fails and is retried later, by its backoff). A structured chapter is judged
    on its structure: an answer that parses under its schema is a record (its items may quote
    "I can't" from the story); only free text in its place can be a refusal.
    """
    text = with_lead(prompt.lead, written)
    if cut:
        return ChronicleReply(request, Verdict.CUT, text)
    if not text:
        return ChronicleReply(request, Verdict.EMPTY, text)
    if request.structured:
        return _read_structured(request, text, schema)
    if _refused(request, text):
        return ChronicleReply(request, Verdict.REFUSED, text, retry=request)
    return ChronicleReply(request, Verdict.OK, text)


def _refused(request: ChronicleRequest, text: str) -> bool:
    """Free text that is the chronicler declining, in its own voice (memory/refusal.py)."""
    return is_refusal(Prose(text), expected_chars=request.expected_chars())


def _read_structured(
    request: ChronicleRequest, text: str, schema: str | None = None
) -> ChronicleReply:
    """A structured chapter read against its source (its strings the grammar ended finished
    or marked first); its misses are asked for once more."""
    try:
        answer = parse_answer(text)
    except MalformedAnswerError:
        # Free text where the schema's object should be (a server that ignored the schema).
        verdict = Verdict.REFUSED if _refused(request, text) else Verdict.MALFORMED
        return ChronicleReply(request, verdict, text, retry=request)
    cut_time = False
    if schema is not None:
        bounds = json.loads(schema)
        cut_time = time_cut(answer, bounds)
        answer = finish_answer(answer, bounds, request.messages)
    source = request.source
    chapter = read_chapter(
        answer,
        request.messages,
        char=request.cast.char,
        user=request.cast.user,
        members=request.cast.members,
        open_threads=source.open_threads,
        replaceable=source.replaceable,
        time_cut=cut_time,
    )
    if chapter.holds_nothing:
        # Whatever the model wrote (a refusal forced into the schema, items without evidence),
        # a chapter that keeps nothing is never stored in place of its messages.
        return ChronicleReply(request, Verdict.HOLLOW, text, retry=replace(request, hollow=True))
    misses = tuple(missing(user_specifics(request.messages), chapter_words(chapter)))
    retry = replace(request, misses=misses) if misses and not request.misses else None
    return ChronicleReply(
        request,
        Verdict.OK,
        render_chapter(chapter),
        chapter.time or None,
        retry=retry,
        structure=chapter,
        misses=misses,
        kept=_kept(request, chapter, misses),
    )


def _kept(
    request: ChronicleRequest, chapter: StructuredChapter, misses: Sequence[str]
) -> StructuredChapter:
    """The chapter with, in the ledger, the user's sentences that hold the names and numbers
    it left out (in their own words, so memory keeps them whatever the model; the misses stay
    recorded as the chronicler's)."""
    # The character's own name is not quoted for: a line that names them ("Goodnight,
    # Corwin.") tells memory nothing the story does not.
    char = {word.casefold() for name in request.cast.names for word in name.split()}
    left_out = [m for m in misses if m.casefold() not in char]
    return with_quotes(chapter, request.messages, left_out)


def _rolling_prompt(
    previous: str | None, messages: Sequence[Message], *, char: str, user: str
) -> tuple[ChatMessage, ...]:
    parts = []
    if previous:
        parts.append(f"Earlier summary:\n{previous.strip()}")
    first, last = messages[0].id, messages[-1].id
    parts.append(
        f"New messages #{first} to #{last}:\n\n{render_source(messages, char=char, user=user)}"
    )
    return (
        ChatMessage("system", ROLLING_INSTRUCTIONS.format(char=char, user=user)),
        ChatMessage("user", "\n\n".join(parts), name="Story"),
    )
