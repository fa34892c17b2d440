"""Prompt assembly keeps a stable prefix; the chronicler's input keeps who said what apart."""

from __future__ import annotations

from kotonia_tui.config import ModelProfile, PromptFormat
from kotonia_tui.domain import (
    Chapter,
    ChatMessage,
    DepthNote,
    LedgerKind,
    Message,
    Role,
    SegmentKind,
    StoredLedgerEntry,
)
from kotonia_tui.engine.formats import TemplateFormat, TranscriptFormat
from kotonia_tui.memory.assembly import (
    MEMORY_ACK,
    MEMORY_HEADER,
    History,
    MemoryBlock,
    PromptLine,
    assemble_prompt,
    history_for_next_turn,
    place_notes,
    split_notes,
)
from kotonia_tui.memory.chronicler import (
    TRANSCRIPT_LEAD,
    Cast,
    ChronicleKind,
    ChronicleRequest,
    Verdict,
    chronicler_instructions,
    chronicler_prompt,
    read_reply,
    render_source,
    structured_chapter_prompt,
)
from kotonia_tui.memory.ledger import entry_line
from kotonia_tui.memory.refusal import is_refusal
from kotonia_tui.memory.segments import parse_segments

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def memory_text() -> str:
    chapter = Chapter(
        conversation_id=1, first_message_id=1, last_message_id=40, text="Rowan told Ann..."
    )
    return MemoryBlock("Ann came to Saltmere.", (chapter,)).render()


def turn_lines(count: int) -> list[PromptLine]:
    lines = []
    for i in range(count):
        if i % 2 == 0:
            lines.append(PromptLine(Role.USER, "Ann", f"Question number {i}?"))
        else:
            lines.append(PromptLine(Role.CHARACTER, "Rowan", f'*nods* "Answer {i}."'))
    return lines


def render(messages: tuple[ChatMessage, ...], fmt: PromptFormat) -> str:
    if fmt is PromptFormat.TRANSCRIPT:
        return TranscriptFormat().render(messages, reply_name="Rowan", user_name="Ann").text
    template = TemplateFormat(
        TEMPLATE, bos_token="", eos_token="</s>", thinking=False, reasoning_tags=("", "")
    )
    return template.render(messages).text


def test_fifty_turns_without_a_fold_each_prompt_extends_the_previous_one():
    for fmt in (PromptFormat.TRANSCRIPT, PromptFormat.TEMPLATE):
        previous_prefix = None
        for turn in range(1, 51):
            lines = turn_lines(2 * turn - 1)  # ends with the user's new message
            messages = assemble_prompt(
                system_text="You are Rowan.",
                char_name="Rowan",
                memory_text=memory_text(),
                window=lines,
                notes=f"Lore for turn {turn}",  # changes every turn: it sits after the history
            )
            text = render(messages, fmt)
            if previous_prefix is not None:
                assert text.startswith(previous_prefix), (fmt, turn)
            # The prefix up to the last verbatim message (the new one) of this turn.
            marker = "Question number " + str(2 * (turn - 1)) + "?"
            previous_prefix = text[: text.index(marker) + len(marker)]


def test_the_memory_sits_after_the_setup_as_an_exchange_with_its_header():
    messages = assemble_prompt(
        system_text="SETUP",
        char_name="Rowan",
        memory_text=memory_text(),
        window=turn_lines(1),
    )
    assert messages[0] == ChatMessage("system", "SETUP")
    assert messages[1].role == "user" and messages[1].content.startswith(MEMORY_HEADER)
    assert "not necessarily the truth" in messages[1].content
    assert messages[1].content.index("Synopsis") < messages[1].content.index("Chapter")
    assert messages[2].role == "assistant"
    assert "SETUP" not in messages[1].content
    assert "Saltmere" not in messages[0].content  # memory never goes into the system prompt


def test_the_block_spends_its_tokens_on_memory_not_on_its_framing():
    """At n_ctx 2048 a whole memory block is 300-450 tokens (the eval's replay of
    lighthouse.json) and every token of it is one the verbatim window loses. The framing
    (header, section headings, the acknowledgement) took 86 of a 392-token block with a
    two-sentence header and an explanation under the ledger's heading; what is left of it
    still tells the reader what the block is, its order, and that statements are claims."""
    fact = StoredLedgerEntry(
        id=1,
        conversation_id=1,
        kind=LedgerKind.USER_FACT,
        text='said "I call it Old Brass."',
        subject="Mara",
        evidence=[12],
        chapter_id=1,
    )
    chapter = Chapter(
        conversation_id=1,
        first_message_id=43,
        last_message_id=52,
        text="- Mara will buy a barrel of oil for the Margery. (#45)",
    )
    synopsis = "Mara came to Gull's Reach to survey the light."
    text = MemoryBlock(synopsis, (chapter,), (fact,)).render()
    contents = (entry_line(fact), synopsis, chapter.text)
    assert all(part in text for part in contents)
    framing = len(text) + len(MEMORY_ACK) - sum(len(part) for part in contents)
    # Section headings and the chapter's range stay; the old framing here was 482 characters.
    assert framing <= 260, framing
    assert text.startswith(MEMORY_HEADER) and "not necessarily the truth" in MEMORY_HEADER
    assert "Oldest first" in MEMORY_HEADER
    assert text.index("## Ledger") < text.index("## Synopsis") < text.index("## Chapter")


def test_segments_tell_narration_dialogue_and_thoughts_apart():
    segments = parse_segments(
        '*He sets down the watch.* "I sailed on the Grey Heron." `I never sailed.`',
        speaker="Rowan",
        listener="Ann",
    )
    assert [s.kind for s in segments] == [
        SegmentKind.NARRATION,
        SegmentKind.DIALOGUE,
        SegmentKind.THOUGHT,
    ]
    assert segments[1].speaker == "Rowan" and segments[1].listener == "Ann"
    plain = parse_segments("I'm a carpenter from Leeds.", speaker="Ann", listener="Rowan")
    assert [s.kind for s in plain] == [SegmentKind.DIALOGUE]
    japanese = parse_segments("*本を閉じる*「雨の日だけ開くの」", speaker="紬", listener="Ann")
    assert [s.kind for s in japanese] == [SegmentKind.NARRATION, SegmentKind.DIALOGUE]


def test_the_chronicler_reads_claims_as_claims_and_thoughts_as_thoughts():
    messages = [
        Message(id=7, role=Role.USER, speaker="Ann", text="Were you ever at sea?"),
        Message(
            id=8,
            role=Role.CHARACTER,
            speaker="Rowan",
            text='*His hands shake.* "I was the navigator." `I was a clerk.`',
        ),
    ]
    source = render_source(messages, char="Rowan", user="Ann")
    assert "[#7] Ann (the user) -> Rowan (says): Were you ever at sea?" in source
    assert "[#8] (narration) His hands shake." in source
    assert "[#8] Rowan -> Ann (says): I was the navigator." in source
    assert "[#8] Rowan (thinks, unspoken): I was a clerk." in source
    system, user = structured_chapter_prompt(messages, (), (), char="Rowan", user="Ann")
    assert "chronicler of the story" in system.content
    assert '"in_fact"' in system.content and '"resolved"' in system.content
    assert "Do not invent" in system.content
    assert user.content.startswith("Messages #7 to #8")


def test_refusals_are_recognised_in_three_languages_and_real_summaries_are_not():
    assert is_refusal("I'm sorry, but I can't create that record.")
    assert is_refusal("申し訳ありませんが、その記録は作成できません。")
    assert is_refusal("抱歉，我无法提供这个内容的摘要。")
    long_summary = "Rowan told Ann he cannot swim. " * 30
    assert not is_refusal(long_summary)  # long output is never a refusal
    assert not is_refusal("Ann and Rowan met at the clock shop.")


CAST = Cast(char="Rowan", user="Ann")
SOURCE = [
    Message(id=3, role=Role.USER, speaker="Ann", text="My sister Mia is coming on Friday."),
    Message(id=4, role=Role.CHARACTER, speaker="Rowan", text='"Then I will mend the clock."'),
]


def test_a_chronicle_request_becomes_a_prompt_for_the_models_format():
    chapter = ChronicleRequest.chapter(SOURCE, CAST)
    base = ModelProfile(prompt_format=PromptFormat.TRANSCRIPT)
    chat = ModelProfile(prompt_format=PromptFormat.TEMPLATE)
    on_base, on_chat = chronicler_prompt(chapter, base), chronicler_prompt(chapter, chat)
    expected = structured_chapter_prompt(SOURCE, (), (), char="Rowan", user="Ann")
    assert on_base.messages == on_chat.messages == expected
    assert on_base.messages[0].content == chronicler_instructions(ChronicleKind.CHAPTER, CAST)
    # A chapter's grammar starts the answer at its brace: no lead and no stop strings.
    assert (on_base.lead, on_base.stops) == ("", ())

    previous = "Ann came to the shop in the rain."
    rolling_request = ChronicleRequest.rolling(previous, SOURCE, CAST)
    # A base model is led into prose and stopped at a blank line; a chat model needs neither.
    rolling_base = chronicler_prompt(rolling_request, base)
    assert (rolling_base.lead, chronicler_prompt(rolling_request, chat).lead) == (
        TRANSCRIPT_LEAD,
        "",
    )
    assert "\n\n" in rolling_base.stops
    assert "\n\n" not in chronicler_prompt(rolling_request, chat).stops
    rolling = chronicler_prompt(rolling_request, chat)
    assert rolling.messages[1].content.startswith(f"Earlier summary:\n{previous}")
    assert "New messages #3 to #4" in rolling.messages[1].content
    chapters = [
        Chapter(conversation_id=1, first_message_id=3, last_message_id=4, text="Mia visits.")
    ]
    synopsis = chronicler_prompt(ChronicleRequest.synopsis(previous, chapters, CAST), chat)
    assert "Mia visits." in synopsis.messages[1].content
    assert "Earlier synopsis" in synopsis.messages[1].content


def test_the_reply_says_what_to_store_and_when_to_ask_again():
    request = ChronicleRequest.rolling(None, SOURCE, CAST)
    prompt = chronicler_prompt(request, ModelProfile(prompt_format=PromptFormat.TRANSCRIPT))
    reply = read_reply(request, prompt, " Ann said her sister Mia comes on Friday.", cut=False)
    assert reply.ok and reply.retry is None
    assert reply.text == f"{TRANSCRIPT_LEAD} Ann said her sister Mia comes on Friday."
    # Unusable: the lead alone, a cut text, a refusal; only a refusal is worth another try.
    assert read_reply(request, prompt, "  ", cut=False).verdict is Verdict.EMPTY
    cut = read_reply(request, prompt, " Ann said", cut=True)
    assert cut.verdict is Verdict.CUT and cut.retry is None
    refused = read_reply(request, prompt, " I'm sorry, but I can't help.", cut=False)
    assert refused.verdict is Verdict.REFUSED and refused.retry == request


def test_an_authors_note_depth_counts_only_the_lines_the_model_reads():
    """Imported system notes are left out of the prompt, so they do not count for the depth."""
    window = [
        PromptLine(Role.USER, "Ann", "First."),
        PromptLine(Role.CHARACTER, "Rowan", "Second."),
        PromptLine(Role.SYSTEM, "", "[Start a new chat]"),
        PromptLine(Role.USER, "Ann", "Third."),
    ]
    for depth, before in ((0, None), (1, "Third."), (2, "Second."), (9, "First.")):
        messages = assemble_prompt(
            system_text="SETUP",
            char_name="Rowan",
            memory_text="",
            window=window,
            notes="LORE",
            depth_notes=(DepthNote("NOTE", depth),),
        )
        contents = [m.content for m in messages]
        assert "[Start a new chat]" not in contents
        at = contents.index("NOTE")
        if before is None:
            assert contents[at - 1] == "Third." and contents[at + 1] == "LORE"  # after the history
        else:
            assert contents[at + 1] == before, depth


def test_notes_at_one_depth_are_one_message_per_role_in_sillytaverns_order():
    """As SillyTavern's `doChatInject`: at one depth, assistant then user then system, the
    notes of one role joined by a line break in the order given; a depth counts the lines only;
    notes clamped to the window's start go deepest first."""
    lines = tuple(ChatMessage("user" if i % 2 else "assistant", f"m{i}") for i in range(4))
    notes = (
        DepthNote("author", 1),
        DepthNote("card-user", 1, "user", name="Ann"),
        DepthNote("card", 1),
        DepthNote("deep", 2, "assistant", name="Rowan"),
        DepthNote("last", 0),
        DepthNote("far", 9),
        DepthNote("farther", 12, "user", name="Ann"),
        DepthNote("   ", 1),  # an empty note is no message
    )
    assert place_notes(lines, notes) == (
        ChatMessage("user", "farther", name="Ann"),
        ChatMessage("system", "far"),
        *lines[:2],
        ChatMessage("assistant", "deep", name="Rowan"),
        lines[2],
        ChatMessage("user", "card-user", name="Ann"),
        ChatMessage("system", "author\ncard"),
        lines[3],
        ChatMessage("system", "last"),
    )
    assert place_notes((), (DepthNote("n", 3),)) == (ChatMessage("system", "n"),)


def test_a_continued_reply_counts_for_the_depths_and_the_next_turn_extends_the_settle():
    """On Continue the reply is the prefill, not a line, but the depths count it (SillyTavern's
    `doChatInject(coreChat, isContinue)`: depth 0 moves to 1). Without a continued reply the
    placement is as before. The history saved after the continued reply (`history_for_next_turn`
    with it) is where the next turn's prompt starts."""
    lines = tuple(ChatMessage("user" if i % 2 else "assistant", f"m{i}") for i in range(4))
    notes = (DepthNote("d0", 0, "user"), DepthNote("d1", 1), DepthNote("d2", 2))
    assert place_notes(lines, notes, trailing=1) == (
        *lines[:3],
        ChatMessage("system", "d2"),
        lines[3],
        ChatMessage("system", "d1"),
        ChatMessage("user", "d0"),
    )
    assert place_notes(lines, notes, trailing=0) == place_notes(lines, notes)
    head = (ChatMessage("system", "SETUP"),)
    reply = ChatMessage("assistant", "m4 and more")
    for depth in range(5):
        note = (DepthNote("note", depth),)
        saved = history_for_next_turn(History(head, lines, note, trailing=1), reply)
        following = History(head, (*lines, reply, ChatMessage("user", "m5")), note).messages
        assert following[: len(saved)] == saved, depth


def test_system_notes_at_depth_0_go_after_the_history_and_the_others_in_it():
    """One split for the chat's prompt (chat/prompting.py) and the evaluation's arms
    (eval/arms.py): the system notes at depth 0 joined, for after the history; the rest placed
    in it, in the order given. No notes: nothing, so a prompt without one is unchanged."""
    notes = (
        DepthNote("author", 0),
        DepthNote("deep", 2),
        DepthNote("card", 0),
        DepthNote("said", 0, "user", name="Ann"),
    )
    assert split_notes(notes) == ("author\ncard", (notes[1], notes[3]))
    assert split_notes(()) == ("", ())


def test_the_memory_block_says_a_chapters_time_once_for_a_run_of_the_same_time():
    """A temporal question is answered from the chapters' in-story times; the block is small
    (about 390 tokens at n_ctx 2048), so a time is said once for a run of chapters with the
    same one and again where it changes."""

    def chapter(first: int, time: str | None) -> Chapter:
        return Chapter(
            conversation_id=1,
            first_message_id=first,
            last_message_id=first + 9,
            text=f"- Event {first}.",
            story_time=time,
        )

    block = MemoryBlock(
        None,
        (
            chapter(1, "Wednesday, 31 October 2018"),
            chapter(11, "Wednesday, 31 October 2018"),
            chapter(21, "Friday, 2 November 2018"),
            chapter(31, None),
            chapter(41, "Friday, 2 November 2018"),
            chapter(51, "Wednesday, 31 October 2018"),  # a flashback: said again
        ),
    )
    text = block.render()
    labels = [line for line in text.splitlines() if line.startswith("#")]
    assert labels == [
        "## Chapters",  # one heading for them all
        "#1-#10, Wednesday, 31 October 2018:",
        "#11-#20:",
        "#21-#30, Friday, 2 November 2018:",
        "#31-#40:",
        "#41-#50:",
        "#51-#60, Wednesday, 31 October 2018:",
    ]
