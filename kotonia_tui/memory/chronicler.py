"""The chronicler of the story: prompts that fold messages into chapters, chapters into a synopsis.

The summarizer plays an in-story role (asked plainly to "summarize", models sometimes continue
the story instead). Its input keeps narration, dialogue (speaker -> listener) and inner
thoughts apart, as stored in the segments, because a character's claim is not a fact: a liar's
story about their past must come out of memory as what they *said*, with "on the surface /
in fact" where the narration or their thoughts show otherwise. What the user says about
themselves is taken as fact (over-doubting it lost most of an everyday conversation's memory).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kotonia_tui.config import ModelProfile, PromptFormat
from kotonia_tui.domain import Chapter, ChatMessage, Message, Role, SegmentKind
from kotonia_tui.memory.segments import parse_segments

CHRONICLER = "Chronicler"


@dataclass(frozen=True)
class Cast:
    """Who a story is between: the character's name and the name of the persona the user plays."""

    char: str
    user: str


# Where a chronicler's text ends even if the model does not stop by itself: a base model
# (the transcript format) goes on to copy more source lines ("[#12] ...") or a new speaker.
CHRONICLER_STOPS = ("\n[#", "\nStory:", "\nChronicler:")
# In a transcript a base model's chapter is its one paragraph: after a blank line it goes on
# to invent the next turn of the document ("Narrator: ..."), which is not part of the chapter.
TRANSCRIPT_CHRONICLER_STOPS = (*CHRONICLER_STOPS, "\n\n")
# How a base model's chapter begins when its profile names no lead: given a transcript of
# source lines it goes on copying them; the start of a sentence of prose puts it into prose.
TRANSCRIPT_LEAD = "In this part of the story,"


def chronicler_stops(profile: ModelProfile) -> tuple[str, ...]:
    """Where the chronicler's text ends, for the profile's prompt format."""
    if profile.prompt_format is PromptFormat.TRANSCRIPT:
        return TRANSCRIPT_CHRONICLER_STOPS
    return CHRONICLER_STOPS


def chronicler_lead(profile: ModelProfile) -> str:
    """The words the chronicler's text starts with ("" for none): the profile's own, or
    TRANSCRIPT_LEAD in the transcript format; a chat template makes the model answer anyway."""
    if profile.chronicler_lead is not None:
        return profile.chronicler_lead.strip()
    return TRANSCRIPT_LEAD if profile.prompt_format is PromptFormat.TRANSCRIPT else ""


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
- Keep decisions with their reasons, promises, rules and constraints that were set, and \
how feelings and the relationship changed.
- When a topic or question is settled, close it with "Resolved: ..."; list what is still \
open at the end as "Open: ...".
- Name people instead of using pronouns. Keep numbers, names and places exact.
- Do not invent. If something needed is unclear, write [missing].
- If the messages show when this happens in the story, begin with "When: ..." on its own line.
- Write only the chapter: no preface, no comments."""

SYNOPSIS_INSTRUCTIONS = """\
You are the chronicler of the story between {char} and {user}. Fold the earlier synopsis and \
the chapters below into one new synopsis of everything so far, in the language of the story.

Rules:
- Keep every fact the story rests on: who people are to each other, what happened, decisions \
with reasons, promises, constraints {user} set.
- Keep claims as claims (who said what to whom) and keep "On the surface / In fact" pairs.
- Drop topics marked "Resolved:" to one line each; keep them marked resolved.
- End with the open threads, each on its own line starting with "Open: ". They must survive.
- Name people instead of using pronouns. Keep numbers and names exact. Do not invent; write \
[missing] where something is unclear.
- Write only the synopsis."""

# Stock refusal phrases (English, Japanese, Chinese). A refusal is short and contains one.
REFUSAL_PHRASES = (
    "i can't",
    "i cannot",
    "i can not",
    "i'm not able",
    "i am not able",
    "i'm unable",
    "i am unable",
    "i won't",
    "i will not",
    "as an ai",
    "i'm sorry, but",
    "i apologize, but",
    "not able to help",
    "cannot help with",
    "can't help with",
    "against my guidelines",
    "できません",
    "お手伝いできません",
    "申し訳ありません",
    "申し訳ございません",
    "お応えできません",
    "作成できません",
    "我不能",
    "我无法",
    "抱歉",
    "对不起",
    "无法提供",
    "无法协助",
    "不能提供",
)
# The shortest real summary seen in production was 519 characters, the refusal 101 (seed 002).
REFUSAL_MAX_CHARS = 400


def is_refusal(text: str) -> bool:
    """Short output with a stock refusal phrase, in any language the app speaks."""
    stripped = text.strip()
    if len(stripped) > REFUSAL_MAX_CHARS:
        return False
    lowered = stripped.lower().replace("’", "'")
    return any(phrase in lowered for phrase in REFUSAL_PHRASES)


def render_source(messages: Sequence[Message], *, char: str, user: str) -> str:
    """The messages as the chronicler reads them: one line per segment, kinds kept apart."""
    lines: list[str] = []
    for message in messages:
        if message.role is Role.SYSTEM:
            lines.append(f"[#{message.id}] (scene) {message.text.strip()}")
            continue
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


def chapter_prompt(messages: Sequence[Message], *, char: str, user: str) -> tuple[ChatMessage, ...]:
    instructions = CHAPTER_INSTRUCTIONS.format(char=char, user=user)
    first, last = messages[0].id, messages[-1].id
    source = render_source(messages, char=char, user=user)
    return (
        ChatMessage("system", instructions),
        ChatMessage("user", f"Messages #{first} to #{last}:\n\n{source}", name="Story"),
    )


def synopsis_prompt(
    previous: str | None, chapters: Sequence[Chapter], *, char: str, user: str
) -> tuple[ChatMessage, ...]:
    instructions = SYNOPSIS_INSTRUCTIONS.format(char=char, user=user)
    parts = []
    if previous:
        parts.append(f"Earlier synopsis:\n{previous.strip()}")
    for chapter in chapters:
        parts.append(f"{chapter_heading(chapter)}\n{chapter.text.strip()}")
    return (
        ChatMessage("system", instructions),
        ChatMessage("user", "\n\n".join(parts), name="Story"),
    )


def chapter_heading(chapter: Chapter) -> str:
    when = f"; in-story time: {chapter.story_time}" if chapter.story_time else ""
    return f"Chapter (messages #{chapter.first_message_id}-#{chapter.last_message_id}{when})"


_WHEN = re.compile(r"^\s*(?:when|いつ|时间|時間)\s*[:：]\s*(?P<when>.+)$", re.IGNORECASE)


@dataclass(frozen=True)
class ChapterText:
    body: str
    story_time: str | None


def parse_chapter(text: str) -> ChapterText:
    """Split off a leading "When: ..." line (the in-story time) from the chapter body."""
    lines = text.strip().splitlines()
    if lines:
        match = _WHEN.match(lines[0])
        if match:
            return ChapterText("\n".join(lines[1:]).strip(), match.group("when").strip())
    return ChapterText(text.strip(), None)
