"""The term module's rules (kotonia_tui/terms.py): scripts from Unicode data, tokens, folding,
numbers, names, content words and the shared start."""

from __future__ import annotations

import pytest

from kotonia_tui import terms


@pytest.mark.parametrize(
    "char",
    [
        "ก",  # Thai
        "ລ",  # Lao
        "ក",  # Khmer
        "မ",  # Myanmar
        "ᦀ",  # New Tai Lue
        "東",  # Han
        "\U00020bb7",  # Han, extension B
        "\U00031350",  # Han, extension H (past the ranges the modules used to list)
        "あ",  # Hiragana
        "ア",  # Katakana
        "ｱ",  # half-width Katakana
        "ー",  # the prolonged sound mark (a Common character kana share)
        "\u0e34",  # a Thai vowel sign (a mark, part of the run)
    ],
)
def test_scripts_written_without_spaces_are_unspaced(char: str) -> None:
    assert terms.is_unspaced_char(char)
    assert not terms.is_spaced_word_char(char)
    code = ord(char)
    assert any(low <= code <= high for low, high in terms.unspaced_ranges())


@pytest.mark.parametrize(
    "char",
    ["a", "é", "ж", "α", "अ", "\u093f", "ا", "א", "한", "1", "١", "\u0301", "\u02bc"],
)
def test_scripts_that_space_their_words_are_not(char: str) -> None:
    # Korean spaces its words; a combining accent and the modifier apostrophe are Latin's too.
    assert not terms.is_unspaced_char(char)
    assert terms.is_spaced_word_char(char)
    code = ord(char)
    assert not any(low <= code <= high for low, high in terms.unspaced_ranges())


def test_tokens_keep_marks_inside_words_and_split_where_scripts_meet() -> None:
    assert terms.tokens("東京でiPhoneを買った") == ["東京で", "iPhone", "を買った"]
    assert terms.tokens("हिन्दी भाषा, sister's") == ["हिन्दी", "भाषा", "sister", "s"]
    assert terms.tokens("猫の名前 cat", unspaced_gram=1) == ["猫", "の", "名", "前", "cat"]
    assert terms.tokens("猫の名前", unspaced_gram=2) == ["猫の", "の名", "名前"]


def test_folding_is_the_index_s_case_and_latin_accents() -> None:
    assert terms.fold("Café ÉCOLE Việt") == "cafe ecole viet"
    assert terms.fold("Cafe\u0301") == "cafe"  # written decomposed
    assert terms.fold("МОСКВА") == "москва"
    assert terms.fold("Αθήνα") == "αθήνα"  # the index keeps Greek accents: so does the fold


def test_numbers_with_separators_in_any_digits_and_whole() -> None:
    assert terms.numbers("at 14:30, 3.50 each, ٣٠٠ or ३०० in all") == [
        "14:30",
        "3.50",
        "300",
        "300",
    ]
    assert terms.holds_number("it costs 40.", "40")
    assert not terms.holds_number("it costs 140", "40")
    assert not terms.holds_number("it costs 3.40", "40")


def test_names_are_capitals_inside_a_sentence_in_any_cased_script() -> None:
    text = "Then Ann met O'Brien. Later Ольга came; Ann stayed."
    assert [name for _, name in terms.names(text)] == ["Ann", "O'Brien", "Ольга", "Ann"]
    assert terms.names("猫の名前はモチ。") == []


def test_a_word_after_an_opening_mark_is_a_sentence_start_not_a_name() -> None:
    # A role-play line opens with quotes, backticks, a dialogue dash or markup: its first word
    # is capitalized for the sentence, and weighed as a name it outweighed the story's nouns.
    for line in ("`Stupid.", "— Twice, he said.", "– Twice.", "'Stupid,' he said.", "‘Fine.’"):
        assert terms.names(line) == [], line
    assert terms.names("「Hello」 「Soot」") == []
    assert terms.names("_Quiet_ now, Soot.") == [(13, "Soot")]
    # A name capitalized inside a sentence as well stays a name at a sentence's start.
    assert [w for _at, w in terms.names("— Corwin nods. The keeper, Corwin, waits.")] == [
        "Corwin",
        "Corwin",
    ]


def test_content_leaves_out_names_common_and_short_words() -> None:
    found = terms.content("Mara tells Piet that her sister Ilse marries on the 14th", ["Mara"])
    assert found.words == ("piet", "sister", "ilse", "marries")
    assert found.numbers == ("14",)
    found = terms.content("妹のイルセが結婚", ["イルセ"])
    assert found.grams == ("妹の", "が結", "結婚")
    # Grading leaves out only the articles.
    assert terms.content("the user", stop_words=terms.ARTICLES).words == ("user",)


def test_the_same_word_shares_its_start() -> None:
    assert terms.same_word("marries", "married")
    assert terms.same_word("학교에", "학교")  # a particle after the noun
    assert not terms.same_word("umbrella", "umbrage")
    assert not terms.same_word("학교", "학생")
    assert not terms.same_word("cat", "catalogue")  # too short to stand for a stem


def test_the_same_word_ends_within_a_few_letters_of_the_shared_start() -> None:
    # A stem of four letters is the shorter word whole; the longer may add an ending of up to
    # MAX_ENDING letters.
    assert terms.same_word("walk", "walked") and terms.same_word("walk", "walking")
    assert terms.same_word("walk", "walkers")  # four letters past "walk"
    assert not terms.same_word("walk", "walkabout")  # five: another word
    # A longer shared start (STEM letters) still bounds the ending.
    assert terms.same_word("light", "lights") and terms.same_word("lighter", "lights")
    assert not terms.same_word("light", "lighthouse")
    assert not terms.same_word("lighthouse", "lighter")
    # Four shared letters are not a stem for two longer words.
    assert not terms.same_word("walked", "walking")
    assert not terms.same_word("storm", "story")


def test_stem_forms_take_common_endings_off_and_keep_a_stem_of_four_letters() -> None:
    assert terms.stem_forms("walked") == ("walked", "walk")
    assert terms.stem_forms("married") == ("married", "marry", "marri")
    assert terms.stem_forms("lights") == ("lights", "light")
    assert terms.stem_forms("cats") == ("cats",)  # "cat" is too short to be a stem
    assert terms.stem_forms("14th") == ("14th",)
    # Through its stem, a form finds the others that plain prefixes would not.
    assert terms.same_stem("walking", "walked") and terms.same_stem("walks", "walked")
    assert terms.same_stem("marry", "married") and terms.same_stem("marries", "married")
    assert not terms.same_stem("lighthouse", "lights")
    assert not terms.same_stem("walkabout", "walked")


def test_recall_terms_are_the_content_words_and_numbers_without_the_speakers() -> None:
    found = terms.recall_terms("What did Mara tell Corwin about the rum in her tea on day 3?")
    assert [t.text for t in found] == ["Mara", "Corwin", "rum", "tea", "day", "3"]
    ignored = terms.recall_terms(
        "What did Mara tell Corwin about the rum?", ignore=["Mara Lind", "Corwin"]
    )
    assert [t.text for t in ignored] == ["rum"]
    assert terms.recall_terms("Do you remember what I said?") == []
    # Unspaced runs become pairs of characters; names apply to spaced words.
    assert [t.text for t in terms.recall_terms("猫の名前は?")] == ["猫の", "の名", "名前", "前は"]


def test_name_words_are_capitalised_inside_a_sentence_or_known() -> None:
    text = "Yesterday I met Piet Vos at the harbour. He fixed the bell for corwin."
    assert terms.name_words(text) == {"piet", "vos"}
    known = terms.name_words(text, known=["Corwin Hale", "Ilse"])
    assert known == {"piet", "vos", "corwin"}


def test_a_searchable_text_holds_other_forms_of_a_word_not_longer_words() -> None:
    found = terms.Searchable.of("She was walking to the lighthouse.")
    assert found.holds(terms.Term("walked", False)) and found.holds(terms.Term("Walk", False))
    assert not found.holds(terms.Term("light", False))
