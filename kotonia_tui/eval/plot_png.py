"""The forgetting curve as a PNG, drawn with Pillow (already a dependency; no matplotlib).

Recall (0..1; an evidence-only run: the share of questions with evidence in the prompt) against
the range, oldest on the left, one coloured line per arm, with a band from the lowest to the
highest run where there are several runs.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from kotonia_tui.eval.results import ArmStatus, EvalReport

COLORS = {
    "generational": (31, 119, 180),
    "rolling": (214, 39, 40),
    "truncation": (127, 127, 127),
    "full": (44, 160, 44),
    "generational+recall": (23, 190, 207),
    "truncation+recall": (188, 189, 34),
}
WIDTH, HEIGHT = 900, 560
LEFT, RIGHT, TOP, BOTTOM = 70, 190, 60, 70


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has one bitmap size
        return ImageFont.load_default()


def write_png(report: EvalReport, path: Path) -> Path:
    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image, "RGBA")
    font, small = _font(16), _font(12)
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM
    figures = report.spreads()
    points = max((len(cells) for cells, _overall in figures.values()), default=1)

    def px(index: int) -> float:
        return x0 + (x1 - x0) * (index / max(1, points - 1) if points > 1 else 0.5)

    def py(value: float) -> float:
        return y1 - (y1 - y0) * value

    title = report.input.title or report.input.source
    runs = len(report.runs)
    label = report.curve_label
    draw.text((x0, 15), f"{label.capitalize()} by range: {title}", fill="black", font=font)
    draw.text(
        (x0, 36),
        f"{report.input.messages} messages, {runs} run(s); oldest range on the left",
        fill=(90, 90, 90),
        font=small,
    )
    for step in range(6):  # horizontal grid and y labels
        value = step / 5
        y = py(value)
        draw.line([(x0, y), (x1, y)], fill=(225, 225, 225), width=1)
        draw.text((x0 - 40, y - 7), f"{value:.1f}", fill="black", font=small)
    draw.line([(x0, y0), (x0, y1), (x1, y1)], fill="black", width=2)
    for index in range(points):
        x = px(index)
        draw.line([(x, y1), (x, y1 + 5)], fill="black", width=1)
        draw.text((x - 4, y1 + 8), str(index + 1), fill="black", font=small)
    draw.text(((x0 + x1) / 2 - 90, y1 + 30), "range (oldest -> newest)", fill="black", font=font)
    draw.text((8, y0 - 28), label, fill="black", font=font)

    for number, (name, (cells, overall)) in enumerate(figures.items()):
        color = COLORS.get(name, (148, 103, 189))
        band_top = [(px(i), py(c.max)) for i, c in enumerate(cells) if c is not None]
        band_low = [(px(i), py(c.min)) for i, c in enumerate(cells) if c is not None]
        if runs > 1 and len(band_top) > 1:
            draw.polygon(band_top + band_low[::-1], fill=(*color, 40))
        line = [(px(i), py(c.mean)) for i, c in enumerate(cells) if c is not None]
        if len(line) > 1:
            draw.line(line, fill=color, width=3)
        for x, y in line:
            draw.ellipse([x - 4, y - 4, x + 4, y + 4], fill=color)
        mean = overall.mean if overall else 0.0
        ly = y0 + 10 + number * 26
        draw.line([(x1 + 20, ly + 8), (x1 + 45, ly + 8)], fill=color, width=3)
        draw.text((x1 + 52, ly), f"{name} {mean:.2f}", fill="black", font=small)
    skipped = [n for n, v in report.summary.items() if v.status is not ArmStatus.OK]
    for offset, name in enumerate(skipped):
        draw.text(
            (x1 + 20, y0 + 10 + (len(figures) + offset) * 26),
            f"{name}: skipped",
            fill=(120, 120, 120),
            font=small,
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format="PNG")
    return path
