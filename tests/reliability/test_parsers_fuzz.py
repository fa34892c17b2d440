"""Every parser that takes outside input: any input gives a result or one clear error.

Complements tests/characters/test_fuzz.py (cards: arbitrary bytes, damaged PNGs, JSON shapes,
PNG text chunks, CHARX member names) with what it does not cover: settings TOML, SillyTavern and
JSON chat imports (a failed import leaves zero conversations: no partial write), image checks
(attach and decode), and damaged CHARX archives.
"""

from __future__ import annotations

import io
import json
import math
import struct
import zipfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from kotonia_tui.characters import CardError, load_card
from kotonia_tui.chat.images import AttachmentError, check_image
from kotonia_tui.chatfiles import ImportFormatError, read_chat_file
from kotonia_tui.config import ConfigError, Settings, load_settings
from kotonia_tui.domain import ImageInput
from kotonia_tui.engine.errors import ImageError
from kotonia_tui.engine.multimodal import decode_image
from kotonia_tui.store import Store, StoreError

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text.strip(), text
    return text


# ---- settings TOML ------------------------------------------------------------------------

SETTING_NAMES = [*sorted(Settings.model_fields), "unknown_key"]
PROFILE_NAMES = [
    "model_path",
    "n_ctx",
    "reply_max_tokens",
    "temperature",
    "backend",
    "top_p",
    "prompt_format",
    "reasoning_tags",
    "threads",
    "seed",
    "nonsense",
]

toml_scalars = (
    st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
toml_values = st.recursive(
    toml_scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), inner, max_size=3)
    ),
    max_leaves=8,
)


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "0.0"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"


@st.composite
def toml_documents(draw: st.DrawFn) -> str:
    top = draw(st.dictionaries(st.sampled_from(SETTING_NAMES), toml_values, max_size=5))
    lines = [f"{k} = {toml_value(v)}" for k, v in top.items() if k != "profiles"]
    if draw(st.booleans()):
        name = draw(st.sampled_from(["default", "mine", "x"]))
        profile = draw(st.dictionaries(st.sampled_from(PROFILE_NAMES), toml_values, max_size=4))
        lines += ["", f"[profiles.{name}]"] + [f"{k} = {toml_value(v)}" for k, v in profile.items()]
    return "\n".join(lines) + "\n"


def _load(path: Path) -> None:
    try:
        loaded = load_settings(path)
        loaded.active_profile()
    except ConfigError as exc:
        assert str(path) in one_line(exc) or "profile" in str(exc)


@pytest.fixture
def file_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's KOTONIA_THREADS (tests/conftest.py) would win over a file's `threads`: the
    file's own value must be read and checked."""
    monkeypatch.delenv("KOTONIA_THREADS")


@SETTINGS
@given(text=toml_documents())
def test_settings_toml_shapes(tmp_path_factory, file_threads, text):
    path = tmp_path_factory.mktemp("toml") / "config.toml"
    path.write_text(text, encoding="utf-8")
    _load(path)


@SETTINGS
@given(data=st.binary(max_size=300) | st.text(max_size=200).map(str.encode))
def test_settings_toml_arbitrary_bytes(tmp_path_factory, file_threads, data):
    path = tmp_path_factory.mktemp("toml") / "config.toml"
    path.write_bytes(data)
    _load(path)


# ---- chat imports (SillyTavern .jsonl, JSON lists) -----------------------------------------

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=15)
)
json_any = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
st_message = st.fixed_dictionaries(
    {},
    optional={
        "name": json_scalars,
        "is_user": json_any,
        "is_system": json_any,
        "send_date": json_scalars,
        "mes": json_any,
        "swipes": st.lists(json_scalars, max_size=3) | json_any,
        "swipe_id": json_scalars,
        "swipe_info": json_any,
        "extra": json_any,
    },
)
st_header = st.fixed_dictionaries(
    {},
    optional={
        "user_name": json_scalars,
        "character_name": json_scalars,
        "create_date": json_scalars,
        "chat_metadata": json_any,
    },
)


@st.composite
def chat_files(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["jsonl", "list", "junk"]))
    if kind == "jsonl":
        lines = [json.dumps(draw(st_header))] + [
            json.dumps(m) for m in draw(st.lists(st_message, max_size=5))
        ]
        if draw(st.booleans()):
            lines.insert(draw(st.integers(0, len(lines))), draw(st.text(max_size=10)))
        return "\n".join(lines).encode()
    if kind == "list":
        items = draw(
            st.lists(
                st.fixed_dictionaries(
                    {}, optional={"speaker": json_scalars, "text": json_any, "role": json_scalars}
                )
                | json_any,
                max_size=4,
            )
        )
        return json.dumps(items).encode()
    return draw(st.binary(max_size=200))


@SETTINGS
@given(data=chat_files(), suffix=st.sampled_from([".jsonl", ".json"]))
def test_chat_import_all_or_nothing(tmp_path_factory, data, suffix):
    folder = tmp_path_factory.mktemp("import")
    path = folder / f"chat{suffix}"
    path.write_bytes(data)
    with Store.open(folder / "db.sqlite3") as store:
        try:
            conv, messages = read_chat_file(path, "Ann", "Seraphina", "sera")
            store.import_conversation(conv, messages)
        except (ImportFormatError, StoreError) as exc:
            assert path.name in one_line(exc) or str(store.path) in str(exc)
            # No partial write: nothing of a failed import is stored.
            assert store.list_conversations() == []
        else:
            (stored,) = store.list_conversations()
            assert store.message_count(stored.id) == len(messages)
            assert store.integrity_check() == "ok"


# ---- images -------------------------------------------------------------------------------


def _encoded(fmt: str, size: tuple[int, int], mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, (10, 20, 30) if mode == "RGB" else 7).save(buffer, format=fmt)
    return buffer.getvalue()


VALID = {
    fmt: _encoded(fmt, (12, 9), "RGB" if fmt != "GIF" else "P")
    for fmt in ("PNG", "JPEG", "WEBP", "GIF", "BMP")
}


@st.composite
def image_bytes(draw: st.DrawFn) -> bytes:
    base = VALID[draw(st.sampled_from(sorted(VALID)))]
    how = draw(st.sampled_from(["cut", "flip", "splice", "random", "whole"]))
    if how == "cut":
        return base[: draw(st.integers(0, len(base)))]
    if how == "flip":
        data = bytearray(base)
        for _ in range(draw(st.integers(1, 6))):
            index = draw(st.integers(0, len(data) - 1))
            data[index] = draw(st.integers(0, 255))
        return bytes(data)
    if how == "splice":
        cut = draw(st.integers(0, len(base)))
        return base[:cut] + draw(st.binary(max_size=64)) + base[cut:]
    if how == "random":
        return draw(st.binary(max_size=256))
    return base


@SETTINGS
@given(data=image_bytes())
def test_attached_images_are_checked(data):
    try:
        _data, mime, width, height = check_image(data, "picture.png")
    except AttachmentError as exc:
        assert one_line(exc).startswith("picture.png: ")
    else:
        assert mime in ("image/png", "image/jpeg", "image/webp") and width > 0 and height > 0


@SETTINGS
@given(data=image_bytes())
def test_images_decode_or_fail_clearly(data):
    try:
        width, height, rgb = decode_image(ImageInput(data=data, key="k" * 64, mime="image/png"))
    except ImageError as exc:
        assert one_line(exc).startswith("image kkkk")
    else:
        assert len(rgb) == width * height * 3


def test_a_huge_declared_image_is_refused_before_decoding():
    # A 30,000 x 30,000 PNG header with a tiny body: refused by size, never decoded.
    header = _encoded("PNG", (1, 1))

    ihdr = struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    forged = header[:8] + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    forged += header[8 + 25 :]
    with pytest.raises(AttachmentError, match=r"too large|decompression bomb"):
        check_image(forged, "bomb.png")
    with pytest.raises(ImageError, match=r"too large|decompression bomb"):
        decode_image(ImageInput(data=forged, key="b" * 64, mime="image/png"))


# ---- damaged CHARX archives ---------------------------------------------------------------


def _charx(card: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("card.json", card)
        archive.writestr("assets/icon/main.png", VALID["PNG"])
    return buffer.getvalue()


GOOD_CARD = json.dumps(
    {"spec": "chara_card_v3", "spec_version": "3.0", "data": {"name": "Wren", "first_mes": "Hi"}}
).encode()


@SETTINGS
@given(
    card=st.sampled_from([GOOD_CARD, b"\xff\xfe not utf-8", b"{", b"[]", GOOD_CARD * 2]),
    cut=st.integers(0, 2000),
    noise=st.binary(max_size=40),
)
def test_damaged_charx_archives(tmp_path_factory, card, cut, noise):
    data = _charx(card)
    data = data[:cut] + noise + data[cut + len(noise) :] if cut < len(data) else data
    path = tmp_path_factory.mktemp("charx") / "wren.charx"
    path.write_bytes(data)
    try:
        loaded = load_card(path)
    except CardError as exc:
        assert one_line(exc).startswith("wren.charx: ")
    else:
        assert loaded.name
