"""The README's screen captures are what the app shows.

scripts/readme_screens.py renders them: each scenario drives the app with Pilot at the size the
README states and takes the screen as text. Here every scenario runs again and its captures
are compared with the README's, so a change that moves a screen fails until the captures are
rendered again (`.venv/bin/python scripts/readme_screens.py`).

The scenarios run on the fake engine (tests/fake_engine.py), with the replies the script
scripts: what is checked is the layout and the text of the screens, which do not depend on the
model, so a fake is right here (and it makes the captures the same on every run). Nothing
depends on the day, the machine's time zone, the terminal or its colours (the script's
docstring says how).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SCRIPT = ROOT / "scripts" / "readme_screens.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("readme_screens", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


screens = _script()
REGENERATE = "run `.venv/bin/python scripts/readme_screens.py` to render them again"


def test_every_capture_in_the_readme_comes_from_a_scenario():
    marked = screens.blocks(README.read_text(encoding="utf-8").split("\n"))
    made = screens.captures_of(screens.SCENARIOS)
    assert sorted(set(made) - set(marked)) == [], "scenarios whose capture has no README marker"
    assert sorted(set(marked) - set(made)) == [], "README markers no scenario renders"


@pytest.mark.parametrize("scenario", screens.SCENARIOS, ids=lambda s: s.name.replace(" ", "-"))
async def test_the_readme_shows_what_the_app_shows(scenario):
    shown = await screens.run_scenario(scenario)
    differ = screens.differences(README.read_text(encoding="utf-8"), shown)
    assert not differ, (
        f"README.md's {', '.join(differ)} differ from the app ({REGENERATE}):\n"
        + "\n".join(differ.values())
    )


def test_the_screen_text_puts_wide_characters_on_two_cells():
    svg = (
        '<clipPath id="t-line-0">\n    <rect x="0" y="1.5" width="73.2" height="24.65"/>'
        "</clipPath>"
        '<text class="t-r1" x="0" y="20" textLength="24.4" '
        'clip-path="url(#t-line-0)">紬&#160;a</text>'
        '<text class="t-r1" x="48.8" y="20" textLength="12.2" '
        'clip-path="url(#t-line-0)">│</text>'
        '<text class="t-r1" x="12.2" y="44.4" textLength="12.2" '
        'clip-path="url(#t-line-1)">&lt;</text>'
    )
    assert screens.svg_to_text(svg, 6, 3) == "紬 a│\n <\n"


def test_the_screen_text_keeps_a_combining_mark_on_its_letter():
    svg = (
        '<clipPath id="t-line-0">\n    <rect x="0" y="1.5" width="61" height="24.65"/>'
        "</clipPath>"
        '<text class="t-r1" x="0" y="20" textLength="36.6" '
        'clip-path="url(#t-line-0)">cafe\u0301</text>'
        '<text class="t-r1" x="48.8" y="20" textLength="12.2" '
        'clip-path="url(#t-line-0)">│</text>'
    )
    assert screens.svg_to_text(svg, 5, 1) == "cafe\u0301│"
    assert screens.svg_to_text(svg.replace('width="61"', 'width="48.8"'), 4, 1) == "cafe\u0301"


def test_a_screenshot_in_another_format_says_what_to_adapt():
    with pytest.raises(screens.ScreenshotError, match=r"svg_to_text in scripts/readme_screens\.py"):
        screens.svg_to_text("<svg><text x='0'>a</text></svg>", 5, 1)


def test_the_check_names_a_capture_that_differs(tmp_path, capsys):
    readme = tmp_path / "README.md"
    text = README.read_text(encoding="utf-8")
    readme.write_text(text.replace("^l Reload cards", "^l Reload them"), encoding="utf-8")
    assert screens.main(["--check", "--only", "picker", "--readme", str(readme)]) == 1
    err = capsys.readouterr().err
    assert "1 of 1 captures differ from the app: picker" in err
    assert "-" + " ^l Reload them" in err  # the diff shows the line
    assert readme.read_text(encoding="utf-8") != text  # --check writes nothing

    assert screens.main(["--only", "picker", "--readme", str(readme)]) == 0
    assert readme.read_text(encoding="utf-8") == text  # rendered again: as the README is
    assert "rewrote picker" in capsys.readouterr().err


def test_wrong_usage_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        screens.main(["--only", "no-such-screen"])
    assert exit_.value.code == 2
    assert "no capture named no-such-screen" in capsys.readouterr().err
