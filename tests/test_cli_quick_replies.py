"""`kotonia quick-replies` (issue 31): add, list, delete, and a SillyTavern set imported where its
shape allows (slash commands left out), on a real SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

from kotonia_tui.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_quick_replies_are_added_listed_and_deleted(capsys) -> None:
    code, out, _ = run(capsys, "quick-replies", "--add", "Wave", "--text", "*waves*", "--insert")
    assert code == 0
    wave = int(out)
    code, out, _ = run(
        capsys, "quick-replies", "--character", "rowan", "--add", "Clock", "--text", "The time?"
    )
    assert code == 0
    code, out, _ = run(capsys, "quick-replies", "--character", "rowan")
    assert out.splitlines() == [
        f"{wave}\tglobal\tinsert\tWave",
        f"{wave + 1}\trowan-ashby\tsend\tClock",
    ]
    code, out, _ = run(capsys, "quick-replies", "--json")
    assert json.loads(out) == [
        {"id": wave, "character": None, "label": "Wave", "text": "*waves*", "send": False}
    ]
    assert run(capsys, "quick-replies", "--delete", str(wave))[0] == 0
    code, _, err = run(capsys, "quick-replies", "--delete", str(wave))
    assert code == 1 and f"quick reply {wave} does not exist" in err
    code, _, err = run(capsys, "quick-replies", "--add", "Only a label")
    assert code == 1 and "--add LABEL and --text TEXT go together" in err


def test_a_sillytavern_set_imports_its_plain_replies(capsys, tmp_path: Path) -> None:
    qr_set = {
        "version": 2,
        "name": "Default",
        "qrList": [
            {"id": 1, "label": "Greet", "message": "Hello there!"},
            {"id": 2, "label": "Roll", "message": "/roll 1d20"},
            {"id": 3, "label": "", "message": "*sits down by the fire*"},
        ],
    }
    path = tmp_path / "Default.json"
    path.write_text(json.dumps(qr_set), encoding="utf-8")
    code, out, err = run(capsys, "quick-replies", "--import", str(path))
    assert code == 0 and len(out.splitlines()) == 2
    assert "imported 2 quick replies; 1 slash-command reply left out" in err
    code, out, _ = run(capsys, "quick-replies", "--json")
    assert [(q["label"], q["text"]) for q in json.loads(out)] == [
        ("Greet", "Hello there!"),
        ("*sits down by the fire*", "*sits down by the fire*"),
    ]
    path.write_text('{"name": "x"}', encoding="utf-8")
    code, _, err = run(capsys, "quick-replies", "--import", str(path))
    assert code == 1 and "not a SillyTavern quick-reply set (no 'qrList' list)" in err
