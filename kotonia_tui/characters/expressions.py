"""Character expressions: a card's pictures per mood, and the one a reply calls for.

A card carries them as assets (V3 `data.assets[]`, CHARX files) of type "emotion" or
"expression", each with a name (joy, anger, sad, ...) and a URI: `embeded://path` in a CHARX
archive, `__asset:path` in a PNG card (the picture in a `chara-ext-asset_:path` text chunk),
a `data:` URI, or `ccdefault:` (the card's own picture). Web addresses are not fetched.

The mood of a reply, by keyword (`expression_for`): the expression named by the word of the
reply closest to its end that is either an expression's name ("angry", "joy") or a common word
for a mood (smiles → joy or happy, tears → sadness or sad, glares → anger or angry, ...;
English, Japanese and Chinese). Words match whole in English, as parts of words in Japanese and
Chinese. With no such word, the "neutral" expression (else the card's picture).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from pathlib import Path

from kotonia_tui.characters.card import CardAsset, CardImage, CharacterCard
from kotonia_tui.characters.charx import CharxError, embedded_path, read_charx_members
from kotonia_tui.characters.images import sniff_image_mime
from kotonia_tui.characters.png_chunks import PngError, read_text_chunks
from kotonia_tui.search_text import term_spans
from kotonia_tui.terms import Term, has_unspaced, is_spaced_word_char

EXPRESSION_TYPES = ("emotion", "expression")
MAX_EXPRESSIONS = 200
MAX_EXPRESSION_BYTES = 16 * 2**20
NEUTRAL = "neutral"

# Words that show a mood -> the expression names they call for, most specific first. An
# expression's own name always counts too.
_MOODS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("joy", "happy", "happiness", "amusement", "smile", "smiling"): (
        "smile", "smiles", "smiled", "smiling", "grin", "grins", "grinned", "laugh", "laughs",
        "laughed", "laughing", "giggle", "giggles", "chuckle", "chuckles", "beam", "beams",
        "happy", "glad", "delighted", "cheerful", "joy", "笑", "嬉し", "楽し", "开心", "高兴",
    ),
    ("sadness", "sad", "grief", "sorrow", "crying"): (
        "sad", "sadly", "tears", "tear", "cry", "cries", "cried", "crying", "sob", "sobs",
        "weep", "weeps", "sigh", "sighs", "sorrow", "grief", "泣", "悲し", "寂し", "难过", "哭",
    ),
    ("anger", "angry", "annoyance", "annoyed", "mad"): (
        "angry", "anger", "furious", "rage", "glare", "glares", "glared", "scowl", "scowls",
        "snarl", "snarls", "growl", "growls", "annoyed", "irritated", "怒", "生气", "愤怒",
    ),
    ("fear", "scared", "afraid", "nervousness", "nervous"): (
        "afraid", "scared", "fear", "frightened", "terrified", "tremble", "trembles", "shiver",
        "shivers", "nervous", "nervously", "怖", "怯え", "害怕", "紧张",
    ),
    ("surprise", "surprised", "shock", "shocked"): (
        "surprised", "surprise", "gasp", "gasps", "gasped", "shocked", "astonished", "startled",
        "驚", "びっくり", "惊讶", "吃惊",
    ),
    ("embarrassment", "embarrassed", "blush", "shy"): (
        "blush", "blushes", "blushed", "blushing", "embarrassed", "flustered", "shy", "照れ",
        "恥ずかし", "害羞", "脸红",
    ),
    ("love", "desire", "caring"): ("love", "loves", "adore", "adores", "tenderly", "愛", "爱"),
    ("confusion", "confused", "curiosity", "curious", "thinking"): (
        "confused", "puzzled", "frown", "frowns", "frowned", "curious", "curiously", "wonder",
        "wonders", "困惑", "不思議", "疑惑", "好奇",
    ),
    ("disgust", "disgusted"): ("disgust", "disgusted", "grimace", "grimaces", "嫌", "恶心"),
}  # fmt: skip


@dataclass(frozen=True)
class Expression:
    name: str  # as the card names it
    image: CardImage


@dataclass(frozen=True)
class ChosenExpression:
    expression: Expression | None  # None: the card's own picture
    word: str  # the word of the reply that chose it ("" for the default)


def expression_assets(card: CharacterCard) -> list[CardAsset]:
    return [
        asset
        for asset in card.assets
        if asset.type.strip().casefold() in EXPRESSION_TYPES and asset.name.strip()
    ][:MAX_EXPRESSIONS]


def load_expressions(card: CharacterCard) -> tuple[list[Expression], list[str]]:
    """The card's expression pictures, and one line per asset that could not be read."""
    assets = expression_assets(card)
    if not assets:
        return [], []
    problems: list[str] = []
    source = card.source_path
    data = b""
    if source is not None and any(_needs_file(a.uri) for a in assets):
        try:
            data = Path(source).read_bytes()
        except OSError as exc:
            return [], [f"{source}: cannot be read for its expressions: {exc.strerror or exc}"]
    members = _charx_members(data, assets, problems, source)
    chunks = _png_assets(data, assets, problems, source)
    found: list[Expression] = []
    for asset in assets:
        where = f"{source or card.key}: expression {asset.name!r}"
        picture = _picture(asset, card, members, chunks)
        if isinstance(picture, str):
            problems.append(f"{where}: {picture}")
            continue
        mime = sniff_image_mime(picture)
        if mime is None:
            problems.append(f"{where}: not a PNG, JPEG, WebP or GIF picture")
            continue
        found.append(Expression(asset.name.strip(), CardImage(data=picture, mime=mime)))
    return found, problems


def _needs_file(uri: str) -> bool:
    return embedded_path(uri) is not None or uri.startswith("__asset:")


def _charx_members(
    data: bytes, assets: list[CardAsset], problems: list[str], source: Path | None
) -> dict[str, bytes]:
    paths = [p for a in assets if (p := embedded_path(a.uri)) is not None]
    if not paths or not data:
        return {}
    try:
        return read_charx_members(data, paths, MAX_EXPRESSION_BYTES)
    except CharxError as exc:
        problems.append(f"{source}: expressions: {exc}")
        return {}


def _png_assets(
    data: bytes, assets: list[CardAsset], problems: list[str], source: Path | None
) -> dict[str, str]:
    if not data or not any(a.uri.startswith("__asset:") for a in assets):
        return {}
    try:
        chunks = read_text_chunks(data)
    except PngError as exc:
        problems.append(f"{source}: expressions: {exc}")
        return {}
    prefix = "chara-ext-asset_:"
    return {c.keyword[len(prefix) :]: c.text for c in chunks if c.keyword.startswith(prefix)}


def _picture(
    asset: CardAsset, card: CharacterCard, members: dict[str, bytes], chunks: dict[str, str]
) -> bytes | str:
    """The asset's bytes, or why there are none (a short reason)."""
    uri = asset.uri.strip()
    path = embedded_path(uri)
    if path is not None:
        return members.get(path, f"{path} is not in the CHARX archive")
    if uri.startswith("__asset:"):
        name = uri[len("__asset:") :]
        if name not in chunks:
            return f"no chara-ext-asset_:{name} chunk in the PNG"
        return _base64(chunks[name])
    if uri.startswith("data:"):
        head, _, body = uri.partition(",")
        if ";base64" not in head:
            return "a data: URI that is not base64"
        return _base64(body)
    if uri == "ccdefault:" or not uri:
        return card.image.data if card.image is not None else "the card has no picture"
    if re.match(r"https?://", uri):
        return "a web address (pictures are not downloaded)"
    return f"an asset URI this app does not read ({uri[:40]!r})"


def _base64(text: str) -> bytes | str:
    if len(text) > MAX_EXPRESSION_BYTES * 4 // 3 + 4:
        return f"larger than {MAX_EXPRESSION_BYTES // 2**20} MB"
    try:
        return base64.b64decode(text, validate=False)
    except (binascii.Error, ValueError):
        return "not valid base64"


def expression_for(text: str, expressions: list[Expression]) -> ChosenExpression:
    """The expression `text` (a reply) calls for, by the rule in this module's docstring."""
    by_name = {e.name.casefold(): e for e in expressions}
    if not by_name:
        return ChosenExpression(None, "")
    candidates: dict[str, list[str]] = {name: [name] for name in by_name}
    for names, words in _MOODS.items():
        wanted = [n for n in names if n in by_name]
        for word in (*words, *names):
            candidates.setdefault(word, []).extend(wanted)
    best: tuple[int, str, Expression] | None = None
    for word, called in candidates.items():
        if not called:
            continue
        whole = not has_unspaced(word)  # spaced words count whole; Japanese, Chinese as parts
        # term_spans matches at a word's start; a whole word must end there too ("smile" is
        # not in "smiles": that word has its own entry).
        ends = [
            end
            for _start, end in term_spans(text, [Term(word, not whole)])
            if not whole or end == len(text) or not is_spaced_word_char(text[end])
        ]
        if ends and (best is None or ends[-1] > best[0]):
            best = (ends[-1], word, by_name[called[0]])
    if best is not None:
        return ChosenExpression(best[2], best[1])
    return ChosenExpression(by_name.get(NEUTRAL), "")
