"""Full-text search: English words, Japanese and Chinese substrings, kept in step by the store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kotonia_tui import terms
from kotonia_tui.domain import Alternative, Conversation, Message, Role
from kotonia_tui.store import SearchOrder, Store
from kotonia_tui.store.migrations import (
    SCHEMA_VERSION,
    _search_and_chat_settings,
    _search_by_script,
)
from kotonia_tui.store.search import SHORT_TERM_EXPANSION

from .conftest import new_conversation, stored_before


def _say(store: Store, conv_id: int, *texts: str) -> list[int]:
    return store.add_messages(
        conv_id,
        [Message(role=Role.USER, speaker="Ann", text=text) for text in texts],
    )


def _found(store: Store, query: str, **kwargs: object) -> list[int]:
    return [hit.message_id for hit in store.search(query, **kwargs)]  # type: ignore[arg-type]


def test_english_words_match_at_their_start_ignoring_case_and_accents(store: Store) -> None:
    conv = new_conversation(store)
    light, _delight, cafe, both = _say(
        store,
        conv.id,
        "The Lighthouse keeper smiled.",
        "What a delight.",
        "A café au lait, please.",
        "The lighthouse café at night.",
    )
    assert sorted(_found(store, "light")) == [light, both]  # not "delight"
    assert sorted(_found(store, "CAFE")) == [cafe, both]
    assert _found(store, "lighthouse cafe") == [both]  # every term
    assert _found(store, "lighthouse kettle") == []


def test_japanese_and_chinese_match_as_substrings_of_any_length(store: Store) -> None:
    conv = new_conversation(store)
    tokyo, cat_end, cat_only, beijing, iphone = _say(
        store,
        conv.id,
        "東京に行った。",
        "かわいい猫",  # the term is the last character: no trigram starts with it unpadded
        "猫",  # a message of one character
        "我们明天去北京吧",
        "東京でiPhoneを買った",
    )
    assert sorted(_found(store, "東京")) == [tokyo, iphone]
    assert _found(store, "東京に") == [tokyo]
    assert _found(store, "京に行") == [tokyo]  # inside a word: Japanese has no spaces
    assert sorted(_found(store, "猫")) == [cat_end, cat_only]
    assert _found(store, "北京") == [beijing]
    assert _found(store, "去北京吧") == [beijing]
    assert _found(store, "iphone") == [iphone]  # a Latin word written inside Japanese
    assert _found(store, "東京 iphone") == [iphone]
    assert _found(store, "大阪") == []


def test_a_very_common_short_term_is_scanned_and_still_found_exactly(store: Store) -> None:
    conv = new_conversation(store)
    # More distinct trigrams begin with "の" than the vocabulary lookup takes.
    kanji = [chr(0x4E00 + i) for i in range(SHORT_TERM_EXPANSION + 20)]
    filler = _say(store, conv.id, *(f"{k}の{k}" for k in kanji))
    other = new_conversation(store, "other")
    (mine,) = _say(store, other.id, "私の猫")
    assert len(_found(store, "の", limit=1000)) == len(filler) + 1
    assert _found(store, "の", conversation_id=other.id) == [mine]


def test_the_index_follows_edits_versions_deletes_and_imports(store: Store) -> None:
    conv = new_conversation(store)
    (edited, deleted) = _say(store, conv.id, "The owl hooted.", "A secret password: swordfish.")
    store.update_message_text(edited, "The raven croaked.", [])
    assert _found(store, "owl") == []
    assert _found(store, "raven") == [edited]

    reply = store.add_message(
        Message(conversation_id=conv.id, role=Role.CHARACTER, speaker="Sera", text="Version one")
    )
    store.add_alternative(reply.id, Alternative(text="Version two 灯台"), choose=True)
    assert _found(store, "two") == [reply.id]
    assert _found(store, "灯台") == [reply.id]
    store.choose_alternative(reply.id, 0)
    assert _found(store, "two") == [] and _found(store, "灯台") == []
    assert _found(store, "one") == [reply.id]

    store.delete_message(deleted)
    assert _found(store, "swordfish") == []

    imported = store.import_conversation(
        Conversation(character_key="sera", character_name="Seraphina", persona_name="Ann"),
        [Message(role=Role.USER, speaker="Ann", text=f"imported line {i} 港") for i in range(5)],
    )
    assert len(_found(store, "imported")) == 5 == len(_found(store, "港"))
    store.delete_conversation(imported.id)
    assert _found(store, "imported") == [] and _found(store, "港") == []
    assert _fts_integrity(store.path) == []


def test_a_conversation_deleted_in_the_app_is_never_found_until_undone(store: Store) -> None:
    """Deleted in the app, a conversation stays stored until the session ends (undo): its
    messages must not be found, whatever the order or the limit, and come back with undo."""
    kept, hidden = new_conversation(store), new_conversation(store)
    old = _say(store, kept.id, "The lantern by the door.")
    newer = _say(store, hidden.id, *[f"lantern number {i} 灯台" for i in range(30)])
    assert set(newer) <= set(_found(store, "lantern", limit=100))
    store.hide_conversation(hidden.id)
    for order in SearchOrder:
        assert _found(store, "lantern", limit=1, order=order) == old
        assert _found(store, "lantern number", limit=5, order=order) == []
        assert _found(store, "灯台", limit=5, order=order) == []
    assert [h.message_id for h in store.recall(hidden.id, "lantern", newer[-1] + 1, 5)] == []
    store.unhide_conversation(hidden.id)
    assert _found(store, "lantern", limit=1, order=SearchOrder.NEWEST) == [newer[-1]]


def test_a_deleted_message_brought_back_by_undo_is_found_again(store: Store) -> None:
    conv = new_conversation(store)
    (gone,) = _say(store, conv.id, "The harbour bell rang twice.")
    stored = store.get_message(gone)
    store.delete_message(gone)
    assert _found(store, "harbour") == []
    store.restore_message(stored)
    assert _found(store, "harbour") == [gone]
    assert _fts_integrity(store.path) == []


def test_a_query_is_plain_text_never_query_syntax(store: Store) -> None:
    conv = new_conversation(store)
    (hit,) = _say(store, conv.id, 'She said "NEAR" and OR-ed the AND gate (col:1) *')
    for query in ['"NEAR"', "OR", "AND gate", "col:1", "*", "NEAR(", '"', "-", "^x"]:
        found = _found(store, query)
        assert found in ([hit], []), query
    assert _found(store, "OR-ed") == [hit]
    assert _found(store, "") == [] and _found(store, "  ...  ") == []


def test_search_bounded_to_a_conversation_and_ordered(store: Store) -> None:
    one, two = new_conversation(store), new_conversation(store, "other")
    first, _ = _say(store, one.id, "storm at sea", "calm sea")
    (theirs,) = _say(store, two.id, "storm storm storm")
    (last,) = _say(store, one.id, "another storm")
    assert _found(store, "storm", conversation_id=one.id, order=SearchOrder.NEWEST) == [
        last,
        first,
    ]
    assert set(_found(store, "storm")) == {first, theirs, last}
    assert _found(store, "storm")[0] == theirs  # three times in a short line ranks first
    assert len(_found(store, "storm", limit=2)) == 2


def test_recall_is_one_conversation_older_than_a_message_any_word_ranked(store: Store) -> None:
    conv, other = new_conversation(store), new_conversation(store, "other")
    _say(store, conv.id, *(f"filler line {i} about the weather" for i in range(300)))
    sister, both, jp = _say(
        store,
        conv.id,
        "My sister Hana lives by the harbor.",
        "Hana's cat is called Mochi, and my sister loves it.",
        "妹の猫はモチという名前です。",
    )
    (elsewhere,) = _say(store, other.id, "My sister's cat Mochi")
    (newer,) = _say(store, conv.id, "Mochi again, my sister said.")
    hits = store.recall(conv.id, "Do you remember my sister's cat Mochi?", newer, 5)
    ids = [h.message_id for h in hits]
    assert ids[0] == both  # shares the most words
    assert sister in ids and elsewhere not in ids and newer not in ids
    (best, *_) = store.recall(conv.id, "猫の名前は？", newer, 5)
    assert best.message_id == jp
    # "the" and "weather" are in nearly every message: they would fill the list with filler
    # lines and tell nothing apart, so recall leaves them out.
    hits = store.recall(conv.id, "Did the weather change, my sister?", newer, 5)
    assert {h.message_id for h in hits} == {sister, both}


def test_the_search_step_indexes_messages_stored_before_it(tmp_path: Path) -> None:
    path = tmp_path / "before.sqlite3"
    stored_before(path, _search_and_chat_settings, ["The old lighthouse", "古い灯台の鍵", "猫"])
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert _found(store, "lighthouse") == [1]
        assert _found(store, "灯台") == [2] and _found(store, "猫") == [3]
        store.update_message_text(2, "新しい灯台", [])
        assert _found(store, "古い") == [] and _found(store, "新しい") == [2]
        assert store.integrity_check() == "ok"
    assert _fts_integrity(path) == []


def _fts_integrity(path: Path) -> list[object]:
    """FTS5's own check that each index matches its content exactly (raises if not)."""
    raw = sqlite3.connect(path)
    try:
        rows: list[object] = []
        for table in ("message_words", "message_trigrams"):
            check = f"INSERT INTO {table}({table}) VALUES ('integrity-check')"
            rows += raw.execute(check).fetchall()
        return rows
    finally:
        raw.close()


def test_the_search_by_script_step_reindexes_messages_stored_before_it(tmp_path: Path) -> None:
    """Issue 29: marks inside words (Devanagari was cut at every vowel sign) and every unspaced
    script (Khmer, Myanmar were not in the trigram index), for messages stored before."""
    path = tmp_path / "before.sqlite3"
    texts = ["मेरी बहन सीमा दिल्ली पहुँचेगी", "បងស្រីឈ្មោះសុភា", "မာလာ ရန်ကုန်ကို", "The old lighthouse"]
    stored_before(path, _search_by_script, texts)
    with Store.open(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert _found(store, "सीमा") == [1] and _found(store, "दिल्ली") == [1]
        assert _found(store, "សុភា") == [2]  # a substring of a run written without spaces
        assert _found(store, "ရန်ကုန်") == [3]
        assert _found(store, "lighthouse") == [4]
        (hit,) = store.recall(1, "सीमा कब पहुँचेगी?", 5, 3)
        assert hit.message_id == 1
    assert _fts_integrity(path) == []


def test_the_index_holds_the_messages_the_term_module_calls_unspaced(store: Store) -> None:
    conv = new_conversation(store)
    samples = ["ก", "ລ", "ក", "မ", "東", "\U00020bb7", "\U00031350", "ー", "한", "é", "ж", "अ"]
    ids = _say(store, conv.id, *(f"x{char}" for char in samples))
    raw = sqlite3.connect(store.path)
    try:
        indexed = {row[0] for row in raw.execute("SELECT id FROM message_trigram_source")}
    finally:
        raw.close()
    assert {i for i, char in zip(ids, samples, strict=True) if terms.has_unspaced(char)} == indexed


def test_recall_finds_other_forms_of_a_word_through_the_vocabulary(store: Store) -> None:
    conv = new_conversation(store)
    walking, _lighthouse, lights, _walkabout = _say(
        store,
        conv.id,
        "We were walking along the cliffs.",
        "The lighthouse stands on the rock.",
        "The harbour lights came on.",
        "The walkabout was long.",
    )
    (newer,) = _say(store, conv.id, "newer")
    assert [h.message_id for h in store.recall(conv.id, "Where had we walked?", newer, 5)] == [
        walking
    ]
    # "light" is a form of "lights", not of "lighthouse".
    assert [h.message_id for h in store.recall(conv.id, "a light", newer, 5)] == [lights]
    # What recall says matched: the query's own word.
    assert [t.text for t in store.recall_terms("Where had we walked?")] == ["walked"]


def test_recall_leaves_out_the_speakers_names_and_question_words(store: Store) -> None:
    conv = new_conversation(store)
    _say(store, conv.id, *(f"Mara looks at Corwin, line {i}." for i in range(20)))
    (rum,) = _say(store, conv.id, "Mara: no rum in my tea, Corwin.")
    (newer,) = _say(store, conv.id, "newer")
    question = "What did Mara tell Corwin about the rum?"
    # With the names the question matches every line, ranked by the names alone.
    assert len(store.recall(conv.id, question, newer, 30)) == 21
    hits = store.recall(conv.id, question, newer, 30, ignore=["Mara Lind", "Corwin"])
    assert [h.message_id for h in hits] == [rum]
    assert store.recall(conv.id, "What did you say then?", newer, 5) == []


def test_recall_ranks_a_long_message_with_the_rarer_words_before_short_ones(store: Store) -> None:
    """BM25 alone ranks a short line holding one query word above a long one holding three
    (its length divides the score); recall ranks by how rare the words held are first."""
    conv = new_conversation(store)
    _say(store, conv.id, *(f"A grey morning, number {i}." for i in range(40)))
    filler = " ".join(f"The tide came in at dusk, day {i}." for i in range(30))
    (letter,) = _say(store, conv.id, f"{filler} My sister's name is Ilse. A grey day. {filler}")
    (newer,) = _say(store, conv.id, "newer")
    hits = store.recall(conv.id, "my sister's name, on a grey day", newer, 5)
    assert hits[0].message_id == letter


def test_a_rarer_term_weighs_more(store: Store) -> None:
    """Recall quotes the piece of a message that holds the rarest of the query's words."""
    conv = new_conversation(store)
    _say(store, conv.id, *[f"The boat came in on day {n}." for n in range(1, 9)])
    _say(store, conv.id, "He sold the old harpoon.")
    rarity = store.recall_rarity(store.recall_terms("the boat and the harpoon"))
    assert set(rarity) == {"boat", "harpoon"}
    assert rarity["harpoon"] > rarity["boat"] > 0
