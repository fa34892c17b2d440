"""Which lorebook entries a turn gets, and within what budget."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kotonia_tui.characters import Lorebook, LoreEntry, render_lore, select_entries
from kotonia_tui.characters.lorebook import parse_lorebook
from kotonia_tui.config import load_settings
from kotonia_tui.memory.budgets import Budgets


def words(text: str) -> int:
    return len(text.split())


def book(*entries: dict, **fields) -> Lorebook:
    return parse_lorebook({"entries": list(entries), **fields}, "data.character_book")


def chosen(lore: Lorebook, texts: list[str], budget: int = 1000, **kw) -> list[str]:
    return [e.content for e in select_entries(lore, texts, words, budget, **kw).entries]


def test_constant_entries_always_and_keyed_only_when_mentioned():
    lore = book(
        {"keys": [], "constant": True, "content": "always"},
        {"keys": ["harbour"], "content": "harbour lore"},
    )
    assert chosen(lore, ["Nothing here."]) == ["always"]
    assert chosen(lore, ["We walked to the harbour."]) == ["always", "harbour lore"]
    assert chosen(lore, ["We walked to the harbour."], include_constant=False) == ["harbour lore"]


def test_disabled_and_empty_entries_never_come():
    lore = book(
        {"keys": ["a"], "enabled": False, "content": "off"},
        {"keys": ["a"], "content": "   "},
        {"keys": [""], "content": "empty key"},
    )
    assert chosen(lore, ["a a a"]) == []


def test_keys_ignore_case_unless_case_sensitive():
    lore = book(
        {"keys": ["Mira"], "content": "loose"},
        {"keys": ["Mira"], "case_sensitive": True, "content": "strict"},
    )
    assert chosen(lore, ["mira waved"]) == ["loose"]
    assert chosen(lore, ["Mira waved"]) == ["loose", "strict"]


def test_whole_words_by_default_and_substrings_when_turned_off():
    lore = book(
        {"keys": ["cat"], "content": "whole"},
        {"keys": ["cat"], "extensions": {"match_whole_words": False}, "content": "partial"},
    )
    assert chosen(lore, ["A new category."]) == ["partial"]
    assert chosen(lore, ["The cat, asleep."]) == ["whole", "partial"]
    assert chosen(lore, ["cat"]) == ["whole", "partial"]


def test_japanese_and_chinese_keys_match_inside_sentences():
    lore = book({"keys": ["祖母"], "content": "ja"}, {"keys": ["父亲"], "content": "zh"})
    assert chosen(lore, ["私の祖母は本が好きでした。"]) == ["ja"]
    assert chosen(lore, ["你父亲去哪儿了？"]) == ["zh"]


def test_selective_entries_need_a_secondary_key_too():
    lore = book(
        {"keys": ["Tobias"], "secondary_keys": ["Crane"], "selective": True, "content": "name"}
    )
    assert chosen(lore, ["Tobias is a common name."]) == []
    assert chosen(lore, ["Are you Tobias Crane?"]) == ["name"]
    # Not selective: secondary keys are not required.
    plain = book({"keys": ["Tobias"], "secondary_keys": ["Crane"], "content": "plain"})
    assert chosen(plain, ["Tobias?"]) == ["plain"]


def test_regex_keys():
    lore = book({"keys": [r"\bstars?\b"], "use_regex": True, "content": "stars"})
    assert chosen(lore, ["Can you read the STARS?"]) == ["stars"]
    assert chosen(lore, ["She started to cry."]) == []


def test_bad_regex_cannot_be_built():
    with pytest.raises(ValidationError, match="regular expression"):
        LoreEntry(keys=["[oops"], use_regex=True, content="x")


def test_scan_depth_limits_how_far_back_keys_are_seen():
    lore = book({"keys": ["storm"], "content": "storm lore"}, scan_depth=2)
    history = ["A storm came.", "It passed.", "Quiet now."]
    assert chosen(lore, history) == []
    assert chosen(lore, [*history[:2], "Another storm?"]) == ["storm lore"]
    per_entry = book(
        {"keys": ["storm"], "content": "deep", "extensions": {"scan_depth": 3}}, scan_depth=1
    )
    assert chosen(per_entry, history) == ["deep"]
    zero = book({"keys": ["storm"], "content": "never"}, scan_depth=0)
    assert chosen(zero, ["storm"]) == []


def test_results_come_in_insertion_order():
    lore = book(
        {"keys": ["x"], "content": "third", "insertion_order": 30},
        {"keys": ["x"], "content": "first", "insertion_order": 10, "priority": 1},
        {"keys": [], "constant": True, "content": "second", "insertion_order": 20},
    )
    assert chosen(lore, ["x"]) == ["first", "second", "third"]


def test_budget_skips_whole_entries_and_reports_them():
    lore = book(
        {"keys": [], "constant": True, "content": "one two three", "insertion_order": 9},
        {"keys": ["x"], "content": "a b c d e f", "priority": 5, "insertion_order": 1},
        {"keys": ["x"], "content": "g h", "priority": 1, "insertion_order": 2},
        {"keys": ["x"], "content": "big big big big big big big", "insertion_order": 3},
    )
    selection = select_entries(lore, ["x"], words, 11)
    # Constant first (3), then priority 5 (6), then the 2-word entry; the 7-word one is skipped.
    assert [e.content for e in selection.entries] == ["a b c d e f", "g h", "one two three"]
    assert [e.content for e in selection.skipped] == ["big big big big big big big"]
    assert selection.tokens == 11


def test_at_equal_priority_the_entry_keyed_by_the_newest_message_goes_first():
    """The greeting names the forest and the glade; the user asks about the beasts: with room
    for one entry, it is the one the question is about, whatever the insertion order."""
    lore = book(
        {"keys": ["forest"], "content": "forest lore here", "insertion_order": 1},
        {"keys": ["glade"], "content": "glade lore here", "insertion_order": 2},
        {"keys": ["beasts"], "content": "beast lore here", "insertion_order": 3},
    )
    texts = ["You rest in my glade, deep in the forest.", "What are the beasts?"]
    selection = select_entries(lore, texts, words, 3)
    assert [e.content for e in selection.entries] == ["beast lore here"]
    assert [e.content for e in selection.skipped] == ["forest lore here", "glade lore here"]
    # Older mentions keep their insertion order; a higher priority still goes first.
    assert chosen(lore, texts, 6) == ["forest lore here", "beast lore here"]
    first = book(
        {"keys": ["forest"], "content": "forest lore here", "priority": 5},
        {"keys": ["beasts"], "content": "beast lore here"},
    )
    assert chosen(first, texts, 3) == ["forest lore here"]


def test_the_books_own_token_budget_also_applies():
    lore = book({"keys": ["x"], "content": "a b c"}, token_budget=2)
    selection = select_entries(lore, ["x"], words, 100)
    assert selection.entries == ()
    assert len(selection.skipped) == 1


def test_recursive_scanning_follows_entry_contents():
    entries = (
        {"keys": ["harbour"], "content": "The harbour has a lighthouse."},
        {"keys": ["lighthouse"], "content": "The lighthouse keeper is Mira."},
        {"keys": ["Mira"], "content": "Mira hums.", "extensions": {"exclude_recursion": True}},
    )
    assert chosen(book(*entries), ["The harbour!"]) == ["The harbour has a lighthouse."]
    assert chosen(book(*entries, recursive_scanning=True), ["The harbour!"]) == [
        "The harbour has a lighthouse.",
        "The lighthouse keeper is Mira.",
    ]


def test_no_book_gives_an_empty_selection():
    selection = select_entries(None, ["anything"], words, 100)
    assert (selection.entries, selection.skipped) == ((), ())


def test_render_lore_joins_strips_decorators_and_applies_macros():
    entries = [
        LoreEntry(content="@@depth 4\n{{char}} fears storms."),
        LoreEntry(content="  <USER> owes {{char}} money.  "),
    ]
    assert render_lore(entries, char="Mira", user="Sam") == (
        "Mira fears storms.\n\nSam owes Mira money."
    )
    assert render_lore(entries) == "{{char}} fears storms.\n\n<USER> owes {{char}} money."


def card_shaped_book() -> Lorebook:
    """A book shaped like the bundled default card of SillyTavern (Seraphina's): four keyed
    entries at the same order and priority, each with a few keys, of 365, 207, 218 and 158
    tokens (as measured on the embedded default's tokenizer: 948 in all). Written here by
    code; `words` counts one token per word."""

    def body(topic: str, tokens: int) -> str:
        return " ".join(f"{topic}{i}" for i in range(tokens))

    shapes = (
        (["mirewood", "wood", "forest"], "place", 365),
        (["thornmaw", "beast", "beasts", "monster"], "creature", 207),
        (["hollow", "refuge", "safe haven"], "refuge", 218),
        (["power", "magic", "ability"], "power", 158),
    )
    return book(
        *(
            {"keys": keys, "content": body(topic, tokens), "insertion_order": 100, "name": topic}
            for keys, topic, tokens in shapes
        )
    )


def test_the_default_lore_budget_carries_a_real_cards_book_at_8192():
    """The greeting names the forest, the beasts and the refuge; the user asks about the
    beasts: at n_ctx 8,192 the default budget sends the entry asked about, and holds the whole
    book when every entry fires (the old default, 5%: 409 tokens, left the beasts out)."""
    lore = card_shaped_book()
    budget = Budgets.for_window(8192, 256, load_settings()).lore
    greeting = "You woke in the forest where the beasts found you; rest in my refuge now."
    asked = select_entries(lore, [greeting, "What are the thornmaw beasts?"], words, budget)
    assert "creature" in [e.name for e in asked.entries]
    every = select_entries(lore, [greeting, "Is it magic, or a power of yours?"], words, budget)
    assert [e.name for e in every.entries] == ["place", "creature", "refuge", "power"]
    assert every.skipped == () and every.tokens == 948
