"""The pictures of the sample characters, drawn with Pillow, and the script that builds their cards.

The card text lives in `assets/sample_cards/<key>.json` (V3 JSON, the source of truth); this
module draws each character's portrait and writes `characters/<key>.png` with both the `ccv3` and
`chara` chunks. Run `python -m kotonia_tui.characters.sample_art` from a checkout to rebuild them.
The drawings are deterministic (seeded rain, no clock reads), so a rebuild changes nothing unless
the text or the drawing code changed.
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Callable
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter

from kotonia_tui.characters.loader import load_card
from kotonia_tui.characters.writers import write_png_card

WIDTH, HEIGHT = 400, 600
SCALE = 2  # drawn at twice the size, then reduced: cheap anti-aliasing
W, H = WIDTH * SCALE, HEIGHT * SCALE

RGB = tuple[int, int, int]
Box = tuple[float, float, float, float]


def _gradient(top: RGB, bottom: RGB) -> Image.Image:
    image = Image.new("RGBA", (W, H))
    draw = ImageDraw.Draw(image)
    for y in range(H):
        t = y / (H - 1)
        color = tuple(round(a + (b - a) * t) for a, b in zip(top, bottom, strict=True))
        draw.line([(0, y), (W, y)], fill=(*color, 255))
    return image


def _glow(base: Image.Image, box: Box, color: RGB, alpha: int, blur: int) -> None:
    """A soft light: a blurred ellipse composited onto `base`."""
    layer = Image.new("RGBA", base.size, (0, 0, 0, 0))
    ImageDraw.Draw(layer).ellipse(box, fill=(*color, alpha))
    base.alpha_composite(layer.filter(ImageFilter.GaussianBlur(blur)))


def _rain(base: Image.Image, seed: int, color: RGB, count: int) -> None:
    rng = random.Random(seed)
    layer = Image.new("RGBA", base.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    for _ in range(count):
        x, y = rng.uniform(0, W), rng.uniform(0, H)
        length = rng.uniform(30, 70)
        draw.line(
            [(x, y), (x - length * 0.25, y + length)], fill=(*color, rng.randint(50, 120)), width=3
        )
    base.alpha_composite(layer)


def _face(draw: ImageDraw.ImageDraw, skin: RGB, eye: RGB, mouth: RGB) -> None:
    """Head, eyes, mouth, in a simple friendly style; the head is centred at (400, 565)."""
    draw.rectangle((355, 690, 445, 800), fill=skin)  # neck
    draw.ellipse((265, 400, 535, 730), fill=skin)
    for cx in (345, 455):
        draw.ellipse((cx - 17, 572, cx + 17, 616), fill=eye)
        draw.ellipse((cx - 7, 579, cx + 3, 591), fill=(255, 255, 255))
    draw.arc((372, 640, 428, 676), start=20, end=160, fill=mouth, width=5)


def _blush(base: Image.Image) -> None:
    for cx in (318, 482):
        _glow(base, (cx - 34, 628, cx + 34, 658), (240, 130, 140), 110, 8)


def _brows(draw: ImageDraw.ImageDraw, color: RGB) -> None:
    draw.arc((318, 540, 372, 566), start=200, end=340, fill=color, width=6)
    draw.arc((428, 540, 482, 566), start=200, end=340, fill=color, width=6)


def draw_rowan() -> Image.Image:
    """Rowan Ashby: a clockmaker before a great clock face stopped at a quarter past three."""
    image = _gradient((38, 66, 84), (18, 26, 44))
    _glow(image, (40, 150, 760, 870), (255, 214, 150), 70, 40)
    draw = ImageDraw.Draw(image)
    cx, cy, r = 400, 500, 330
    draw.ellipse(
        (cx - r, cy - r, cx + r, cy + r), fill=(236, 222, 190), outline=(168, 132, 72), width=14
    )
    draw.ellipse(
        (cx - r + 30, cy - r + 30, cx + r - 30, cy + r - 30), outline=(190, 160, 110), width=3
    )
    for tick in range(60):
        angle = math.radians(tick * 6)
        inner = r - (62 if tick % 5 == 0 else 46)
        outer = r - 36
        draw.line(
            [
                (cx + inner * math.sin(angle), cy - inner * math.cos(angle)),
                (cx + outer * math.sin(angle), cy - outer * math.cos(angle)),
            ],
            fill=(92, 70, 44),
            width=8 if tick % 5 == 0 else 3,
        )
    for degrees, length, width in ((97.5, 170, 16), (90.0, 250, 9)):  # 3:15
        angle = math.radians(degrees)
        end = (cx + length * math.sin(angle), cy - length * math.cos(angle))
        draw.line([(cx, cy), end], fill=(60, 44, 30), width=width)
    _rain(image, seed=3, color=(200, 220, 235), count=90)
    draw = ImageDraw.Draw(image)
    draw.ellipse((110, 790, 690, 1500), fill=(108, 72, 46))  # coat
    draw.polygon([(330, 790), (470, 790), (400, 930)], fill=(236, 228, 210))  # shirt
    draw.polygon(
        [(300, 800), (400, 880), (500, 800), (500, 840), (400, 930), (300, 840)], fill=(52, 92, 78)
    )
    draw.rounded_rectangle((300, 950, 500, 1250), radius=30, fill=(84, 58, 40))  # apron
    skin, hair = (232, 196, 168), (74, 70, 68)
    _face(draw, skin, (52, 60, 70), (120, 70, 60))
    draw.chord((262, 392, 538, 640), start=180, end=360, fill=hair)  # short hair
    for x in range(282, 520, 46):  # a soft, uneven fringe instead of a hard line
        draw.ellipse((x, 488, x + 56, 540), fill=hair)
    draw.ellipse((262, 500, 292, 600), fill=hair)  # sideburns
    draw.ellipse((508, 500, 538, 600), fill=hair)
    draw.arc((300, 410, 560, 620), start=250, end=300, fill=(178, 178, 182), width=12)  # silver
    draw.chord((300, 602, 500, 760), start=0, end=180, fill=(150, 146, 142))  # beard
    draw.arc((372, 636, 428, 672), start=20, end=160, fill=(110, 60, 52), width=5)
    _brows(draw, (64, 60, 58))
    # The loupe he never quite takes off, hanging from a cord.
    draw.line([(470, 800), (520, 900)], fill=(40, 32, 24), width=4)
    draw.ellipse((498, 890, 552, 944), fill=(200, 168, 90), outline=(90, 70, 30), width=6)
    return image


def draw_tsumugi() -> Image.Image:
    """Tsukishima Tsumugi: a bookseller with round glasses, books and a rainy window behind her."""
    image = _gradient((176, 178, 214), (70, 74, 128))
    _glow(image, (120, 160, 680, 760), (255, 244, 220), 90, 50)
    draw = ImageDraw.Draw(image)
    # The shop's shelves: rows of book spines in muted colours.
    rng = random.Random(7)
    spines = [(142, 84, 84), (84, 110, 140), (196, 170, 112), (96, 128, 96), (160, 120, 150)]
    for shelf_y in (200, 470, 740, 1010):
        x = 0
        while x < W:
            width = rng.randint(26, 54)
            height = rng.randint(150, 210)
            color = spines[rng.randrange(len(spines))]
            draw.rectangle(
                (x, shelf_y + 230 - height, x + width - 4, shelf_y + 230), fill=(*color, 255)
            )
            x += width
        draw.rectangle((0, shelf_y + 230, W, shelf_y + 250), fill=(92, 66, 52))
    image.alpha_composite(Image.new("RGBA", (W, H), (60, 60, 100, 110)))
    _rain(image, seed=11, color=(230, 236, 255), count=70)
    draw = ImageDraw.Draw(image)
    hair = (30, 28, 36)
    draw.rounded_rectangle((245, 410, 555, 860), radius=120, fill=hair)  # shoulder-length hair
    draw.ellipse((120, 800, 680, 1500), fill=(46, 62, 112))  # indigo cardigan
    draw.polygon([(340, 800), (460, 800), (400, 960)], fill=(244, 240, 230))  # blouse
    draw.line([(400, 960), (400, 1200)], fill=(30, 40, 80), width=6)
    for y in (1010, 1080, 1150):
        draw.ellipse((410, y, 426, y + 16), fill=(214, 200, 160))  # buttons
    skin = (246, 222, 204)
    _face(draw, skin, (48, 40, 56), (170, 80, 90))
    _blush(image)
    draw = ImageDraw.Draw(image)
    draw.chord((258, 396, 542, 640), start=180, end=360, fill=hair)
    draw.polygon([(266, 510), (534, 510), (522, 556), (278, 556)], fill=hair)  # straight fringe
    _brows(draw, (40, 36, 44))
    for ex in (345, 455):
        draw.ellipse((ex - 46, 548, ex + 46, 640), outline=(120, 90, 60), width=6)  # round glasses
    draw.arc((383, 578, 417, 604), start=200, end=340, fill=(120, 90, 60), width=6)
    # The old braided cord that ties her hair, by her left shoulder.
    draw.rounded_rectangle((520, 760, 548, 800), radius=8, fill=(196, 56, 64))
    draw.ellipse((506, 800, 580, 920), fill=hair)
    return image


def draw_wanzhou() -> Image.Image:
    """Lin Wanzhou: a storyteller by a stone bridge at dusk, a red lantern and a folding fan."""
    image = _gradient((246, 190, 140), (150, 96, 120))
    _glow(image, (500, 120, 760, 380), (255, 236, 190), 140, 40)  # setting sun
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 820, W, H), fill=(86, 112, 140))  # the river
    for y in range(850, H, 46):
        draw.line([(40 + (y % 90), y), (260 + (y % 90), y)], fill=(170, 190, 210), width=3)
        draw.line(
            [(480 - (y % 70), y + 20), (700 - (y % 70), y + 20)], fill=(170, 190, 210), width=3
        )
    draw.pieslice((-80, 540, 880, 1120), start=180, end=360, fill=(112, 96, 104))  # stone bridge
    draw.pieslice((60, 680, 740, 1160), start=180, end=360, fill=(86, 112, 140))
    draw.rectangle((0, 520, W, 560), fill=(96, 80, 90))
    _glow(image, (30, 230, 250, 500), (255, 120, 60), 150, 30)
    draw = ImageDraw.Draw(image)
    draw.line([(140, 120), (140, 270)], fill=(60, 40, 40), width=5)
    draw.ellipse((70, 270, 210, 460), fill=(204, 44, 44))  # lantern
    for y in (300, 365, 430):
        draw.arc((70, y - 60, 210, y + 60), start=20, end=160, fill=(150, 30, 30), width=3)
    draw.rectangle((110, 256, 170, 282), fill=(214, 170, 70))
    draw.rectangle((110, 448, 170, 472), fill=(214, 170, 70))
    draw.line([(140, 472), (140, 530)], fill=(214, 170, 70), width=5)
    hair = (34, 28, 30)
    draw.ellipse((330, 300, 470, 430), fill=hair)  # bun
    draw.line([(290, 330), (510, 390)], fill=(196, 170, 100), width=9)  # bamboo hairpin
    draw.ellipse((120, 800, 680, 1500), fill=(232, 238, 242))  # moon-white shirt
    draw.rectangle((360, 790, 440, 840), fill=(232, 238, 242))
    draw.line([(360, 800), (360, 840), (440, 840), (440, 800)], fill=(70, 100, 140), width=8)
    draw.line([(400, 840), (520, 1000)], fill=(70, 100, 140), width=8)  # diagonal closing
    skin = (244, 216, 190)
    _face(draw, skin, (40, 30, 30), (190, 70, 70))
    _blush(image)
    draw = ImageDraw.Draw(image)
    draw.chord((262, 394, 538, 650), start=180, end=360, fill=hair)
    fringe = [(266, 540), (290, 470), (400, 430), (522, 486), (420, 496), (330, 522), (284, 566)]
    draw.polygon(fringe, fill=hair)  # side-swept fringe
    _brows(draw, (44, 34, 36))
    # Her folding fan, half open, held at the chest.
    fan_center = (420, 1180)
    draw.pieslice(
        (220, 980, 620, 1380),
        start=200,
        end=300,
        fill=(250, 244, 222),
        outline=(150, 110, 70),
        width=4,
    )
    for degrees in range(205, 300, 12):
        angle = math.radians(degrees)
        end = (fan_center[0] + 200 * math.cos(angle), fan_center[1] + 200 * math.sin(angle))
        draw.line([fan_center, end], fill=(170, 130, 90), width=3)
    return image


SAMPLE_ART: dict[str, Callable[[], Image.Image]] = {
    "rowan-ashby": draw_rowan,
    "tsukishima-tsumugi": draw_tsumugi,
    "lin-wanzhou": draw_wanzhou,
}


def render_png(draw: Callable[[], Image.Image]) -> bytes:
    """A drawing reduced to the card size, as PNG bytes."""
    image = draw().convert("RGB").resize((WIDTH, HEIGHT), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def build_sample_cards(source_dir: Path, out_dir: Path) -> list[Path]:
    """Write `out_dir/<key>.png` for each sample card text in `source_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for key, draw in SAMPLE_ART.items():
        card = load_card(source_dir / f"{key}.json")
        target = out_dir / f"{key}.png"
        write_png_card(card, render_png(draw), target)
        written.append(target)
    return written


def main() -> None:
    root = Path(__file__).resolve().parents[2]
    for path in build_sample_cards(root / "assets" / "sample_cards", root / "characters"):
        print(path)


if __name__ == "__main__":
    main()
