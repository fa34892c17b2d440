"""scripts/extract_probe.py: how often a quote of a question's neighbourhood holds its answer's
words, on a dataset file it reads like `kotonia eval` does; no model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "extract_probe.py"
FILLER = "We walked along the quay and talked about the weather for a long while that evening."


def _dataset(path: Path) -> Path:
    lines = [FILLER] * 20
    lines[5] = "The harbourmaster's boat is called the Kittiwake."
    lines[14] = "My sister Ilse marries on the fourteenth of May in Pellmouth."
    messages = [
        {"id": i + 1, "role": "user" if i % 2 else "character", "speaker": "Ann", "text": text}
        for i, text in enumerate(lines)
    ]
    questions = [
        {
            "id": "q1",
            "kind": "fact",
            "question": "The boat?",
            "answer": "Kittiwake",
            "evidence": [6],
        },
        {
            "id": "q2",
            "kind": "user",
            "question": "Who marries?",
            "answer": "Ilse",
            "evidence": [15],
        },
        {"id": "q3", "kind": "fact", "question": "None?", "answer": "zeppelin", "evidence": [10]},
    ]
    data = {"title": "probe", "character": {"name": "Wren"}, "user": {"name": "Ann"}}
    path.write_text(json.dumps({**data, "messages": messages, "questions": questions}))
    return path


def _probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def test_a_quote_holds_the_answers_it_has_room_for(tmp_path: Path) -> None:
    dataset = str(_dataset(tmp_path / "probe.json"))
    done = _probe(dataset, "--fraction", "1.0", "--fraction", "0.1", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["fraction"]: (row["held"], row["of"]) for row in json.loads(done.stdout)}
    # The whole window: both answers the story holds (never the word it does not).
    assert rows[1.0] == (2, 3)
    # A tenth of the characters: the specific sentences over the repeated filler.
    assert rows[0.1] == (2, 3)
    text = _probe(dataset, "--fraction", "1.0").stdout
    assert text == f"{dataset} at 1: 2 / 3\n"


def test_a_file_that_is_not_a_dataset_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    done = _probe(str(bad))
    assert done.returncode == 1 and done.stderr.startswith(str(bad))
    assert _probe(str(bad), "--fraction", "2").returncode == 2
