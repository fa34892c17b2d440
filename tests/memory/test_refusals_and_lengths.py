"""The chronicler's refusal check, the synopsis's length and lead, the user's name (issue 14)."""

from __future__ import annotations

import pytest

from kotonia_tui.config import ModelProfile, PromptFormat
from kotonia_tui.domain import Chapter, Message, Role
from kotonia_tui.memory.chronicler import (
    SYNOPSIS_LEAD,
    TRANSCRIPT_LEAD,
    Cast,
    ChronicleRequest,
    LengthFit,
    Verdict,
    chronicler_prompt,
    length_fit,
    length_words,
    read_reply,
)
from kotonia_tui.memory.oversized import split_text
from kotonia_tui.memory.refusal import Prose, is_refusal, without_quotes

# Short real chapters whose characters say the words of a refusal: all five were refused.
QUOTING_CHAPTERS = [
    'Ann told Rowan "I won\'t pay twelve shillings for a mainspring" and left the shop.',
    'Rowan said "I\'m sorry, but the watch cannot be saved," and Ann cried.',
    "Ann said 'I can't stay tonight' and Rowan nodded.",
    "林对安说：“抱歉，我来晚了。”安笑了。",
    "客は「申し訳ありません、もう閉店です」と言い、紬は本を閉じた。",
    "> I cannot help you, Rowan said.\nAnn left.",
    "Kai can't swim, so Ann rowed the boat alone.",  # "i can't" inside a name
]
REFUSALS = [
    "I'm sorry, but I can't help with that.",
    "I cannot create that record.",
    "As an AI, I won't write this chapter.",
    "申し訳ありませんが、その記録は作成できません。",
    "抱歉，我无法提供这个内容的摘要。",
]


@pytest.mark.parametrize("chapter", QUOTING_CHAPTERS)
def test_a_chapter_that_quotes_refusal_words_is_not_a_refusal(chapter: str) -> None:
    assert not is_refusal(chapter)


@pytest.mark.parametrize("text", REFUSALS)
def test_the_chroniclers_own_refusals_are_still_refusals(text: str) -> None:
    assert is_refusal(text)
    assert is_refusal(text, expected_chars=2_000)


def test_shortness_is_judged_against_the_length_expected_of_the_answer() -> None:
    own_voice = "I cannot say more than this about the evening at the shop. " * 3  # 180 chars
    assert is_refusal(own_voice, expected_chars=3_000)  # a chapter of 3,000 expected: short
    assert not is_refusal(own_voice, expected_chars=200)  # about what was expected: a chapter
    assert not is_refusal("I cannot. " * 60)  # past 400 characters it never is one


def test_the_check_is_an_interface_a_structured_answer_can_implement() -> None:
    class Structured:
        """An answer of another shape: its free-text fields, its size."""

        def __init__(self, summary: str, items: int) -> None:
            self.summary, self.items = summary, items

        def own_words(self) -> str:
            return without_quotes(self.summary)

        def size(self) -> int:
            return len(self.summary) + 80 * self.items

    assert is_refusal(Structured("I'm sorry, but I can't help with that.", 0))
    assert not is_refusal(Structured('Ann said "I\'m sorry, but no."', 0))
    assert not is_refusal(Structured("I cannot say.", 10))  # ten items: not short
    assert Prose(" text ").size() == 4


def test_a_chapter_quoting_dialogue_is_stored_not_refused() -> None:
    """A structured chapter is judged on its structure: one that parses is a record, however
    short and whatever it quotes; only free text in its place can be a refusal."""
    source = [Message(id=1, role=Role.USER, speaker="Ann", text="I won't pay, I'm sorry.")]
    request = ChronicleRequest.chapter(source, Cast(char="Rowan", user="Ann"))
    prompt = chronicler_prompt(request, ModelProfile(prompt_format=PromptFormat.TEMPLATE))
    answer = '{"events": [{"ids": [1], "event": "Ann: I\'m sorry, but I won\'t pay."}]}'
    reply = read_reply(request, prompt, answer, cut=False)
    assert reply.verdict is Verdict.OK
    assert reply.text == "- Ann: I'm sorry, but I won't pay. (#1)"
    # Free text where the JSON should be: the chronicler's own refusal is one (asked again)...
    refused = read_reply(request, prompt, "I'm sorry, but I can't help with that.", cut=False)
    assert (refused.verdict, refused.retry) == (Verdict.REFUSED, request)
    # ... quoted dialogue is not; it is still no chapter (a server that ignored the schema).
    dialogue = "Ann told Rowan \"I'm sorry, but I won't pay.\""
    quoted = read_reply(request, prompt, dialogue, cut=False)
    assert (quoted.verdict, quoted.retry) == (Verdict.MALFORMED, request)


def test_the_chronicler_calls_the_user_by_the_name_the_story_uses() -> None:
    """The persona is the default "User", but the user's lines are signed "Ann"."""
    source = [
        Message(id=1, role=Role.USER, speaker="Ann", text="I came for my brother."),
        Message(id=2, role=Role.CHARACTER, speaker="Wren", text='"Which ship?"'),
    ]
    request = ChronicleRequest.chapter(source, Cast(char="Wren", user="User"))
    system, story = chronicler_prompt(request, ModelProfile()).messages
    assert "between Wren and Ann" in system.content
    assert "User" not in system.content
    assert "Wren -> Ann (says): Which ship?" in story.content
    # With no line of the user's in the range, the persona's name stands.
    alone = ChronicleRequest.chapter(source[1:], Cast(char="Wren", user="Mara"))
    assert alone.cast.user == "Mara"


def _chapters(text: str, tokens: int) -> list[Chapter]:
    return [
        Chapter(conversation_id=1, first_message_id=1, last_message_id=9, text=text, tokens=tokens)
    ]


def test_a_base_models_synopsis_has_its_own_lead_not_the_chapters() -> None:
    base = ModelProfile(prompt_format=PromptFormat.TRANSCRIPT)
    request = ChronicleRequest.synopsis(None, _chapters("Ann came.", 3), Cast("Wren", "Ann"))
    assert chronicler_prompt(request, base).lead == SYNOPSIS_LEAD != TRANSCRIPT_LEAD
    chapter = ChronicleRequest.chapter(
        [Message(id=1, role=Role.USER, speaker="Ann", text="Hi")], Cast("Wren", "Ann")
    )
    # A structured chapter has no lead: its grammar starts the answer at the brace.
    assert chronicler_prompt(chapter, base).lead == ""
    chat = ModelProfile(prompt_format=PromptFormat.TEMPLATE)
    assert chronicler_prompt(request, chat).lead == ""
    own = base.model_copy(update={"synopsis_lead": "The story:"})
    assert chronicler_prompt(request, own).lead == "The story:"


@pytest.mark.parametrize(
    ("sample", "tokens", "said"),
    [
        ("Ann came to the lighthouse in the storm and met Wren. " * 4, 48, "words"),
        ("アンは嵐の夜に灯台へ来て、レンに会った。" * 4, 60, "characters"),
        ("安在暴风雨之夜来到灯塔，见到了任。" * 4, 52, "characters"),
    ],
)
def test_the_synopsis_target_is_said_in_the_story_languages_own_units(
    sample: str, tokens: int, said: str
) -> None:
    request = ChronicleRequest.synopsis(
        None, _chapters(sample, tokens), Cast("Wren", "Ann"), target_tokens=tokens * 2
    )
    system = chronicler_prompt(request, ModelProfile()).messages[0].content
    expected = length_words(tokens * 2, sample, tokens)
    assert expected.endswith(said)
    assert f"Write about {expected}" in system
    # Twice the sample's tokens is about twice its length, in that language's units.
    number = int(expected.split()[0])
    units = len(sample) if said == "characters" else len(sample.split())
    assert 1.5 * units <= number <= 2.6 * units


def test_a_draft_far_from_its_length_is_asked_for_again_with_the_figures() -> None:
    request = ChronicleRequest.synopsis(
        "Earlier.", _chapters("Ann came. " * 10, 30), Cast("Wren", "Ann"), target_tokens=60
    )
    long = request.again_with("Ann came and stayed. " * 40, 200)
    text = chronicler_prompt(long, ModelProfile()).messages[1].content
    assert "far longer than" in text and text.rstrip().endswith("Ann came and stayed.")
    short = request.again_with("Ann came.", 4)
    assert "far shorter than" in chronicler_prompt(short, ModelProfile()).messages[1].content


def test_the_length_tolerance_is_twenty_percent_either_way() -> None:
    assert length_fit(100, 100) is LengthFit.OK
    assert length_fit(80, 100) is length_fit(120, 100) is LengthFit.OK
    assert length_fit(79, 100) is LengthFit.SHORT
    assert length_fit(121, 100) is LengthFit.LONG


async def test_a_long_message_is_cut_at_its_seams_into_parts_that_fit() -> None:
    letter = ("The storm came in the night. " * 30 + "\n\n") * 6 + "x" * 900 + "。雨。" * 50

    def count(text: str) -> int:
        return len(text) // 4 + 1

    async def counts(texts: list[str]) -> list[int]:
        return [count(t) for t in texts]

    parts = await split_text(letter, 120, counts)
    assert "".join(parts) == letter  # nothing lost
    assert all(count(p) <= 120 for p in parts)
    assert sum(1 for p in parts if p.endswith("\n\n")) >= 5  # paragraph seams used first
