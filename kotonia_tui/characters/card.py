"""The `CharacterCard` model: one character as read from a V1, V2 or V3 card file.

A card keeps everything it was read with. Fields this app does not model stay in `extra_data`
(inside `data`) and `extra_root` (beside `data`), and `extensions` is kept verbatim, so
`to_json_dict()` writes back a spec-shaped card that other tools can still read, their own fields
included. `raw_json` is the object exactly as it was in the file, for export and inspection.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kotonia_tui.characters.character_note import CharacterNote, read_character_note
from kotonia_tui.characters.lorebook import Lorebook

SPEC_V2 = "chara_card_v2"
SPEC_V3 = "chara_card_v3"

# Fields that exist only in V3; a V2-shaped copy of a V3 card leaves them out.
_V3_ONLY = ("nickname", "group_only_greetings", "assets")


class SpecVersion(StrEnum):
    V1 = "v1"
    V2 = "v2"
    V3 = "v3"


class CardImage(BaseModel):
    """A card's picture: the file bytes and their MIME type (`image/png`, `image/jpeg`, ...)."""

    model_config = ConfigDict(frozen=True)

    data: bytes
    mime: str


class CardAsset(BaseModel):
    """A V3 asset descriptor (`data.assets[]`)."""

    type: str = ""
    uri: str = ""
    name: str = ""
    ext: str = ""
    extra: dict[str, Any] = Field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            **self.extra,
            "type": self.type,
            "uri": self.uri,
            "name": self.name,
            "ext": self.ext,
        }


class CharacterCard(BaseModel):
    """One character. `key` is the file stem: the stable id the app and the CLI use."""

    key: str
    spec: SpecVersion
    name: str
    description: str = ""
    personality: str = ""
    scenario: str = ""
    first_mes: str = ""
    mes_example: str = ""
    alternate_greetings: list[str] = Field(default_factory=list)
    system_prompt: str = ""
    post_history_instructions: str = ""
    creator_notes: str = ""  # for the human reading the card; never sent to the model
    nickname: str | None = None
    tags: list[str] = Field(default_factory=list)
    creator: str = ""
    character_version: str = ""
    group_only_greetings: list[str] = Field(default_factory=list)
    extensions: dict[str, Any] = Field(default_factory=dict)
    character_book: Lorebook | None = None
    assets: list[CardAsset] = Field(default_factory=list)
    extra_data: dict[str, Any] = Field(default_factory=dict)
    extra_root: dict[str, Any] = Field(default_factory=dict)
    source_path: Path | None = None
    card_hash: str = ""  # sha256 of the card file's bytes
    image: CardImage | None = None
    raw_json: dict[str, Any] = Field(default_factory=dict)

    @property
    def display_name(self) -> str:
        return self.nickname or self.name

    @property
    def character_note(self) -> CharacterNote | None:
        """The card's Character's Note (`extensions.depth_prompt`) as SillyTavern reads it,
        read from the extensions each time so that they stay the one copy an export writes
        (what reading it repaired is reported when the card is loaded)."""
        return read_character_note(self.extensions).note

    def to_json_dict(self, version: Literal["v2", "v3"] | None = None) -> dict[str, Any]:
        """The card as spec-shaped JSON: V3 for a V3 card, V2 otherwise (or as asked)."""
        target = version or ("v3" if self.spec is SpecVersion.V3 else "v2")
        data: dict[str, Any] = dict(self.extra_data)
        data.update(
            name=self.name,
            description=self.description,
            personality=self.personality,
            scenario=self.scenario,
            first_mes=self.first_mes,
            mes_example=self.mes_example,
            creator_notes=self.creator_notes,
            system_prompt=self.system_prompt,
            post_history_instructions=self.post_history_instructions,
            alternate_greetings=list(self.alternate_greetings),
            tags=list(self.tags),
            creator=self.creator,
            character_version=self.character_version,
            extensions=dict(self.extensions),
        )
        if self.character_book is not None:
            data["character_book"] = self.character_book.to_json_dict(target)
        if target == "v3":
            data["group_only_greetings"] = list(self.group_only_greetings)
            if self.nickname is not None:
                data["nickname"] = self.nickname
            if self.assets:
                data["assets"] = [asset.to_json_dict() for asset in self.assets]
        else:
            for field in _V3_ONLY:
                data.pop(field, None)
        out: dict[str, Any] = dict(self.extra_root)
        out.update(
            spec=SPEC_V3 if target == "v3" else SPEC_V2,
            spec_version="3.0" if target == "v3" else "2.0",
            data=data,
        )
        return out
