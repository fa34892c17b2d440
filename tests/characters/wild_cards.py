"""Cards shaped like the ones found in the wild, written by code (text of our own).

Learned from public cards loaded into the app (SillyTavern's bundled Seraphina, cards made with
the AI Character Editor, V2+V3 PNG and V3 JSON cards from a public SillyTavern collection):

- `sillytavern_default`: a V2 `chara` PNG that repeats the V1 fields at the root (with `avatar`,
  `chat`, `create_date`, `talkativeness` as text, `fav`, `creatorcomment`), CR LF line ends, a
  description made of bracketed PList blocks (`[Name's Personality= "caring", ...]`) followed
  by `<START>` example dialogue with `{{user}}`/`{{char}}`, and a small lorebook whose entries
  are long role-play paragraphs (`id`, `keys`, `secondary_keys`, `comment`);
- `editor_v1`: a V1 PNG (no `spec`) with a `metadata` block and a PList with a tab in it
  (`Name's = [a, b,\\n\\tc]`);
- `w_plus_plus`: W++ (`[character("Name")\\n{\\nMind("kind" + "shy")\\n}]`) and `[OOC: ...]` /
  `[/OOC]` asides;
- `game_master_png`: both `chara` (V2) and `ccv3` (V3) chunks plus an unrelated `prompt` text
  chunk that is not base64 (image-generator metadata), CJK bracket headers (`[主持人协议]`),
  Markdown in the greeting (`> **bold**`), XML-ish variable blocks (`<UpdateVariable>`) in the
  examples, `extensions` with `depth_prompt` and `regex_scripts`, and lorebook entries with
  empty keys, `enabled: false`, `position: "before_char"` and many extension fields;
- `long_lorebook_v3_json`: a V3 JSON card with an empty description, 「」 speech and a
  200-entry lorebook;
- `v3_assets_png`: a V3 `ccv3` PNG with `assets` (`ccdefault:` icon, emotion images by URI),
  `nickname`, `group_only_greetings`, `creator_notes_multilingual`, `source`.

Learned later (cards from SillyTavern's content repository and its bundled World Info, Chinese
cards exported by current SillyTavern as V3 JSON, cards from other apps' examples):

- `sillytavern_v3_export`: a V3 JSON card as SillyTavern exports it today: the V1 fields at the
  root beside `spec`/`data` (`creatorcomment`, `avatar`, `chat`, `talkativeness`, `fav`), CR LF,
  an empty description, a greeting ending in an XML-ish status block (`<StatusBlock>` with
  `>`-quoted lines), and a lorebook in which EVERY entry says `use_regex: true` beside
  SillyTavern's own extension fields (`display_index`, `selectiveLogic`, `useProbability`, ...):
  SillyTavern writes that flag on every entry it exports, while its keys are plain text (a key
  is a regular expression there only when written `/like this/i`). Keys with regex
  metacharacters (`*pours tea*`, `Mr. Lu?`) and a short English word (`cat`) among Chinese ones;
  one entry is case-sensitive, which SillyTavern writes as `extensions.case_sensitive`, not as
  the spec's `case_sensitive` beside `keys`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.characters.builders import b64_json, json_card, png_with_text, v2_card, v3_card


@dataclass(frozen=True)
class WildCard:
    key: str
    name: str
    greetings: int
    lore_entries: int
    path: Path


def _entry(index: int, keys: list[str], content: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": index,
        "keys": keys,
        "secondary_keys": [],
        "comment": f"entry {index}",
        "content": content,
        "constant": False,
        "selective": False,
        "insertion_order": 100,
        "enabled": True,
        "position": "after_char",
        **extra,
    }


def sillytavern_default(folder: Path) -> WildCard:
    name = "Maren"
    description = (
        f'[{name}\'s Personality= "patient", "wry", "protective", "curious", "stubborn"]\r\n'
        f'[{name}\'s body= "grey eyes", "salt-stiff coat", "rope-scarred hands"]\r\n'
        "<START>\r\n"
        '{{user}}: "Describe yourself?"\r\n'
        '{{char}}: *Maren squints out at the grey water before answering.* "A keeper. Of '
        'the light, of the log, of whoever washes up." *She taps the logbook.*\r\n'
        "[Genre: coastal; Tags: slow burn; Scenario: {{user}} washed up below the lighthouse "
        "and {{char}} pulled them out of the surf.]"
    )
    first_mes = (
        '*You wake to the smell of kelp and lamp oil.* "Easy. You swallowed half the bay." '
        '*Maren sets a chipped mug beside you.*\r\n"Drink. Then tell me your name."'
    )
    lore = [
        _entry(
            0,
            ["lighthouse", "lamp"],
            '{{user}}: "The lamp?"\n{{char}}: "It has not gone '
            'dark in ninety years." *She says it like a vow.*',
        ),
        _entry(1, ["logbook"], "The logbook lists every ship that passed since 1931."),
        _entry(2, ["storm"], "Storms come from the north-east in autumn."),
        _entry(3, ["Maren"], "Maren was born in the keeper's cottage."),
    ]
    data = v2_card(
        name,
        description=description,
        personality="",
        scenario="",
        first_mes=first_mes,
        creator_notes="Contest winner: role-play category",
        creator="SomeCreator",
        character_version="1.0.0",
        extensions={"talkativeness": "0.5", "fav": False, "world": "Coast"},
        character_book={"entries": lore, "name": "Coast"},
    )
    card = {
        "name": name,
        "description": description,
        "personality": "",
        "first_mes": first_mes,
        "avatar": "none",
        "chat": f"{name} - 2023-5-12 @21h 32m 29s 224ms",
        "mes_example": "",
        "scenario": "",
        "create_date": "2023-5-12 @21h 32m 29s 228ms",
        "talkativeness": "0.5",
        "fav": False,
        "creatorcomment": "Contest winner: role-play category",
        **data,
    }
    path = folder / "default_Maren.png"
    path.write_bytes(png_with_text({"chara": b64_json(card)}))
    return WildCard("default_Maren", name, 1, len(lore), path)


def editor_v1(folder: Path) -> WildCard:
    card = {
        "name": "Relay",
        "description": "Relay's = [machine, precise, polite,\n\tdislikes rudeness, likes tea]",
        "personality": "Relay is a station AI that answers questions politely.",
        "scenario": "Relay runs the weather station.",
        "first_mes": "How can I help you today?",
        "mes_example": "",
        "metadata": {
            "version": 1,
            "created": 1699174849145,
            "modified": 1699174849145,
            "source": None,
            "tool": {"name": "A Card Editor", "version": "0.5.0", "url": "https://example.com"},
        },
    }
    path = folder / "Relay_v2.png"
    path.write_bytes(png_with_text({"chara": b64_json(card)}))
    return WildCard("Relay_v2", "Relay", 1, 0, path)


def w_plus_plus(folder: Path) -> WildCard:
    description = (
        '[character("Tobin")\n{\nSpecies("Human")\nAge("34")\n'
        'Mind("kind" + "shy" + "stubborn")\nLikes("bread" + "rain")\n}]\n'
        "[OOC: Tobin never speaks for {{user}}.][/OOC]"
    )
    card = v2_card(
        "Tobin",
        description=description,
        first_mes="(OOC: a slow scene) *Tobin dusts flour off his apron.* \"We're closed— "
        'oh. You look hungry." [/OOC]',
        alternate_greetings=["[OOC: alternate] *The oven door bangs.*", "*Rain.* [smiles]"],
        mes_example="<START>\n{{user}}: [OOC: be brief]\n{{char}}: *nods* [/]",
    )
    path = json_card(folder / "tobin.json", card)
    return WildCard("tobin", "Tobin", 3, 0, path)


def game_master_png(folder: Path) -> WildCard:
    name = "灯塔与渔村的日常"
    fields: dict[str, Any] = {
        "description": (
            "[主持人协议]\n你是一场轻松冒险的主持人，扮演整个渔村。{{user}} 扮演新来的守灯人。\n\n"
            "[世界]\n海边小村，民风淳朴。\n\n[规则]\n每回合结尾输出状态栏。"
        ),
        "personality": "幽默、细心、记账一丝不苟。",
        "scenario": "清晨，灯塔的灯油只剩一半。",
        "first_mes": (
            "*清晨五点，雾笛响了三声。*\n\n"
            "> **灯油：50 / 100**\n> **村民好感：10**\n\n"
            "「早啊，新来的。」*老渔夫举起一条鱼。*"
        ),
        "mes_example": (
            "<START>\n{{user}}: 我去补灯油。\n{{char}}: *你爬上旋梯。*\n\n<UpdateVariable>\n"
            "<JSONPatch>\n"
            '[{"op":"replace","path":"/灯塔/灯油","value":80}]\n</JSONPatch>\n</UpdateVariable>'
        ),
        "creator_notes": "一张主持人卡。",
        "tags": ["主持人", "日常"],
        "creator": "someone",
        "character_version": "1.2",
        "extensions": {
            "talkativeness": "0.5",
            "fav": False,
            "world": "渔村",
            "depth_prompt": {"prompt": "保持轻松。", "depth": 4, "role": "system"},
            "regex_scripts": [
                {
                    "id": "x1",
                    "scriptName": "状态栏",
                    "findRegex": "/<UpdateVariable>[\\s\\S]*?<\\/UpdateVariable>/g",
                    "replaceString": "",
                    "placement": [2],
                    "disabled": False,
                }
            ],
        },
        "character_book": {
            "name": "渔村",
            "entries": [
                _entry(
                    0,
                    [],
                    '{\n  "灯塔": {"灯油": 50},\n  "村民": {}\n}',
                    comment="[initvar]初始变量",
                    enabled=False,
                    position="before_char",
                    extensions={
                        "position": 0,
                        "depth": 4,
                        "probability": 100,
                        "useProbability": True,
                        "selectiveLogic": 0,
                        "group": "",
                        "sticky": 0,
                        "cooldown": 0,
                        "delay": 0,
                        "role": 0,
                        "vectorized": False,
                        "scan_depth": None,
                        "match_whole_words": None,
                    },
                ),
                _entry(1, ["灯塔", "灯油"], "灯塔建于百年前。", constant=True),
                _entry(2, ["渔夫"], "老渔夫每天清晨出海。"),
            ],
        },
    }
    v2 = v2_card(name, **fields)
    v3 = v3_card(name, **fields)
    # An image generator's own metadata chunk: text, not base64, not a card.
    comfy = json.dumps({"3": {"inputs": {"seed": 1, "steps": 20}, "class_type": "KSampler"}})
    path = folder / "灯塔与渔村_二次元版.png"
    path.write_bytes(png_with_text({"prompt": comfy, "chara": b64_json(v2), "ccv3": b64_json(v3)}))
    return WildCard("灯塔与渔村_二次元版", name, 1, 3, path)


def long_lorebook_v3_json(folder: Path) -> WildCard:
    name = "晚晴"
    entries = [
        _entry(i, [f"地名{i}", f"place{i}"], f"第{i}处地方：{'石桥流水，' * 20}")
        for i in range(200)
    ]
    card = v3_card(
        name,
        description="",
        personality="",
        scenario="",
        first_mes="「来了？」晚晴放下茶杯。「坐。」\n\n*窗外的雨下了一整夜。*",
        character_book={"name": "城", "entries": entries},
        extensions={},
    )
    path = json_card(folder / "晚晴.json", card)
    return WildCard("晚晴", name, 1, 200, path)


def v3_assets_png(folder: Path) -> WildCard:
    name = "Ines"
    card = v3_card(
        name,
        nickname="Ines the Cartographer",
        description="Ines maps the valley; she trusts maps more than people.",
        first_mes='*Ines unrolls a map across the table.* "You\'re in the blank bit."',
        group_only_greetings=["*Ines nods to the group.*"],
        creator_notes_multilingual={"en": "Slow burn.", "fr": "Lent."},
        source=["https://example.com/ines"],
        creation_date=1700000000,
        modification_date=1700000500,
        assets=[
            {"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"},
            {"type": "emotion", "uri": "embeded://assets/joy.png", "name": "joy", "ext": "png"},
            {
                "type": "background",
                "uri": "https://example.com/bg.webp",
                "name": "bg",
                "ext": "webp",
            },
        ],
    )
    path = folder / "ines.png"
    path.write_bytes(png_with_text({"ccv3": base64.b64encode(json.dumps(card).encode()).decode()}))
    return WildCard("ines", "Ines", 1, 0, path)


def _sillytavern_extensions(index: int) -> dict[str, Any]:
    """The extension fields SillyTavern writes on each entry of a book it exports."""
    return {
        "position": 0,
        "exclude_recursion": False,
        "display_index": index,
        "probability": 100,
        "useProbability": True,
        "depth": 4,
        "selectiveLogic": 0,
        "group": "",
        "group_override": False,
        "group_weight": 100,
        "prevent_recursion": False,
        "delay_until_recursion": False,
        "scan_depth": None,
        "match_whole_words": None,
        "use_group_scoring": False,
        "case_sensitive": None,
        "automation_id": "",
        "role": 0,
        "vectorized": False,
        "sticky": 0,
        "cooldown": 0,
        "delay": 0,
    }


# The keys of the `sillytavern_v3_export` book, by entry (its `comment`).
SILLYTAVERN_BOOK_KEYS: dict[str, list[str]] = {
    "tea": ["*pours tea*", "茶"],
    "lu": ["Mr. Lu?", "陆先生"],
    "cat": ["cat"],
    "qing": ["Qing"],  # case-sensitive, as SillyTavern says it: in the entry's extensions
}


def sillytavern_v3_export(folder: Path) -> WildCard:
    name = "听雨"
    first_mes = (
        "雨从清晨下到现在。{{user}}推开茶馆的门，铜铃响了一声。\r\n"
        "听雨从柜台后抬起头：“来了？坐，水刚开。”\r\n\r\n"
        "<StatusBlock>\r\n>听雨\r\n>姿态：擦着茶杯\r\n>情绪：平静\r\n</StatusBlock>"
    )
    contents = {
        "tea": "听雨泡茶从不用第二遍水。",
        "lu": "陆先生是隔壁书铺的掌柜，每天下午来喝一壶。",
        "cat": "茶馆里有一只橘猫，叫小满。",
        "qing": "Qing 是听雨的英文名，只写在账本上。",
    }
    entries = [
        {
            "id": index,
            "keys": SILLYTAVERN_BOOK_KEYS[topic],
            "secondary_keys": [],
            "comment": topic,
            "content": contents[topic],
            "constant": False,
            "selective": True,
            "insertion_order": 100 + index,
            "enabled": True,
            "position": "before_char",
            "use_regex": True,
            "extensions": {
                **_sillytavern_extensions(index),
                "case_sensitive": True if topic == "qing" else None,
            },
        }
        for index, topic in enumerate(SILLYTAVERN_BOOK_KEYS)
    ]
    card = v3_card(
        name,
        description="",
        personality="",
        scenario="",
        first_mes=first_mes,
        creator="someone",
        character_version="0.3",
        extensions={
            "talkativeness": "0.5",
            "fav": False,
            "world": name,
            "depth_prompt": {"prompt": "", "depth": 4, "role": "system"},
        },
        character_book={"entries": entries, "name": name},
    )
    root = {
        "name": name,
        "description": "",
        "personality": "",
        "scenario": "",
        "first_mes": first_mes,
        "mes_example": "",
        "creatorcomment": "",
        "avatar": "none",
        "chat": f"{name} - 2024-8-17@00h14m09s",
        "talkativeness": "0.5",
        "fav": False,
        "tags": [],
        **card,
        "create_date": "2024-8-20 @15h 43m 53s 92ms",
    }
    path = json_card(folder / f"{name}.json", root)
    return WildCard(name, name, 1, len(entries), path)


GENERATORS: dict[str, Callable[[Path], WildCard]] = {
    "sillytavern_default": sillytavern_default,
    "editor_v1": editor_v1,
    "w_plus_plus": w_plus_plus,
    "game_master_png": game_master_png,
    "long_lorebook_v3_json": long_lorebook_v3_json,
    "v3_assets_png": v3_assets_png,
    "sillytavern_v3_export": sillytavern_v3_export,
}


def write_wild_cards(folder: Path) -> list[WildCard]:
    folder.mkdir(parents=True, exist_ok=True)
    return [make(folder) for make in GENERATORS.values()]
