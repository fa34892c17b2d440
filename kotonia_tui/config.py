"""Settings: a TOML file in the config dir, overridden by `KOTONIA_<NAME>` environment variables.

`KOTONIA_HOME=DIR` puts config, data and cache under DIR (tests and scripts isolate themselves
with it); otherwise platformdirs decides. Model settings live in named profiles; the flat
`model_path`, `n_ctx`, ... settings override the active profile so a script can point at a GGUF
with one variable.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tomllib
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from kotonia_tui.domain import Persona
from kotonia_tui.untrusted_text import replacement_note, scrub

APP_NAME = "kotonia-tui"
log = logging.getLogger(__name__)


class ConfigError(Exception):
    """A settings file or variable that cannot be used; the message names it."""


@dataclass(frozen=True)
class AppDirs:
    config: Path
    data: Path
    cache: Path

    @property
    def config_file(self) -> Path:
        return self.config / "config.toml"

    @property
    def default_db(self) -> Path:
        return self.data / "kotonia.sqlite3"

    @property
    def user_characters(self) -> Path:
        return self.data / "characters"

    @property
    def world_info(self) -> Path:
        """World Info files (SillyTavern lorebooks) to attach to characters and conversations."""
        return self.data / "worlds"

    @property
    def state_file(self) -> Path:
        """Small UI state the app remembers (theme); kept apart from the user's TOML."""
        return self.data / "ui-state.json"


# A key as Textual names it: modifiers, then a key name ("f2", "page_up") or one character.
_KEY = re.compile(r"(?:(?:ctrl|shift|alt|meta|super|hyper)\+)*(?:[a-z][a-z0-9_]*|[0-9]|[^\s,+])")


def app_dirs() -> AppDirs:
    home = os.environ.get("KOTONIA_HOME")
    if home:
        base = Path(home).expanduser()
        return AppDirs(base / "config", base / "data", base / "cache")
    return AppDirs(
        Path(platformdirs.user_config_dir(APP_NAME)),
        Path(platformdirs.user_data_dir(APP_NAME)),
        Path(platformdirs.user_cache_dir(APP_NAME)),
    )


class PromptFormat(StrEnum):
    """How a conversation becomes model input."""

    TEMPLATE = "template"  # the GGUF's own chat template (instruct models such as GLM-4.6V-Flash)
    TRANSCRIPT = "transcript"  # a "Name: line" story transcript with stop strings (base models)


def _none_when_empty(value: Any) -> Any:
    """An empty path setting (`KOTONIA_EMBEDDING_MODEL_PATH=`) means none, not the current
    directory."""
    return None if isinstance(value, str) and not value.strip() else value


class ModelProfile(BaseModel):
    """Everything needed to load one model and talk to it."""

    # A misspelt key in a profile would otherwise be ignored without a word; "inf" seconds
    # would wait forever.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    description: str = ""
    # Where the model files come from; `kotonia doctor` shows it when they are missing.
    download: str = ""
    # "inprocess": llama-cpp-python in this process. "server": an OpenAI-compatible inference
    # server (llama-server, vLLM, llama-cpp-python's server) at `server_url`.
    backend: Literal["inprocess", "server"] = "inprocess"
    # e.g. http://127.0.0.1:8080 (a trailing /v1 is accepted). A user:password@ or a ?token=
    # in it is sent with every request and never shown (doctor, errors and the log hide it).
    server_url: str | None = None
    server_model: str | None = None  # the model name sent to the server; None: its first model
    api_key_env: str = "KOTONIA_API_KEY"  # the variable holding the bearer key (unset: none)
    # Seconds the server may stay silent (a cold re-read of the whole window comes before the
    # first token). None: derived from n_ctx and server_prompt_rate, so the client never gives
    # up before the server does.
    server_timeout_s: float | None = Field(default=None, gt=0.0)
    server_prompt_rate: float = Field(default=50.0, gt=0.0)  # prompt tokens/s, conservative
    server_connect_timeout_s: float = Field(default=10.0, gt=0.0)
    server_vision: bool | None = None  # None: ask the server (llama-server's /props says)
    model_path: Path | None = None  # None means the embedded default model
    mmproj_path: Path | None = None
    n_ctx: int = Field(default=8192, ge=256)
    n_gpu_layers: int | None = None  # None: every layer on a GPU build, none on a CPU build
    threads: int | None = Field(default=None, ge=1)
    prompt_format: PromptFormat = PromptFormat.TRANSCRIPT
    thinking: bool = False  # role-play wants the reply, not the reasoning
    reasoning_tags: tuple[str, str] = ("<think>", "</think>")
    reply_max_tokens: int = Field(default=512, ge=16)  # the reply reserve in every budget
    temperature: float = Field(default=0.8, ge=0.0)
    top_k: int = Field(default=40, ge=0)  # 0: no top-k cut
    top_p: float = Field(default=0.95, gt=0.0, le=1.0)
    min_p: float = Field(default=0.05, ge=0.0, le=1.0)
    repeat_penalty: float = Field(default=1.1, ge=0.0)
    # How many recent tokens the repeat penalty looks at (0: none). vLLM has no window: it
    # penalizes the whole prompt and reply.
    repeat_last_n: int = Field(default=64, ge=0)
    seed: int | None = None
    # The words a chapter begins with, written into the prompt for the model to go on from.
    # None: the transcript format's lead for base models, none with a chat template
    # (see memory.chronicler.chronicler_lead).
    chronicler_lead: str | None = None
    # The same for a synopsis. None: "So far in the story," wherever chapters have a lead.
    synopsis_lead: str | None = None
    # The embedding GGUF of semantic recall (e.g. nomic-embed-text, bge-m3): recall also finds
    # archived messages similar in meaning to the latest lines, not only those sharing words
    # (chat/semantic.py). None: the shipped all-MiniLM-L6-v2 (engine/default_embedding.py).
    # `semantic_recall = false` in the settings turns it off.
    embedding_model_path: Path | None = None

    @field_validator("embedding_model_path", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: Any) -> Any:
        return _none_when_empty(value)

    @field_validator("model_path", "mmproj_path", "embedding_model_path", mode="after")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None


def builtin_profiles() -> dict[str, ModelProfile]:
    """Profiles that ship with the app. Users add profiles, or change keys of these, under
    `[profiles.NAME]` (see `Settings.all_profiles`)."""
    models = Path("~/models").expanduser()
    return {
        "default": ModelProfile(
            description="Embedded Gemma 3 270M (base model, story transcript)",
            n_ctx=8192,
            prompt_format=PromptFormat.TRANSCRIPT,
            reply_max_tokens=256,
        ),
        "glm-4.6v-flash": ModelProfile(
            description="GLM-4.6V-Flash with its vision projector, 64k context, thinking off",
            download=(
                "https://huggingface.co/lmstudio-community/GLM-4.6V-Flash-GGUF (about 6.2 GB and "
                "1.7 GB); https://huggingface.co/ggml-org/GLM-4.6V-Flash-GGUF has the same model "
                "with a smaller projector, mmproj-GLM-4.6V-Flash-Q8_0.gguf"
            ),
            model_path=models / "GLM-4.6V-Flash-Q4_K_M.gguf",
            mmproj_path=models / "mmproj-GLM-4.6V-Flash-F16.gguf",
            n_ctx=65536,
            prompt_format=PromptFormat.TEMPLATE,
            thinking=False,
            reply_max_tokens=1024,
            temperature=0.8,
        ),
    }


class Settings(BaseSettings):
    """All settings. Every field can be set as `KOTONIA_<NAME>` (nested with `__`)."""

    model_config = SettingsConfigDict(
        env_prefix="KOTONIA_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
        allow_inf_nan=False,
    )

    profile: str = "default"
    profiles: dict[str, ModelProfile] = Field(default_factory=dict)

    # Overrides of the active profile, so one variable points the app at a GGUF.
    model_path: Path | None = None
    mmproj_path: Path | None = None
    n_ctx: int | None = Field(default=None, ge=256)
    n_gpu_layers: int | None = None
    threads: int | None = Field(default=None, ge=1)
    prompt_format: PromptFormat | None = None
    embedding_model_path: Path | None = None
    # Recall by meaning as well as by words, with the profile's embedding model (the shipped
    # all-MiniLM-L6-v2 when it names none). False: recall matches words only, and no embedding
    # model is loaded. On by default since issue 28: with it the evidence for a question was
    # in the prompt of the recall arms for 0.76-0.86 of the questions on both shipped
    # conversations at n_ctx 2048, by words alone for 0.67-0.82 (docs/decisions.md D-46).
    semantic_recall: bool = True

    db: Path | None = None
    characters_dir: Path | None = None  # the user's card folder; default under the data dir
    world_info_dir: Path | None = None  # World Info files; default "worlds" under the data dir
    # The first default persona; personas live in the database from then on (chat/personas.py).
    persona: Persona = Field(default_factory=Persona)

    # Memory budgets, as fractions of n_ctx (docs/architecture.md, "Budgets are tokens").
    fold_delay_s: float = Field(default=30.0, ge=0.0)
    # A turn waits for the fold that keeps messages in memory (instead of cutting them at the
    # ceiling, or after they were cut) while the fold makes progress: it gives up when the fold
    # has not moved for fold_wait_s (0: never wait) or after fold_wait_max_s in all. In the app
    # the user can go on without it at any moment (chat/fold/wait.py).
    # A turn that would cut messages at the ceiling quotes them into the memory at once (code
    # only), and the chronicler's chapters replace the quotes in the background: the turn never
    # waits (chat/fold/quote_first.py). Off: the turn waits for the chronicler, as below.
    fold_quote_first: bool = True
    fold_wait_s: float = Field(default=120.0, ge=0.0)
    fold_wait_max_s: float = Field(default=1200.0, ge=0.0)
    fold_trigger_ratio: float = Field(default=0.47, gt=0.0, lt=1.0)
    fold_ceiling_ratio: float = Field(default=0.55, gt=0.0, lt=1.0)
    min_verbatim_ratio: float = Field(default=0.16, gt=0.0, lt=1.0)
    fold_headroom_ratio: float = Field(default=0.16, ge=0.0, lt=1.0)
    major_gc_ratio: float = Field(default=0.06, gt=0.0, lt=1.0)
    # A major fold takes at least this many chapters into the synopsis at once: at a small
    # window the size threshold is below one chapter, and folding one or two chapters at a
    # time rewrites the synopsis so often that it wears away like a rolling summary.
    major_gc_min_chapters: int = Field(default=3, ge=1)
    # The length a synopsis is written to hold (+-20%), as a share of n_ctx.
    synopsis_target_ratio: float = Field(default=0.04, gt=0.0, lt=1.0)
    chapter_source_ratio: float = Field(default=0.30, gt=0.0, lt=1.0)
    summary_max_tokens: int = Field(default=4096, ge=64)
    # Keyed lorebook entries per turn: 12% holds the whole book of SillyTavern's bundled default
    # card (Seraphina: four entries of 158-365 tokens, 948 in all on the embedded default's
    # tokenizer, 11.6% of 8,192) when every entry fires at once; SillyTavern's own default is
    # 25% of the context. Only the entries that fire take room.
    lore_budget_ratio: float = Field(default=0.12, ge=0.0, lt=1.0)
    # The live ledger the memory block carries; past it the newest entries leave the prompt
    # (never the store), user facts and rules last, each kind keeping its oldest longest
    # (memory/ledger.py). Larger shares were measured at n_ctx 2048 (assets/eval/README.md,
    # "A memory block that earns its tokens"): no more answers than the verbatim they displace.
    ledger_budget_ratio: float = Field(default=0.05, ge=0.0, lt=1.0)
    # Recalled archive excerpts per turn, after the history (0 turns recall off). Swept on
    # the shipped conversations at n_ctx 2048 (assets/eval/README.md, issue 28), counting a
    # quoted part only when it holds the answer: an evidence message in the prompt for
    # lighthouse/chitchat 0.35/0.22 of the questions at 5%, 0.68/0.62 at 10%, 0.82/0.73 at
    # 20%, 0.84/0.76 at 30%. Every recalled token is read again each turn; 20% is the knee
    # (10 -> 20% gained 16 questions of 125, 20 -> 30% 4, and 30% squeezes the window).
    recall_budget_ratio: float = Field(default=0.20, ge=0.0, lt=1.0)
    # The most tokens one turn recalls, the room below included (0: no cap). What a question
    # needs from the archive does not grow with the window, and every recalled token is read
    # again each turn: at n_ctx 32,768 the share alone would be 6,553 tokens a turn. Measured
    # at the shipped n_ctx 8,192 (evidence only, truncation+recall, semantic on; 21 chitchat
    # and 15 lighthouse questions), evidence any and positions a question reads: uncapped
    # 0.95/1.00 at 1,677/1,929; capped at 2,048 the same (1,677/1,918); at 1,638 0.95/0.87;
    # at 1,229 0.86/0.87; at 819 0.81/0.87 at 822. At n_ctx 2048 it never binds (409 + 409).
    recall_max_tokens: int = Field(default=2048, ge=0)
    # Recall also takes the room the history leaves under the fold trigger (after a fold the
    # window is short), up to its share again (memory/budgets.py, `recall_with_room`). Unset:
    # on when semantic recall is active (`semantic_recall`, with a model loaded), off by words
    # alone.
    # Measured (issue 28, reader runs at n_ctx 2048 on the embedded default, D-40, D-41): by
    # words the room put little more evidence in the prompt (lighthouse 0.78 -> 0.83, chitchat
    # 0.68 -> 0.70) and the 270M reader answered fewer (chitchat 0.36 -> 0.23); with MiniLM
    # the evidence found by meaning and ranked past the share's reach came in (lighthouse
    # 0.79/0.76 -> 0.84/0.83, chitchat 0.73 -> 0.80) and the answers came out even
    # (0.38/0.48 -> 0.45/0.48, 0.38/0.38 -> 0.36/0.32). Either way a turn reads 50-70% more
    # positions (recalled lines are read again every turn).
    recall_free_room: bool | None = None
    prewarm_after_fold: bool = True  # a spare full-size KV context for the fold turn
    # Room for saved KV states in the cache dir (a restart resumes warm); the least recently
    # used go first past it. 0: nothing is saved or loaded. See docs/architecture.md.
    state_cache_mb: int = Field(default=4096, ge=0)
    wide_window_ctx: int = Field(default=262144, ge=1024)
    wide_window_verbatim_ratio: float = Field(default=0.75, gt=0.0, lt=1.0)

    theme: str | None = None
    keys: dict[str, str] = Field(default_factory=dict)  # binding id -> keys, e.g. inspector = "f2"

    @field_validator("keys", mode="after")
    @classmethod
    def _keys_are_keys(cls, value: dict[str, str]) -> dict[str, str]:
        """Each binding is keys as Textual names them ("f2", "ctrl+q", "ctrl+shift+p", "?"),
        comma-separated: `quit = "not a key !!"` was taken, and then Ctrl+Q no longer quit."""
        for binding, keys in value.items():
            for key in keys.split(","):
                if not _KEY.fullmatch(key.strip()):
                    raise ValueError(
                        f"keys.{binding}: {key.strip()!r} is not a key (write keys as "
                        '"f2", "ctrl+q" or "escape", several separated by commas)'
                    )
        return value

    @field_validator("embedding_model_path", "recall_free_room", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: Any) -> Any:
        return _none_when_empty(value)

    @field_validator("persona", mode="after")
    @classmethod
    def _valid_text(cls, persona: Persona) -> Persona:
        """A name from a non-UTF-8 environment arrives with surrogate escapes: the one policy
        (untrusted_text) makes them U+FFFD, as everywhere, instead of a crash when stored."""
        name, description = scrub(persona.name), scrub(persona.description)
        if name.replaced or description.replaced:
            log.warning("persona: %s", replacement_note(name.replaced + description.replaced))
            return persona.model_copy(update={"name": name.text, "description": description.text})
        return persona

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _FileSource(settings_cls))

    def active_profile(self) -> ModelProfile:
        """The active profile with the flat overrides applied."""
        profiles = self.all_profiles()
        if self.profile not in profiles:
            known = ", ".join(sorted(profiles))
            raise ConfigError(f"profile {self.profile!r} is not defined (known: {known})")
        base = profiles[self.profile]
        overrides: dict[str, Any] = {
            name: getattr(self, name)
            for name in (
                "model_path",
                "mmproj_path",
                "n_ctx",
                "n_gpu_layers",
                "threads",
                "prompt_format",
                "embedding_model_path",
            )
            if getattr(self, name) is not None
        }
        if "model_path" in overrides and "prompt_format" not in overrides:
            # A model given by path is most likely an instruct model with its own template.
            overrides["prompt_format"] = PromptFormat.TEMPLATE
        if "model_path" in overrides and "mmproj_path" not in overrides:
            overrides["mmproj_path"] = None
        return base.model_copy(update=overrides)

    def all_profiles(self) -> dict[str, ModelProfile]:
        """The shipped profiles with the user's `[profiles.NAME]` tables: a table named like a
        shipped profile changes only the keys it sets (a model_path, say), the rest stays."""
        profiles = builtin_profiles()
        for name, mine in self.profiles.items():
            shipped = profiles.get(name)
            changed = {key: getattr(mine, key) for key in mine.model_fields_set}
            profiles[name] = mine if shipped is None else shipped.model_copy(update=changed)
        return profiles

    def db_path(self, dirs: AppDirs) -> Path:
        return (self.db or dirs.default_db).expanduser()

    def user_characters_dir(self, dirs: AppDirs) -> Path:
        return (self.characters_dir or dirs.user_characters).expanduser()

    def world_info_folder(self, dirs: AppDirs) -> Path:
        return (self.world_info_dir or dirs.world_info).expanduser()


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Explicit overrides beat `KOTONIA_*` variables, which beat the TOML file."""
    path = config_file or app_dirs().config_file
    file_values: dict[str, Any] = {}
    if path.exists():
        try:
            file_values = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
        except OSError as exc:
            raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from exc
    _check_profile_tables(path, file_values)
    token = _FILE_VALUES.set(file_values)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_describe_validation(path, exc)) from exc
    except SettingsError as exc:
        # A structured variable (KOTONIA_PROFILES, KOTONIA_PERSONA, ...) that is not JSON.
        raise ConfigError(_describe_settings_error(exc)) from exc
    finally:
        _FILE_VALUES.reset(token)


def _check_profile_tables(path: Path, values: dict[str, Any]) -> None:
    """A profile name with a dot must be quoted in TOML; unquoted, it silently makes another
    profile (`[profiles.glm-4.6v-flash]` is a profile "glm-4" holding a table "6v-flash")."""
    profiles = values.get("profiles")
    if not isinstance(profiles, dict):
        return
    for name, table in profiles.items():
        for key, value in table.items() if isinstance(table, dict) else ():
            if isinstance(value, dict):
                raise ConfigError(
                    f"{path}: [profiles.{name}.{key}] makes a profile {name!r} holding a table "
                    f'{key!r}; quote a profile name that has a dot: [profiles."{name}.{key}"]'
                )


class _FileSource(PydanticBaseSettingsSource):
    """The TOML file's values, read by `load_settings` (lowest priority)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return (_FILE_VALUES.get() or {}).get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_FILE_VALUES.get() or {})


_FILE_VALUES: ContextVar[dict[str, Any] | None] = ContextVar("kotonia_file_values", default=None)


def _describe_validation(path: Path, exc: ValidationError) -> str:
    first = exc.errors()[0]
    loc = [str(p) for p in first["loc"]]
    field = ".".join(loc) or "(root)"
    shown = repr(first.get("input"))
    shown = shown if len(shown) <= 80 else shown[:79] + "…"
    return f"{_source_of(path, loc)}: {field}: {first['msg']} (got {shown})"


def _source_of(path: Path, loc: list[str]) -> str:
    """The variable that set the value at `loc`, else the file (the lowest priority)."""
    for end in range(len(loc), 0, -1):
        name = "KOTONIA_" + "__".join(loc[:end]).upper()
        if name in os.environ:
            return name
    return str(path)


def _describe_settings_error(exc: SettingsError) -> str:
    match = re.search(r'field "(\w+)"', str(exc))
    name = f"KOTONIA_{match.group(1).upper()}" if match else "a KOTONIA_ variable"
    cause = exc.__cause__
    if isinstance(cause, json.JSONDecodeError):
        return f"{name}: not valid JSON ({cause.msg} at column {cause.colno})"
    return f"{name}: cannot be read ({' '.join(str(cause or exc).split())})"
