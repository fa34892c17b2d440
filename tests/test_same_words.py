"""One notion of "the same words" (kotonia_tui/terms.py), walked through every user of it.

Each script family's user sentence goes through grounding (an item that says it again is
grounded, an invention is not), the readback (its names and numbers are found, and kept by the
item), recall (a question using its words finds it in a real store, and the words recall says
matched are words grounding counts in it) and search (its name is found and highlighted)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kotonia_tui import terms
from kotonia_tui.domain import Conversation, Message, Role
from kotonia_tui.memory.grounding import grounded
from kotonia_tui.memory.readback import missing, quoted_lines, user_specifics
from kotonia_tui.memory.recall import matching_words
from kotonia_tui.search_text import term_spans
from kotonia_tui.store import Store

CAST = ("Ann", "Wren")


@dataclass(frozen=True)
class Case:
    family: str
    sentence: str  # the user's line
    names: tuple[str, ...]  # the names the readback must find (scripts with capitals)
    number: str  # a number of the sentence, found by the readback
    question: str  # a later question using words of the sentence
    invented: str  # an item about something nobody said (another number)
    name: str  # a word of the sentence searched for alone
    paraphrase: str = ""  # how a chronicler says it again, if not "Ann says: <sentence>"

    @property
    def item(self) -> str:
        """A chronicler's item that says the sentence again."""
        return self.paraphrase or f"Ann says: {self.sentence}"


CASES = [
    Case(
        "Latin with accents",
        "Ma sœur Hélène arrive à Montréal le 14 juin avec ses livres.",
        ("Hélène", "Montréal"),
        "14",
        "Quand est-ce que Helene arrive a Montreal ?",
        "Ann achète un parapluie neuf au marché pour 75 euros.",
        "Hélène",
        # Accents dropped (a model often does): the same words, as the index folds them.
        "Ann dit que sa soeur Helene arrive a Montreal le 14 juin avec ses livres.",
    ),
    Case(
        "Cyrillic",
        "Моя сестра Ольга приедет в Казань 14 июня.",
        ("Ольга", "Казань"),
        "14",
        "Когда Ольга приедет в Казань?",
        "Анна покупает новый зонтик на рынке за 75 рублей.",
        "Ольга",
    ),
    Case(
        "Greek",
        "Η αδελφή μου η Ελένη έρχεται στην Αθήνα στις 14 του μήνα.",
        ("Ελένη", "Αθήνα"),
        "14",
        "Πότε έρχεται η Ελένη στην Αθήνα;",
        "Η Άννα αγοράζει καινούργια ομπρέλα στην αγορά για 75 ευρώ.",
        "Ελένη",
    ),
    Case(
        "Arabic",
        "أختي ليلى تصل إلى القاهرة يوم ١٤ مع كتبها.",
        (),
        "١٤",
        "متى تصل ليلى إلى القاهرة؟",
        "آن تشتري مظلة جديدة من السوق بسعر 75 جنيها.",
        "ليلى",
        # The day in ASCII digits: the same number.
        "تقول آن إن أختها ليلى تصل إلى القاهرة يوم 14 مع كتبها.",
    ),
    Case(
        "Hebrew",
        "אחותי מרים מגיעה לחיפה ב 14 ביוני עם הספרים שלה.",
        (),
        "14",
        "מתי מרים מגיעה לחיפה?",
        "אן קונה מטריה חדשה בשוק תמורת 75 שקלים.",
        "מרים",
    ),
    Case(
        "Devanagari",
        "मेरी बहन सीमा 14 जून को दिल्ली पहुँचेगी।",
        (),
        "14",
        "सीमा दिल्ली कब पहुँचेगी?",
        "ऐन बाज़ार से 75 रुपये में नया छाता खरीदती है।",
        "सीमा",
    ),
    Case(
        "Thai",
        "พี่สาวของฉันชื่อมาลี จะมาถึงเชียงใหม่วันที่ 14",
        (),
        "14",
        "มาลีจะมาถึงเชียงใหม่เมื่อไหร่",
        "เขาซื้อร่มใหม่ที่ตลาด 75 บาท",
        "มาลี",
    ),
    Case(
        "Lao",
        "ເອື້ອຍຂອງຂ້ອຍຊື່ມາລີ ຈະມາຮອດວຽງຈັນວັນທີ 14",
        (),
        "14",
        "ມາລີຈະມາຮອດວຽງຈັນມື້ໃດ",
        "ລາວຊື້ຄັນຮົ່ມໃໝ່ຢູ່ຕະຫຼາດ 75 ກີບ",
        "ມາລີ",
    ),
    Case(
        "Khmer",
        "បងស្រីរបស់ខ្ញុំឈ្មោះសុភា នឹងមកដល់ភ្នំពេញថ្ងៃទី 14",
        (),
        "14",
        "តើសុភានឹងមកដល់ភ្នំពេញពេលណា",
        "គាត់ទិញឆ័ត្រថ្មីនៅផ្សារ 75 រៀល",
        "សុភា",
    ),
    Case(
        "Myanmar",
        "ကျွန်မ အစ်မ မာလာ ရန်ကုန်ကို 14 ရက်နေ့ ရောက်မယ်",
        (),
        "14",
        "မာလာ ရန်ကုန်ကို ဘယ်တော့ ရောက်မလဲ",
        "သူ ဈေးမှာ ထီး အသစ် 75 ကျပ်နဲ့ ဝယ်တယ်",
        "မာလာ",
    ),
    Case(
        "Han with an extension-B character",
        "我的朋友𠮷明14号到北京。",
        (),
        "14",
        "𠮷明什么时候到北京？",
        "她在市场花75块买了一把新雨伞。",
        "𠮷明",
    ),
    Case(
        "kana",
        "ミナちゃんは 14にち に サッポロ へ いきます。",
        (),
        "14",
        "ミナちゃんは いつ サッポロ へ いきますか？",
        "アンは いちばで あたらしい かさを 75えんで かいます。",
        "サッポロ",
    ),
    Case(
        "Hangul",
        "제 여동생 민지는 14일에 부산에 도착해요.",
        (),
        "14",
        "민지는 언제 부산에 도착해요?",
        "앤은 시장에서 새 우산을 75원에 사요.",
        "민지는",
    ),
]
IDS = [case.family for case in CASES]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """One store holding every case: each sentence and its invention, among fillers."""
    path: Path = tmp_path_factory.mktemp("same-words") / "kotonia.sqlite3"
    with Store.open(path) as opened:
        yield opened


@pytest.fixture(scope="module")
def stored(store: Store) -> dict[str, tuple[int, int, int]]:
    """Per case: (conversation, the sentence's message id, a later message's id)."""
    ids = {}
    for case in CASES:
        conv = store.create_conversation(
            Conversation(character_key="wren", character_name="Wren", persona_name="Ann")
        )
        lines = [
            "The tide came in early.",
            case.invented,
            case.sentence,
            "Wren nods and pours the tea.",
            "Later, the lamps are lit.",
        ]
        added = store.add_messages(
            conv.id, [Message(role=Role.USER, speaker="Ann", text=text) for text in lines]
        )
        ids[case.family] = (conv.id, added[2], added[-1])
    return ids


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_grounding_an_item_that_says_the_sentence_again(case: Case) -> None:
    assert grounded(case.item, [case.sentence], CAST)
    assert not grounded(case.invented, [case.sentence], CAST)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_readback_finds_the_names_and_numbers_and_the_item_keeps_them(case: Case) -> None:
    found = user_specifics([Message(id=1, role=Role.USER, speaker="Ann", text=case.sentence)])
    assert case.number in found
    assert set(case.names) <= set(found)
    assert missing(found, case.item) == []
    assert missing(found, case.invented) == found  # the invention keeps none of them


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_recall_finds_the_sentence_from_a_question_in_its_words(
    case: Case, store: Store, stored: dict[str, tuple[int, int, int]]
) -> None:
    conv_id, message_id, later = stored[case.family]
    hits = store.recall(conv_id, case.question, later, 3)
    assert hits and hits[0].message_id == message_id, [h.text for h in hits]
    query_terms = store.recall_terms(case.question)
    matched = matching_words(case.sentence, query_terms)
    assert matched
    # What recall says matched is what grounding counts in the sentence: the same tokens,
    # folded the same way (words too short for content aside).
    content = terms.content(case.sentence).terms()
    for word in matched:
        if terms.has_unspaced(word) or terms.letters(word) >= terms.CONTENT_LETTERS:
            assert word in content, (word, sorted(content))
    assert term_spans(case.sentence, query_terms)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_search_finds_and_highlights_the_name(
    case: Case, store: Store, stored: dict[str, tuple[int, int, int]]
) -> None:
    conv_id, message_id, _later = stored[case.family]
    hits = store.search(case.name, conversation_id=conv_id)
    assert [h.message_id for h in hits] == [message_id]
    start = case.sentence.index(case.name)
    spans = term_spans(case.sentence, terms.split_terms(case.name))
    assert (start, start + len(case.name)) in spans


def test_readback_keeps_a_name_only_as_a_word_with_its_capital() -> None:
    """A name the chapter left out is not "kept" by a word that merely contains its letters
    ("told" for "Old") or by the same word as a common noun ("the brass instrument" for the
    theodolite called Old Brass), and the ledger quotes the sentence that names it, not the
    first one with its letters. Accents, a possessive, capitals and a hyphenated form still
    keep it."""
    line = (
        "One more thing before I forget, my theodolite. The brass instrument in the long "
        "case. I call it Old Brass. Nobody touches it but me."
    )
    message = Message(id=12, role=Role.USER, speaker="Mara", text=line)
    found = user_specifics([message])
    assert found == ["Old", "Brass"]
    chapter = "- Mara told Corwin about the brass instrument in her old case (#12)"
    assert missing(found, chapter) == ["Old", "Brass"]
    assert [quoted for _m, quoted in quoted_lines([message], found)] == ["I call it Old Brass."]

    assert missing(["Hélène", "Gull's", "Mara"], "Helene's lamp; GULL'S REACH; Mara-san") == []
    assert missing(["Soot"], "The cat soothes her.") == ["Soot"]
