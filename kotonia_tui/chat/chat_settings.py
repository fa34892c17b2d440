"""The settings a turn runs with: the model profile, the character's, the conversation's.

A value set by a narrower layer wins: profile < character < conversation. The Author's Note
follows the same rule (an empty note is "not set"); World Info files add up (the character's
and the conversation's). Each effective value remembers which layer set it, for the
inspector and the settings screen.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import ValidationError

from kotonia_tui.chat.lore import WorldInfoError, WorldInfoFolder
from kotonia_tui.config import ModelProfile
from kotonia_tui.domain import ChatSettings, GenerationSettings

GENERATION_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "reply_max_tokens")
LABELS = {
    "temperature": "temperature",
    "top_p": "top-p",
    "top_k": "top-k",
    "min_p": "min-p",
    "repeat_penalty": "repeat penalty",
    "reply_max_tokens": "reply length",
    "lore_budget": "lore budget",
}


class Layer(StrEnum):
    CONFIG = "config"  # the app's settings (config.toml): the lore budget's lore_budget_ratio
    PROFILE = "profile"
    CHARACTER = "character"
    CONVERSATION = "conversation"


@dataclass(frozen=True)
class Effective:
    value: float | int
    layer: Layer


@dataclass(frozen=True)
class TurnSettings:
    """What a turn uses, each value with the layer that set it."""

    generation: dict[str, Effective]
    author_note: str
    author_note_layer: Layer | None  # None: no note
    author_note_depth: int
    world_info: tuple[tuple[str, Layer], ...]  # (file name, layer), character's first
    lore_budget: Effective  # tokens of keyed lore per turn

    @property
    def reply_max_tokens(self) -> int:
        return int(self.generation["reply_max_tokens"].value)

    def sampling(self) -> GenerationSettings:
        """The values for the engine (the request's layer over the profile)."""
        return GenerationSettings.model_validate(
            {name: effective.value for name, effective in self.generation.items()}
        )


def resolve(
    profile: ModelProfile,
    character: ChatSettings,
    conversation: ChatSettings,
    *,
    lore_budget: int,
) -> TurnSettings:
    """`lore_budget`: the app's (`lore_budget_ratio` of the window), under the two layers."""
    generation: dict[str, Effective] = {}
    for name in GENERATION_FIELDS:
        found = Effective(getattr(profile, name), Layer.PROFILE)
        for layer, settings in ((Layer.CHARACTER, character), (Layer.CONVERSATION, conversation)):
            value = getattr(settings.generation, name)
            if value is not None:
                found = Effective(value, layer)
        generation[name] = found
    note, note_layer = "", None
    depth = 0
    for layer, settings in ((Layer.CHARACTER, character), (Layer.CONVERSATION, conversation)):
        if settings.author_note.strip():
            note, note_layer = settings.author_note, layer
        if settings.author_note_depth is not None:
            depth = settings.author_note_depth
    files: list[tuple[str, Layer]] = []
    for layer, settings in ((Layer.CHARACTER, character), (Layer.CONVERSATION, conversation)):
        files += [(name, layer) for name in settings.world_info if name not in dict(files)]
    lore = Effective(lore_budget, Layer.CONFIG)
    for layer, settings in ((Layer.CHARACTER, character), (Layer.CONVERSATION, conversation)):
        if settings.lore_budget is not None:
            lore = Effective(settings.lore_budget, layer)
    return TurnSettings(generation, note, note_layer, depth, tuple(files), lore)


SETTING_NAMES = (
    *GENERATION_FIELDS,
    "author_note",
    "author_note_depth",
    "world_info",
    "lore_budget",
)


class ChatSettingsError(Exception):
    """Settings that cannot be used; `field` names the one at fault (for the settings screen)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def reply_limit(n_ctx: int) -> int:
    """The longest reply length a window allows: half of it, so the story keeps room."""
    return n_ctx // 2


def lore_limit(n_ctx: int) -> int:
    """The largest lore budget a window allows: a quarter of it (lore sent is never folded)."""
    return n_ctx // 4


@dataclass(frozen=True)
class SettingsView:
    """Everything the settings screen shows for one conversation."""

    conversation_id: int
    character_key: str
    character_name: str
    character: ChatSettings
    conversation: ChatSettings
    effective: TurnSettings
    profile_name: str
    n_ctx: int
    world_files: list[str]  # the World Info files in the folder, to attach
    world_folder: str


def check(effective: TurnSettings, n_ctx: int, world_files: list[str]) -> None:
    """Raise `ChatSettingsError` when the layered settings cannot run a turn."""
    reply = effective.generation["reply_max_tokens"]
    limit = reply_limit(n_ctx)
    if reply.value > limit:
        raise ChatSettingsError(
            "reply_max_tokens",
            f"reply length {reply.value} (the {reply.layer.value}'s) is more than half of the "
            f"{n_ctx}-token window: at most {limit}",
        )
    lore = effective.lore_budget
    if lore.value > lore_limit(n_ctx):
        raise ChatSettingsError(
            "lore_budget",
            f"lore budget {lore.value} (the {lore.layer.value}'s) is more than a quarter of the "
            f"{n_ctx}-token window: at most {lore_limit(n_ctx)}",
        )
    for name, layer in effective.world_info:
        if name not in world_files:
            raise ChatSettingsError(
                "world_info",
                f"World Info file {name!r} (the {layer.value}'s) is not in the folder; "
                + _world_files_said(name, world_files),
            )


WORLD_FILES_SAID = 8  # the most file names an error lists


def _world_files_said(name: str, world_files: list[str]) -> str:
    """What the folder holds, for an error about `name` (a name given without its `.json`
    is the usual slip: that file is named first)."""
    if not world_files:
        return "the folder has no .json files"
    meant = f"{name}.json"
    if meant in world_files:
        return f"did you mean {meant!r}?"
    shown = ", ".join(repr(n) for n in world_files[:WORLD_FILES_SAID])
    more = len(world_files) - WORLD_FILES_SAID
    return f"it has {shown}" + (f" and {more} more" if more > 0 else "")


def validated(
    profile: ModelProfile,
    character: ChatSettings,
    conversation: ChatSettings,
    *,
    n_ctx: int,
    lore_budget: int,
    world_info: WorldInfoFolder,
) -> TurnSettings:
    """The settings the two layers make, when a turn can run with them: `ChatSettingsError`
    names the field at fault otherwise (the settings screen and `kotonia settings` alike)."""
    effective = resolve(profile, character, conversation, lore_budget=lore_budget)
    check(effective, n_ctx, world_info.names())
    for name, _layer in effective.world_info:
        try:
            world_info.load(name)
        except WorldInfoError as exc:
            raise ChatSettingsError("world_info", str(exc)) from exc
    return effective


def assigned(settings: ChatSettings, name: str, value: str) -> ChatSettings:
    """`settings` with `name` set from text as a script writes it (`kotonia settings --set`):
    an empty value clears the field (the layer below decides again); `world_info` is a
    comma-separated list of file names. `ChatSettingsError` names a wrong name or value."""
    if name not in SETTING_NAMES:
        raise ChatSettingsError(
            name, f"no setting {name!r}; the settings are {', '.join(SETTING_NAMES)}"
        )
    data = settings.model_dump()
    parsed: object
    if name == "world_info":
        parsed = tuple(part.strip() for part in value.split(",") if part.strip())
    elif name == "author_note":
        parsed = value
    else:
        parsed = value.strip() or None
    if name in GENERATION_FIELDS:
        data["generation"][name] = parsed
    else:
        data[name] = parsed
    try:
        return ChatSettings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ChatSettingsError(name, f"{name} = {value!r}: {first['msg']}") from exc
