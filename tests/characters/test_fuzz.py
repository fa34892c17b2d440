"""Whatever bytes a card file holds, loading gives a card or a CardError, never a crash."""

from __future__ import annotations

import base64
import io
import json
import zipfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kotonia_tui.characters import CardError, CharacterCard, load_card

from .builders import png_with_text, tavernai_comment, webp_with_comment

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=20,
)
entry_like = st.fixed_dictionaries(
    {"keys": st.lists(st.text(max_size=8), max_size=3) | json_values},
    optional={
        name: json_values | st.booleans()
        for name in ("content", "use_regex", "selective", "secondary_keys", "insertion_order")
    },
)
data_like = st.fixed_dictionaries(
    {"name": st.text(min_size=1, max_size=10) | json_values},
    optional={
        **{
            name: json_values
            for name in ("description", "alternate_greetings", "tags", "extensions", "assets")
        },
        "character_book": st.fixed_dictionaries(
            {"entries": st.lists(entry_like, max_size=3) | json_values},
            optional={"scan_depth": json_values, "recursive_scanning": json_values},
        )
        | json_values,
    },
)
card_like = (
    st.fixed_dictionaries(
        {"spec": st.sampled_from(["chara_card_v2", "chara_card_v3"]), "data": data_like},
        optional={"spec_version": json_values},
    )
    | st.fixed_dictionaries(
        {"spec": st.sampled_from(["chara_card_v2", "chara_card_v3"]), "data": json_values},
        optional={"spec_version": json_values},
    )
    | st.dictionaries(
        st.sampled_from(
            ["name", "description", "first_mes", "alternate_greetings", "character_book"]
        ),
        json_values,
    )
)


def _load(tmp: Path, name: str, data: bytes) -> None:
    path = tmp / name
    path.write_bytes(data)
    try:
        card = load_card(path)
    except CardError as exc:
        assert "\n" not in str(exc)
        assert str(exc).startswith(f"{name}: ")
    else:
        assert isinstance(card, CharacterCard)
        card.to_json_dict()


@SETTINGS
@given(data=st.binary(max_size=400), suffix=st.sampled_from([".png", ".json", ".charx", ".webp"]))
def test_arbitrary_bytes(tmp_path_factory, data, suffix):
    _load(tmp_path_factory.mktemp("fuzz"), f"card{suffix}", data)


@SETTINGS
@given(tail=st.binary(max_size=300), cut=st.integers(min_value=0, max_value=400))
def test_damaged_pngs(tmp_path_factory, tail, cut):
    good = png_with_text({"chara": base64.b64encode(b'{"name": "A"}').decode()})
    _load(tmp_path_factory.mktemp("fuzz"), "card.png", good[:cut] + tail)


@SETTINGS
@given(
    tail=st.binary(max_size=300),
    cut=st.integers(min_value=0, max_value=400),
    flip=st.integers(min_value=0, max_value=399),
)
def test_damaged_webps(tmp_path_factory, tail, cut, flip):
    good = bytearray(webp_with_comment(tavernai_comment({"name": "A"})))
    good[flip % len(good)] ^= 0xFF  # a damaged byte anywhere: RIFF sizes, IFD counts, offsets
    _load(tmp_path_factory.mktemp("fuzz"), "card.webp", bytes(good[:cut]) + tail)


@SETTINGS
@given(obj=card_like)
def test_arbitrary_json_shapes(tmp_path_factory, obj):
    _load(tmp_path_factory.mktemp("fuzz"), "card.json", json.dumps(obj).encode())


@SETTINGS
@given(obj=card_like, text=st.text(max_size=60))
def test_arbitrary_png_chunks(tmp_path_factory, obj, text):
    encoded = base64.b64encode(json.dumps(obj).encode()).decode()
    chunk = text.encode("latin-1", "replace").decode("latin-1")
    data = png_with_text({"ccv3": encoded, "chara": chunk})
    _load(tmp_path_factory.mktemp("fuzz"), "card.png", data)


# Member names zipfile itself can write (it drops NUL and everything after it).
member_names = st.text(min_size=1, max_size=20).filter(lambda n: "\x00" not in n)


@SETTINGS
@given(obj=card_like, member=st.binary(max_size=200), name=member_names)
def test_arbitrary_charx(tmp_path_factory, obj, member, name):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("card.json", json.dumps(obj))
        archive.writestr(name, member)
    _load(tmp_path_factory.mktemp("fuzz"), "card.charx", buffer.getvalue())
