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
