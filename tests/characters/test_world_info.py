"""World Info files (SillyTavern's format) and lore chosen from several books in one budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kotonia_tui.characters import BookToMatch, select_from_books
from kotonia_tui.characters.errors import FieldError
from kotonia_tui.characters.world_info import parse_world_info
from kotonia_tui.chat.lore import WorldInfoError, WorldInfoFolder

ST_BOOK = {
    "entries": {
        "0": {
            "uid": 0,
            "key": ["dragon", "wyrm"],
            "keysecondary": [],
            "comment": "Dragons",
            "content": "Dragons sleep under the mountain.",
            "constant": False,
            "selective": True,
            "selectiveLogic": 0,
            "order": 100,
            "position": 0,
            "disable": False,
            "probability": 100,
            "useProbability": True,
            "depth": 4,
            "caseSensitive": None,
            "matchWholeWords": None,
            "scanDepth": None,
        },
        "1": {
            "uid": 1,
            "key": ["Captain"],
            "keysecondary": ["ship"],
            "comment": "The captain",
            "content": "The captain lost her ship.",
            "selective": True,
            "selectiveLogic": 2,
            "order": 50,
            "caseSensitive": True,
            "matchWholeWords": False,
            "scanDepth": 1,
        },
        "2": {"uid": 2, "key": ["x"], "content": "Off.", "disable": True},
        "3": {"uid": 3, "key": [], "content": "Always there.", "constant": True, "order": 1},
    }
}


def _words(text: str) -> int:
    return len(text.split())


def _fired(book, texts, budget=1000):
    selection = select_from_books([BookToMatch("w.json", book)], texts, _words, budget)
    return {f.label: (f.keys, f.sent) for f in selection.fired}


def test_sillytavern_fields_are_read_and_the_rest_kept() -> None:
    book = parse_world_info(ST_BOOK, "w")
    dragons, captain, off, constant = book.entries
    assert dragons.keys == ["dragon", "wyrm"] and dragons.name == "Dragons"
    assert dragons.insertion_order == 100 and dragons.id == 0
    assert dragons.extensions["depth"] == 4 and dragons.extensions["probability"] == 100
    assert captain.case_sensitive is True and captain.match_whole_words is False
    assert captain.scan_depth == 1
    assert off.enabled is False and constant.constant is True
    assert book.name == "w"


def test_keys_secondary_logic_and_constants_are_reported() -> None:
    book = parse_world_info(ST_BOOK, "w")
    fired = _fired(book, ["A wyrm flew over.", "The Captain waved."])
    assert fired == {
        "Dragons": (("wyrm",), True),
        "The captain": (("Captain",), True),  # NOT ANY: "ship" is absent
        "Always there.": ((), True),
    }
    # NOT ANY: the secondary key present stops it; case-sensitive: "captain" is not "Captain".
    assert "The captain" not in _fired(book, ["The Captain's ship sank."])
    assert "The captain" not in _fired(book, ["the captain waved."])
    # scan depth 1: only the newest message is scanned for the captain
    assert "The captain" not in _fired(book, ["The Captain waved.", "Hello."])


def test_one_budget_across_books_and_a_books_own_budget() -> None:
    first = parse_world_info({"entries": {"0": {"key": ["a"], "content": "one two three"}}})
    second = parse_world_info(
        {"entries": {"0": {"key": ["a"], "content": "four five six seven", "order": 1}}}
    )
    books = [BookToMatch("one.json", first), BookToMatch("two.json", second)]
    selection = select_from_books(books, ["a"], _words, 5)
    assert [(f.book, f.sent) for f in selection.fired] == [("two.json", True), ("one.json", False)]
    assert selection.tokens == 4 and selection.budget == 5
    capped = second.model_copy(update={"token_budget": 2})
    selection = select_from_books([BookToMatch("two.json", capped)], ["a"], _words, 100)
    assert [f.sent for f in selection.fired] == [False]


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], "expected an object with entries, got list"),
        ({"entries": 3}, "entries: expected an object of entries, got int"),
        ({"entries": {"7": {"key": "dragon"}}}, "entries.7.key: expected a list of strings"),
        ({"entries": {"7": {"key": ["a"], "content": 5}}}, "entries.7.content: expected a string"),
        ({"entries": {"7": {"key": ["a"], "selectiveLogic": 9}}}, "entries.7.selectiveLogic"),
    ],
)
def test_a_wrong_field_is_named(obj: object, message: str) -> None:
    with pytest.raises(FieldError) as err:
        parse_world_info(obj)
    assert message in str(err.value)


def test_a_character_book_shaped_file_is_read_too() -> None:
    book = parse_world_info({"name": "Lore", "entries": [{"keys": ["k"], "content": "c"}]}, "f")
    assert (book.name, book.entries[0].keys) == ("Lore", ["k"])


def test_the_folder_lists_reads_once_and_names_a_broken_file(tmp_path: Path) -> None:
    folder = WorldInfoFolder(tmp_path / "worlds")
    assert folder.names() == []
    (tmp_path / "worlds").mkdir()
    (tmp_path / "worlds" / "b.json").write_text(json.dumps(ST_BOOK), encoding="utf-8")
    (tmp_path / "worlds" / "A.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "worlds" / "notes.txt").write_text("x", encoding="utf-8")
    assert folder.names() == ["A.json", "b.json"]
    assert folder.load("b.json") is folder.load("b.json")  # read once while unchanged
    with pytest.raises(WorldInfoError, match=r"A\.json: not valid JSON \(line 1 column 2"):
        folder.load("A.json")
    with pytest.raises(WorldInfoError, match="not a file name"):
        folder.load("../b.json")
    with pytest.raises(WorldInfoError, match=r"missing\.json: cannot be read"):
        folder.load("missing.json")
