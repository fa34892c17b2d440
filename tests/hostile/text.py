"""A hostile corpus, written by code: cards, card files and chat files full of text that a
terminal UI must show as text.

Every kind of trouble the TUI and the CLI have met or could meet: Textual/Rich markup of every
kind (bracketed personality blocks, closing tags with no opening one, `@click` actions that quit
or overwrite files, styles, links, `$variables`), terminal escapes (CSI, OSC title and OSC 52
clipboard writes, C1 controls, BEL/BS/CR tricks, NUL), bidi controls, and very long text.
(Lone surrogates are left to the decoding tests of issue 18.)

Each hostile string carries `SENTINEL`, so a test can tell whether any of it reached Textual's
markup parser, and `expected(text)` is what the user must see instead: the text itself, with
control characters shown as pictures (␛, ⟨U+202E⟩).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from kotonia_tui.characters.limits import MAX_TEXT_CHARS
from kotonia_tui.terminal_text import visible
from tests.characters.builders import charx_card, json_card, png_card, v2_card, v3_card

SENTINEL = "Kq7"

# kind -> the hostile text (short enough to sit on one line of any panel)
HOSTILE: dict[str, str] = {
    "personality": '[Kq7\'s Personality= "caring", "kind"]',
    "close-ooc": "[/OOC] Kq7 out of character",
    "close-any": "Kq7 [/] closes nothing",
    "close-bold": "Kq7 [/bold] and [/i]",
    "click-quit": "[@click=app.quit]Kq7 quit[/]",
    "click-screenshot": "[@click=app.screenshot('notes.txt','/tmp')]Kq7[/]",
    "click-bell": "[@click=app.bell]Kq7 ring[/]",
    "style": "[bold red on blue]Kq7 loud[/bold red on blue]",
    "link": "[link='https://example.com']Kq7 link[/link]",
    "variable": "Kq7 $accent $text [$x] [on $primary]",
    "unbalanced": "[b]Kq7 never closed [i",
    "square-words": "Kq7 waves [smiles] under [keys]",
    "csi": "\x1b[31mKq7 red\x1b[0m \x1b[2J\x1b[H",
    "osc-title": "\x1b]0;Kq7 pwned title\x07after",
    "osc-52": "\x1b]52;c;S3E3IGNsaXBib2FyZA==\x07Kq7",
    "osc-st": "\x1b]2;Kq7 title\x1b\\ tail",
    "c1": "Kq7 \x9b31m c1 \x9d0;t\x9c",
    "bell-bs-cr": "Kq7 overwritten\rSAFE\x07\x08\x7f",
    "nul-vt-ff": "Kq7\x00nul\x0bvt\x0cff",
    "bidi": "Kq7 \u202eevil\u202c \u2066iso\u2069 \u200fmark",
}

LONG_KIND = "huge"

# What must never reach a terminal raw (line breaks and tabs are layout, not controls).
_RAW_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def raw_controls(text: str) -> list[str]:
    """The control, escape and bidi characters in `text` (printed or drawn raw, a bug)."""
    return _RAW_CONTROL.findall(text)


def expected(text: str) -> str:
    """What the user must see for `text` on one line: the text, controls shown as pictures."""
    return visible(text, one_line=True)


@dataclass(frozen=True)
class HostileCard:
    kind: str
    key: str
    name: str
    description: str
    first_mes: str
    path: Path


def _fields(kind: str, text: str, index: int) -> dict[str, object]:
    # Each field starts with the hostile text, so it starts a line wherever it is shown.
    return {
        "description": f"{text} — the description of card {index}.",
        "personality": f"{text} personality",
        "scenario": f"{text} scenario",
        "first_mes": f"{text} greeting {index}\nA second line of the greeting.",
        "alternate_greetings": [f"{text} alternate {index}"],
        "creator_notes": f"{text} notes",
        "mes_example": f"<START>\n{{{{user}}}}: hi\n{{{{char}}}}: {text}",
        "tags": [text, "hostile"],
        "creator": f"{text} creator",
        "character_book": {
            "entries": [
                {"keys": [SENTINEL], "content": f"{text} lore", "enabled": True},
            ]
        },
    }


def write_hostile_cards(folder: Path, *, huge: bool = True) -> list[HostileCard]:
    """One card per hostile kind, in every container (V2/V3 JSON, V2/V3 PNG, CHARX) in turn."""
    folder.mkdir(parents=True, exist_ok=True)
    cards: list[HostileCard] = []
    for index, (kind, text) in enumerate(HOSTILE.items()):
        name = f"{text} {index}"
        fields = _fields(kind, text, index)
        key = f"h{index:02d}-{kind}"
        container = index % 5
        if container == 0:
            path = json_card(folder / f"{key}.json", v2_card(name, **fields))
        elif container == 1:
            path = json_card(folder / f"{key}.json", v3_card(name, nickname=name, **fields))
        elif container == 2:
            path = png_card(folder / f"{key}.png", chara=v2_card(name, **fields))
        elif container == 3:
            path = png_card(folder / f"{key}.png", ccv3=v3_card(name, **fields))
        else:
            path = charx_card(folder / f"{key}.charx", v3_card(name, **fields))
        cards.append(
            HostileCard(
                kind,
                key,
                name,
                str(fields["description"]),
                str(fields["first_mes"]),
                path,
            )
        )
    if huge:
        # As long as a card field may be (the loader refuses longer ones, naming the field).
        text = "Kq7 huge " + "word " * (MAX_TEXT_CHARS // 5 - 2)
        fields = {
            "description": text,
            "first_mes": text,
            "creator_notes": text,
            "alternate_greetings": [text] * 3,
        }
        path = json_card(folder / "h99-huge.json", v2_card("Kq7 Huge", **fields))
        cards.append(HostileCard(LONG_KIND, "h99-huge", "Kq7 Huge", text, text, path))
    return cards


def write_broken_cards(folder: Path) -> list[Path]:
    """Unreadable card files whose file names are hostile (the error names the file)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [
        folder / "[bold]Kq7 broken [i.json",  # a file name cannot hold "/"
        folder / "Kq7 \x1b]0;title\x07.json",
        folder / "[@click=app.quit]Kq7.png",
    ]
    paths[0].write_text("{not json", encoding="utf-8")
    paths[1].write_text('{"spec": "chara_card_v2", "data": 7}', encoding="utf-8")
    paths[2].write_bytes(b"\x89PNG\r\n\x1a\n not a png")
    return paths


def hostile_message_texts() -> list[str]:
    return [f"{text} message" for text in HOSTILE.values()]


def write_hostile_chat(path: Path, character_name: str, user_name: str = "User") -> Path:
    """A SillyTavern chat with hostile speaker names, texts and a system line."""
    header = {"user_name": user_name, "character_name": character_name, "chat_metadata": {}}
    lines = [json.dumps(header)]
    lines.append(
        json.dumps(
            {
                "name": "SillyTavern System",
                "is_user": False,
                "is_system": True,
                "mes": "[Start a new chat] Kq7",
            }
        )
    )
    for index, text in enumerate(hostile_message_texts()):
        is_user = index % 2 == 1
        lines.append(
            json.dumps(
                {
                    "name": user_name if is_user else character_name,
                    "is_user": is_user,
                    "mes": text,
                    "send_date": f"2024-01-01T10:{index:02d}:00.000Z",
                }
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
