"""Start-up: commands that need no model never load llama_cpp (nor numpy), and neither does
anything the app's first frame needs; the model library loads with the model, in the background.

Each check runs in a fresh interpreter (a subprocess) and reads its `sys.modules`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("llama_cpp", "numpy")
# What only a turn needs: the chat service and the prompt assembly (a third of a second of
# imports that a listing, an import or an export never uses).
TURN_MACHINERY = ("kotonia_tui.chat.service", "kotonia_tui.memory.assembly")

# Runs a `kotonia` command in-process, then reports which heavy modules it loaded (stderr).
RUN_COMMAND = """
import json, sys
from kotonia_tui.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit_:
    code = exit_.code
loaded = [m for m in {heavy!r} if m in sys.modules]
print("LOADED " + json.dumps({{"code": code, "loaded": loaded}}), file=sys.stderr)
"""


def run_kotonia(
    *args: str, heavy: tuple[str, ...] = HEAVY
) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-c", RUN_COMMAND.format(heavy=heavy), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("LOADED "))
    return done, json.loads(line.removeprefix("LOADED "))


def test_version_does_not_load_the_model_library():
    done, report = run_kotonia("--version")
    assert done.stdout.startswith("kotonia-tui ")
    assert report == {"code": 0, "loaded": []}


def test_characters_lists_the_cards_without_the_model_library(kotonia_home: Path):
    done, report = run_kotonia("characters")
    assert report == {"code": 0, "loaded": []}
    keys = [line.split("\t")[0] for line in done.stdout.splitlines()]
    assert "rowan-ashby" in keys  # a real listing, not an early exit


@pytest.mark.parametrize(
    "command", [["characters"], ["conversations"], ["personas"], ["export", "1"]]
)
def test_commands_without_a_turn_do_not_import_the_turn_machinery(
    command: list[str], kotonia_home: Path
):
    done, report = run_kotonia(*command, heavy=HEAVY + TURN_MACHINERY)
    assert report["loaded"] == [], done.stderr
    # `export 1` on an empty store is refused: the command ran, not an early exit.
    assert report["code"] == (1 if command[0] == "export" else 0), done.stderr


@pytest.mark.parametrize("module", ["kotonia_tui.tui.app", "kotonia_tui.chat.service"])
def test_what_the_first_frame_needs_does_not_load_the_model_library(module: str):
    code = (
        f"import importlib, sys; importlib.import_module({module!r}); "
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_opening_a_model_still_finds_numpy_after_it_was_hidden(tiny_model_path: Path):
    # The store and the pictures import their libraries with numpy hidden; llama_cpp (which
    # needs numpy) must still load afterwards, in the same process.
    code = (
        "import kotonia_tui.store.connection, kotonia_tui.tui.widgets.portrait, sys\n"
        "assert 'numpy' not in sys.modules\n"
        "from kotonia_tui.engine import LlamaEngine\n"
        "from kotonia_tui.config import ModelProfile\n"
        "from pathlib import Path\n"
        f"engine = LlamaEngine.open(ModelProfile(model_path=Path({str(tiny_model_path)!r}), "
        "n_ctx=512, prompt_format='template'), cache_dir=Path('.'))\n"
        "print(engine.count_tokens('hello'), 'numpy' in sys.modules)\n"
        "engine.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    count, numpy_loaded = done.stdout.split()
    assert int(count) > 0 and numpy_loaded == "True"
