"""Loading card files: one with `load_card`, whole folders with `load_cards`.

Card files are `.json` (V1/V2/V3; a picture beside it named `<stem>.png`, `.jpg`, `.jpeg` or
`.webp` is its picture), `.png` (base64 JSON in a `ccv3` or `chara` text chunk; `ccv3` wins when
both are there), `.charx` and `.webp` (TavernAI's: the JSON in the EXIF `UserComment`,
webp_card.py). A card's key is its file stem.

A `.webp` beside another card file of the same stem is no second card: a JSON card's picture,
and passed over beside a PNG or CHARX card (they carry their own); a lone one with no card in
it is reported, as a PNG with none is. Other pictures (`.jpg`, `.gif`, ...) were never
card files and are passed over.

Every failure is a `CardError` with one line naming the file and the field or part that is
wrong; a folder with a broken card still loads all the others.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kotonia_tui.characters.card import CardImage, CharacterCard
from kotonia_tui.characters.card_json import parse_card_object
from kotonia_tui.characters.charx import CharxError, read_charx
from kotonia_tui.characters.errors import CardError, CardRepaired, CardShadowed, FieldError
from kotonia_tui.characters.images import PICTURE_SUFFIXES, sniff_image_mime
from kotonia_tui.characters.json_fields import decode_json_bytes
from kotonia_tui.characters.png_chunks import PngError, TextChunk, read_text_chunks
from kotonia_tui.characters.webp_card import WebpError, card_json_bytes, user_comment
from kotonia_tui.untrusted_text import replacement_note, scrub

CARD_SUFFIXES = (".json", ".png", ".charx", ".webp")
MAX_CARD_FILE_BYTES = 96 * 2**20  # a PNG or CHARX card carries its picture; JSON far less
PNG_CARD_KEYWORDS = ("ccv3", "chara")  # in order of preference


def load_card(path: Path, notes: list[CardError] | None = None) -> CharacterCard:
    """Read one card file. Raises `CardError` (one line: file, field, problem); what was
    repaired on the way (invalid Unicode replaced, a field read as SillyTavern reads it) is
    appended to `notes` as one `CardRepaired` note for the card."""
    path = Path(path)
    data = _read_card_file(path)
    suffix = path.suffix.lower()
    where = ""
    if suffix == ".json":
        obj, replaced = _decode_json(path, data, "")
        image = _sibling_picture(path)
    elif suffix == ".png":
        obj, replaced, where = _png_card_json(path, data)
        image = CardImage(data=data, mime="image/png")
    elif suffix == ".charx":
        try:
            obj, image, replaced = read_charx(data)
        except CharxError as exc:
            raise CardError(path, str(exc)) from exc
        where = " (in card.json)"
    elif suffix == ".webp":
        obj, replaced = _webp_card_json(path, data)
        image = CardImage(data=data, mime="image/webp")
        where = " (in the EXIF UserComment)"
    else:
        raise CardError(path, "not a card file (expected .json, .png, .charx or .webp)")
    repairs = [replacement_note(replaced)] if replaced else []
    try:
        fields = parse_card_object(obj, repairs)
    except FieldError as exc:
        raise CardError(path, f"{exc}{where}") from exc
    if repairs and notes is not None:
        notes.append(CardRepaired(path, "; ".join(f"{repair}{where}" for repair in repairs)))
    return CharacterCard(
        # A file name that is not UTF-8 keeps its bytes in `source_path`; its key is text
        # (U+FFFD for those bytes), so the key the listing shows is one that can be typed.
        key=scrub(path.stem).text,
        source_path=path,
        card_hash=hashlib.sha256(data).hexdigest(),
        image=image,
        **fields,
    )


def load_cards(folders: Sequence[Path]) -> tuple[list[CharacterCard], list[CardError]]:
    """Every card in the folders, sorted by name, and the problems found.

    Keys are unique: when two folders hold the same stem, the later folder (the user's) wins and
    a `CardShadowed` note names the file that lost. A missing folder is skipped silently (the
    user's folder does not exist until they add a card).
    """
    by_key: dict[str, CharacterCard] = {}
    problems: list[CardError] = []
    for folder in folders:
        for card in _load_folder(Path(folder), problems):
            earlier = by_key.get(card.key)
            if earlier is not None and earlier.source_path is not None:
                problems.append(
                    CardShadowed(
                        earlier.source_path,
                        f"key {card.key!r} is overridden by {card.source_path} (later folders win)",
                    )
                )
            by_key[card.key] = card
    cards = sorted(by_key.values(), key=lambda c: (c.name.casefold(), c.key))
    return cards, problems


def _load_folder(folder: Path, problems: list[CardError]) -> list[CharacterCard]:
    if not folder.exists():
        return []
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        problems.append(CardError(folder, f"cannot be listed ({exc.strerror or exc})"))
        return []
    files = [
        p
        for p in entries
        if p.suffix.lower() in CARD_SUFFIXES and not p.name.startswith(".") and p.is_file()
    ]
    # A picture beside a JSON card is that card's picture, not a second card; a .webp beside
    # a PNG or CHARX card is passed over (a TavernAI .webp converted to PNG, say): those
    # cards carry their own picture.
    json_stems = {p.stem for p in files if p.suffix.lower() == ".json"}
    card_stems = {p.stem for p in files if p.suffix.lower() != ".webp"}
    files = [
        p
        for p in files
        if not (p.suffix.lower() == ".png" and p.stem in json_stems)
        and not (p.suffix.lower() == ".webp" and p.stem in card_stems)
    ]
    cards: dict[str, CharacterCard] = {}
    for path in files:
        try:
            card = load_card(path, problems)
        except CardError as exc:
            problems.append(exc)
            continue
        if card.key in cards:
            other = cards[card.key].source_path
            name = other.name if other else card.key
            problems.append(
                CardShadowed(
                    path, f"key {card.key!r} is already used by {name}; this file is ignored"
                )
            )
            continue
        cards[card.key] = card
    return list(cards.values())


def _read_card_file(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_CARD_FILE_BYTES:
            raise CardError(
                path,
                f"is {size / 2**20:.0f} MB; a card file may be at most "
                f"{MAX_CARD_FILE_BYTES // 2**20} MB",
            )
        return path.read_bytes()
    except OSError as exc:
        raise CardError(path, f"cannot be read ({exc.strerror or exc})") from exc


def _decode_json(path: Path, data: bytes, where: str) -> tuple[Any, int]:
    try:
        return decode_json_bytes(data)
    except ValueError as exc:
        raise CardError(path, f"{where}{exc}") from exc


def _png_card_json(path: Path, data: bytes) -> tuple[Any, int, str]:
    """The card JSON inside a PNG, and a note naming the chunk it came from."""
    try:
        chunks = read_text_chunks(data)
    except PngError as exc:
        raise _unreadable_picture(path, data, "image/png", "PNG", exc) from exc
    by_keyword: dict[str, TextChunk] = {}
    for chunk in chunks:
        by_keyword.setdefault(chunk.keyword.lower(), chunk)
    for keyword in PNG_CARD_KEYWORDS:
        found = by_keyword.get(keyword)
        if found is not None:
            label = f"{found.chunk_type} chunk {found.keyword!r}"
            raw = _decode_base64(path, found.text, label)
            return (*_decode_json(path, raw, f"{label}: "), f" (in {label})")
    raise CardError(path, "PNG has no character card (no 'ccv3' or 'chara' text chunk)")


def _unreadable_picture(
    path: Path, data: bytes, mime: str, kind: str, exc: ValueError
) -> CardError:
    """Why a picture card (`kind`, of `mime`) could not be read: another kind of picture under
    its name, or the reader's one line on the damage."""
    found = sniff_image_mime(data)
    if found and found != mime:
        return CardError(path, f"not a {kind} file (it is {found})")
    return CardError(path, str(exc))


def _webp_card_json(path: Path, data: bytes) -> tuple[Any, int]:
    """The card JSON in a WebP's EXIF `UserComment`, as TavernAI wrote it."""
    try:
        found = user_comment(data)
    except WebpError as exc:
        raise _unreadable_picture(path, data, "image/webp", "WebP", exc) from exc
    raw = card_json_bytes(*found) if found is not None else None
    if raw is None:
        raise CardError(
            path,
            "a WebP picture with no card data (no card JSON in its EXIF UserComment, where "
            "TavernAI kept it): save the card as PNG or JSON, or put its .json beside it",
        )
    return _decode_json(path, raw, "EXIF UserComment: ")


def _decode_base64(path: Path, text: str, label: str) -> bytes:
    compact = "".join(text.split())
    # Some writers drop the trailing padding; restore it rather than reject the card.
    compact += "=" * (-len(compact) % 4)
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CardError(path, f"{label} is not valid base64") from exc


def _sibling_picture(path: Path) -> CardImage | None:
    for suffix in PICTURE_SUFFIXES:
        for candidate in (path.with_suffix(suffix), path.with_suffix(suffix.upper())):
            try:
                data = candidate.read_bytes()
            except OSError:
                continue
            mime = sniff_image_mime(data)
            if mime is not None:
                return CardImage(data=data, mime=mime)
    return None
