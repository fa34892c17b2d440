"""Issue 33, item 3: no picture the app shows decodes past the one pixel bound, and a shown
picture is decoded at the size it is shown.

The picker, the conversations screen, the expression pane and the personas screen all draw
with `Portrait`; a subprocess opens every card's portrait as the picker does while browsing,
and tells its peak resident memory (VmHWM).
"""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest
from PIL import Image

from kotonia_tui.config import app_dirs
from kotonia_tui.image_files import MAX_PIXELS, THUMBNAIL_BOX, UnusableImage, decode_thumbnail

from .harness import TIMEOUT_S, code_under_test
from .pictures import bomb_png, write_bomb_card

BROWSE = """
import re
from kotonia_tui.chat.bootstrap import open_library
from kotonia_tui.config import load_settings
from kotonia_tui.tui.widgets.portrait import Portrait

shown = 0
for card in open_library(load_settings()).cards:
    if card.image is not None and Portrait(card.image, card.name)._open() is not None:
        shown += 1
status = open("/proc/self/status").read()
print(shown, re.search(r"VmHWM:\\s+(\\d+)", status).group(1))
"""


def browse_portraits() -> tuple[int, float]:
    """How many card pictures the picker could draw, and the peak memory in MB."""
    environment, folder = code_under_test()
    done = subprocess.run(
        [sys.executable, "-c", BROWSE],
        capture_output=True,
        text=True,
        env=environment,
        cwd=folder,
        timeout=TIMEOUT_S,
        check=True,
    )
    shown, peak_kb = done.stdout.split()[-2:]
    return int(shown), int(peak_kb) / 1024


def test_browsing_bomb_cards_stays_bounded():
    """Before: a 20 KB 13000x13000 1-bit card made the picker hold 2.5 GB (here, the three
    cards took the browsing process past 700 MB); now the two past the bound are refused
    before decoding and the one within it is decoded at the size shown."""
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    for name, side in (("Huge", 13_000), ("Large", 9_000), ("Within", 7_000)):
        write_bomb_card(folder, name, side)
    shown, peak_mb = browse_portraits()
    assert shown >= 1  # the card within the bound is still shown
    assert peak_mb < 300, f"browsing the pictures took {peak_mb:.0f} MB"


def test_a_bomb_picture_is_refused_by_the_one_bound():
    side = 13_000
    with pytest.raises(UnusableImage, match=re.escape(f"{side}x{side} is too large")):
        decode_thumbnail(bomb_png(side, side))
    assert side * side > MAX_PIXELS


@pytest.mark.parametrize("kind", ["PNG", "JPEG", "WEBP", "GIF"])
def test_a_picture_is_decoded_at_the_size_shown(kind):
    picture = io.BytesIO()
    Image.new("RGB", (2400, 1200), (200, 40, 40)).save(picture, kind)
    shown = decode_thumbnail(picture.getvalue())
    assert shown.mode == "RGB"
    assert max(shown.size) <= max(THUMBNAIL_BOX)
    assert shown.size[0] == 2 * shown.size[1]  # the shape is kept
