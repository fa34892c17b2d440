"""Recall's compact forms (memory/recall_forms.py) and its three-pass choice within the budget
(memory/recall.py): the pieces of a message that hold the query's words, marked where text is
left out, and as many hits as the budget holds before any is quoted whole."""

from __future__ import annotations

from kotonia_tui.domain import Role
from kotonia_tui.memory.recall import ArchivedLine, Candidate, Form, select
from kotonia_tui.memory.recall_forms import (
    GAP,
    PIECE_CHARS,
    PIECE_WORDS,
    asks,
    compact,
    piece_spans,
)
from kotonia_tui.terms import recall_terms

STORY = (
    "It was a long night at the station. "
    "The wind was up and the bell rang twice before dawn, and I sat by the lamp thinking of "
    "the old days on the water when I was young and foolish. "
    "My brother drowned near the point in 1887. "
    "Then I slept until the gulls woke me."
)


def pieces(text: str) -> list[str]:
    return [text[a:b] for a, b in piece_spans(text)]


def test_pieces_are_sentences_cut_into_even_parts_of_at_most_sixteen_words() -> None:
    found = pieces(STORY)
    assert found[0] == "It was a long night at the station."
    # The second sentence has 31 words: two parts of 16 and 15, nothing lost between them.
    assert [len(p.split()) for p in found[1:3]] == [16, 15]
    assert " ".join(found[1:3]) in STORY
    assert found[3] == "My brother drowned near the point in 1887."
    assert all(len(p.split()) <= PIECE_WORDS for p in found)
    assert " ".join(found) == STORY


def test_text_without_spaces_is_cut_into_parts_of_at_most_48_characters() -> None:
    text = "東京でお茶を飲んだ。" + "あ" * 100 + "。猫の名前はモチです。"
    found = pieces(text)
    assert found[0] == "東京でお茶を飲んだ。"
    assert found[-1] == "猫の名前はモチです。"
    assert all(len(p) <= PIECE_CHARS for p in found)
    assert "".join(found) == text  # every character in one piece, in order
    forms = compact(text, recall_terms("猫の名前"))
    assert forms.least == f"{GAP} 猫の名前はモチです。"


def test_the_short_form_holds_every_matched_word_and_says_where_text_is_left_out() -> None:
    forms = compact(STORY, recall_terms("the bell and your brother"))
    # Each piece with the rest of its sentence (the 31-word sentence is two pieces).
    assert forms.short == (
        f"{GAP} The wind was up and the bell rang twice before dawn, and I sat by the lamp "
        "thinking of the old days on the water when I was young and foolish. "
        f"My brother drowned near the point in 1887. {GAP}"
    )
    # The wide form adds the pieces before and after each, PIECE_WORDS words on each side at
    # least: an answer often sits beside its question's words.
    assert compact(STORY, recall_terms("a long night")).wide == (
        "It was a long night at the station. The wind was up and the bell rang twice before "
        f"dawn, and I sat by the {GAP}"
    )
    # The least form is the one piece holding the most: a number weighs more than a word.
    assert compact(STORY, recall_terms("the bell in 1887")).least == (
        f"{GAP} My brother drowned near the point in 1887. {GAP}"
    )
    # (The piece before 1887 has 15 words: the one before it comes too.)
    assert compact(STORY, recall_terms("in 1887")).wide == (
        f"{GAP} The wind was up and the bell rang twice before dawn, and I sat by the lamp "
        "thinking of the old days on the water when I was young and foolish. "
        "My brother drowned near the point in 1887. Then I slept until the gulls woke me."
    )
    # Short lines are taken until as many words are beside the matched one.
    chat = "ok\nsure\nthe smith fieldhouse mostly\nbig place\nI like the gym there a lot\nbye"
    assert compact(chat, recall_terms("gym")).wide == chat
    # Other forms of a word count ("drowning" holds "drowned").
    assert "drowned" in compact(STORY, recall_terms("drowning")).least
    # A line that matches no word (a reply brought along) is its first piece.
    assert compact(STORY, recall_terms("lighthouse")).least == (
        f"It was a long night at the station. {GAP}"
    )
    # A line of one piece is its own compact form.
    assert compact("Never rum in my tea.", recall_terms("rum")).short == "Never rum in my tea."
    assert compact("Rum. Never in my tea.", recall_terms("rum")).short == f"Rum. {GAP}"


# A made-up chat: the words a question shares with a message and the words that answer it are
# in the same long sentence past a piece's 16 words, or in the sentence before.
CHAT = (
    "ok so I finally went back to that old club meeting on campus last night with my roommate "
    "and honestly the only reason I stayed was the free pizza they handed out at the end. "
    "Also my cousin Marguerite sent me a recipe. "
    "She swears by it. "
    "It is the lemon tart from her bakery in Quimper. "
    "I tried making the tart on Sunday and it was a disaster lol."
)


def test_a_quoted_piece_comes_with_its_sentence_and_the_answer_beside_it() -> None:
    # "Why did I stay at the club meeting?" -> the reason ends the sentence, past 16 words.
    assert pieces(CHAT)[0].split()[-1] != "pizza"  # the piece alone would leave it out
    least = compact(CHAT, recall_terms("Why did you stay at the club meeting?")).least
    assert "the free pizza they handed out at the end." in least
    assert least.startswith("ok so I finally went back") and least.endswith(GAP)
    # "Which tart did you try making?" -> the sentence that names it is the one before.
    forms = compact(CHAT, recall_terms("Which tart did you try making on Sunday?"))
    assert forms.least == f"{GAP} I tried making the tart on Sunday and it was a disaster lol."
    assert "the lemon tart from her bakery in Quimper" in forms.wide
    assert "free pizza" not in forms.wide  # only the sentences beside it


def test_a_reply_to_a_question_is_quoted_with_its_opening_where_the_answer_is() -> None:
    """The question "Which gym do you go to?" was answered "yeah just the smith fieldhouse",
    and the lines after it held more of a later question's words: the short and wide forms
    quoted those and left the answer out. A reply to a question keeps its opening."""
    asked = "I only went once this week.\nWhich gym do you go to? Just the BYU one?"
    reply = (
        "yeah just the smith fieldhouse\n"
        "I kind of want to see if I could get a membership at VASA though because it's nearby "
        "and the fieldhouse gym is always so crowded whenever I go\n"
        "where do you go when you go to the gym?\n"
        "and like what stuff do you normally do there?"
    )
    terms = recall_terms("Which gym does Sam go to?")
    plain = compact(reply, terms)
    assert "smith fieldhouse" not in plain.short and "smith fieldhouse" not in plain.wide
    assert "where do you go when you go to the gym?" in plain.short
    answered = compact(reply, terms, answers=True)
    for form in (answered.short, answered.wide):
        assert form.startswith("yeah just the smith fieldhouse")
        assert "where do you go when you go to the gym?" in form  # what it matched, still
    assert answered.least == plain.least  # the least form stays one piece
    assert asks(asked) and asks("Where? Tell me.\nWhen do you graduate from byu? ")
    assert asks("いつ卒業するの？")
    assert asks('"Where are you going?" *She tilts her head.*')  # narration after it
    assert asks("Tea? `She will say no.` (quietly)")
    assert not asks("*She asks nothing.*")
    assert not asks("Which gym? I asked him.\nHe never said.")  # the question was not last
    assert not asks("")


def test_the_best_piece_holds_the_rarest_words_not_the_most() -> None:
    text = "We walked down to the harbour that day. Later my uncle sold his old harpoon."
    terms = recall_terms("Which day did you walk to the harpoon shop?")
    # Counted alike, two common words beat one rare one.
    assert compact(text, terms).least == f"We walked down to the harbour that day. {GAP}"
    # Weighed by rarity in the archive (inverse document frequency), the rare one wins.
    rarity = {"day": 0.4, "walk": 0.6, "harpoon": 4.2, "shop": 1.0}
    assert compact(text, terms, rarity=rarity).least == (
        f"{GAP} Later my uncle sold his old harpoon."
    )


def test_the_best_piece_is_judged_with_its_sentence() -> None:
    """Two sentences hold the same words; the shorter sentence wins, not the shorter piece (a
    fragment of a long sentence that holds the words but not what happened)."""
    text = (
        "That reminds me of a story. Mia and I went to Lyon once in the spring and we ate the "
        "best crepes. Then later when we told her parents all about the long trip south, her "
        "dad said that Mia hates crepes."
    )
    least = compact(text, recall_terms("Where did Mia eat crepes?")).least
    assert least == (
        f"{GAP} Mia and I went to Lyon once in the spring and we ate the best crepes. {GAP}"
    )


def forms_line(number: int, role: Role, text: str, query: str) -> ArchivedLine:
    """An archived line with its forms, a token a word (the engine counts in chat/recall.py)."""
    forms = compact(text, recall_terms(query))
    speaker = "Ann" if role is Role.USER else "Wren"

    def cost(shown: str) -> int:
        return len(f"{speaker}: {shown}".split())

    return ArchivedLine(
        100 + number,
        number,
        role,
        speaker,
        text,
        cost(text),
        short=forms.short,
        short_tokens=cost(forms.short),
        least=forms.least,
        least_tokens=cost(forms.least),
        wide=forms.wide,
        wide_tokens=cost(forms.wide),
    )


def filler(topic: str) -> str:
    return (
        f"We talked for a long while that evening about the {topic} and the harbour, "
        "the price of oil and the boats that came late, and the weather that would not "
        "settle for anyone. "
    )


def test_a_small_budget_carries_every_hit_in_a_compact_form_before_any_whole() -> None:
    query = "Where is the key to the cellar and who has the lantern?"
    hits = [
        (10, "The key hangs by the cellar door. " + filler("tides") * 2),
        (40, filler("nets") + "Piet has the lantern now, he took it on Sunday. " + filler("nets")),
        (70, filler("gulls") * 2 + "The cellar floods at spring tide."),
    ]
    candidates = []
    for number, text in hits:
        line = forms_line(number, Role.CHARACTER, text, query)
        question = forms_line(number - 1, Role.USER, "What did you do today?", query)
        reply = forms_line(number + 1, Role.USER, "That sounds like a long day.", query)
        candidates.append(Candidate(line, question, None, following=reply))
    whole = sum(c.line.tokens for c in candidates)
    budget = 120
    assert whole > budget
    recall = select(
        candidates,
        recall_terms(query),
        memory_text="",
        budget=budget,
        header_tokens=20,
        marker_tokens=5,
    )
    # Every hit is quoted, with the sentence that holds its words; nothing over the budget.
    assert {110, 140, 170} <= set(recall.message_ids)
    text = recall.render()
    assert "The key hangs by the cellar door." in text
    assert "Piet has the lantern now, he took it on Sunday." in text
    assert "The cellar floods at spring tide." in text
    assert recall.left_out == ()
    lines = [line for excerpt in recall.excerpts for line in excerpt.lines]
    markers = 5 * len(recall.excerpts)
    assert 20 + sum(line.cost() for line in lines) + markers <= budget
    assert all(line.form is not Form.WHOLE for line in lines if line.message_id in (110, 140))
    # Pass 2: the best hit brings the message after it.
    assert 111 in recall.message_ids
    # With room for all of it, every line is quoted whole.
    roomy = select(
        candidates,
        recall_terms(query),
        memory_text="",
        budget=10_000,
        header_tokens=20,
        marker_tokens=5,
    )
    assert all(line.form is Form.WHOLE for e in roomy.excerpts for line in e.lines)
    assert all(hit[1] in roomy.render() for hit in hits)
    # Each hit with the line it answered and the message after it.
    assert sorted(roomy.message_ids) == [109, 110, 111, 139, 140, 141, 169, 170, 171]
