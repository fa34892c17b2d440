"""Resuming after a restart, as a user does it: `kotonia chat` ends, a new process continues
the conversation, and its first turn evaluates only the new message because the saved KV state
was loaded (`--stats` says `restored`). Real processes, the real engine, tiny models.

The reference for "only the new message" is the same conversation in one process (warm), the
saved state settled between turns as it is while a person reads: the resumed turn must reuse
and evaluate exactly what the warm one does, and give the same greedy reply.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kotonia_tui.chat.bootstrap import open_service
from kotonia_tui.config import load_settings
from kotonia_tui.terminal_text import visible
from tests.tiny_models import write_tiny_png

LINES = ("Good evening. Is the shop open?", "What are you mending?", "Whose watch is it?")
NEXT = "May I wait here until the rain stops?"


def write_config(home: Path, model: Path, mmproj: Path | None) -> None:
    """A profile for the tiny model: greedy, so two processes write the same replies."""
    folder = home / "config"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        'profile = "tiny"',
        "fold_delay_s = 0",
        "[profiles.tiny]",
        f"model_path = {json.dumps(str(model))}",
        'prompt_format = "template"',
        "n_ctx = 8192",
        "temperature = 0.0",
        "seed = 7",
        "reply_max_tokens = 32",
    ]
    if mmproj is not None:
        lines.append(f"mmproj_path = {json.dumps(str(mmproj))}")
    (folder / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def kotonia(home: Path, *args: str) -> tuple[str, list[dict[str, Any]], str]:
    """Run `kotonia` in its own process; its stdout, its --stats lines, and its stderr."""
    env = {**os.environ, "KOTONIA_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "kotonia_tui.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    stats = [json.loads(x) for x in done.stderr.splitlines() if x.startswith("{")]
    return done.stdout, stats, done.stderr


def conversation_id(stderr: str) -> str:
    return next(x for x in stderr.splitlines() if x.startswith("conversation ")).split()[1]


async def warm_reference(home: Path, image: Path | None) -> tuple[dict[str, Any], str]:
    """The last turn's figures and reply in one process, settled between turns (the test
    points KOTONIA_HOME at `home`)."""
    assert os.environ["KOTONIA_HOME"] == str(home)
    service = open_service(load_settings())
    try:
        await service.start()
        conv = service.new_conversation(service.library.find("rowan"))
        images = [service.attach_image(image)] if image is not None else []
        for index, text in enumerate((*LINES, NEXT)):
            turn = await service.send(conv.id, text, images if index == 0 else [])
            done = await turn.wait()
            await service.states_settled()  # the user reads the reply
        assert done.metrics is not None and done.reply is not None
        return done.metrics.stats_dict(), done.reply.text
    finally:
        await service.close()


@pytest.mark.parametrize("with_image", [False, True], ids=["text", "image"])
async def test_a_new_process_resumes_the_conversation_evaluating_only_the_new_message(
    tmp_path, tiny_model_path, tiny_mmproj_path, with_image, monkeypatch
):
    mmproj = tiny_mmproj_path if with_image else None
    image = write_tiny_png(tmp_path / "picture.png", (32, 32)) if with_image else None
    resumed, warm = tmp_path / "resumed", tmp_path / "warm"
    for home in (resumed, warm):
        write_config(home, tiny_model_path, mmproj)
    says = [arg for line in LINES for arg in ("--say", line)]
    attach = ["--image", str(image)] if image is not None else []
    _, first, err = kotonia(resumed, "chat", "rowan", *says, *attach, "--stats")
    conv = conversation_id(err)
    # With a projector the card's portrait is in the setup; the picture is in the first line.
    assert first[0]["images"] == (2 if with_image else 0)
    assert any(p.name.endswith(".kvstate") for p in (resumed / "cache" / "kv-state").iterdir())

    # The process ended; a new one continues the conversation.
    out, (stats,), _ = kotonia(
        resumed, "chat", "rowan", "--conversation", conv, "--say", NEXT, "--stats"
    )

    monkeypatch.setenv("KOTONIA_HOME", str(warm))
    reference, reply = await warm_reference(warm, image)
    assert stats["restored"] == stats["reused"] > 0  # everything reused came from disk
    assert stats["prompt_positions"] == reference["prompt_positions"]
    assert stats["reused"] == reference["reused"]
    assert stats["evaluated"] == reference["evaluated"]  # only what a warm turn evaluates
    assert reference["restored"] == 0
    assert out == f"{visible(reply)}\n"  # the same context gives the same greedy reply
    if with_image:
        assert stats["images"] == 2  # portrait and picture, in the prompt from the saved state


async def test_a_second_conversation_in_a_new_process_starts_from_the_shared_setup(
    tmp_path, tiny_model_path
):
    """The observation from a tmux session: the first turn of a second conversation with the
    same character reused 0% of the prompt. Its KV lived only as long as the process that
    evaluated it; the setup (the same for every conversation with the card) is now saved."""
    write_config(tmp_path, tiny_model_path, None)
    _, (first,), _ = kotonia(tmp_path, "chat", "rowan", "--say", LINES[0], "--stats")
    assert first["reused"] == 0  # nothing saved yet: cold
    _, (second,), err = kotonia(tmp_path, "chat", "rowan", "--say", LINES[1], "--stats")
    assert conversation_id(err) == "2"
    setup = next((tmp_path / "cache" / "kv-state").glob("*-setup-*.kvstate"))
    # Exactly the setup's items came from disk (the greeting differs from here on).
    assert second["restored"] == second["reused"] == saved_items(setup) > 0


def test_doctor_shows_the_saved_states_and_their_cap(tmp_path, tiny_model_path):
    write_config(tmp_path, tiny_model_path, None)
    kotonia(tmp_path, "chat", "rowan", "--say", LINES[0])
    folder = tmp_path / "cache" / "kv-state"
    files = list(folder.glob("*.kvstate"))
    megabytes = sum(f.stat().st_size for f in files) / 1e6
    out, _, _ = kotonia(tmp_path, "doctor")
    line = next(x for x in out.splitlines() if x.startswith("saved KV states"))
    assert f"{folder} ({len(files)} files, {megabytes:,.0f} MB of 4,096 MB" in line
    config = tmp_path / "config" / "config.toml"
    config.write_text("state_cache_mb = 0\n" + config.read_text(), encoding="utf-8")
    out, _, _ = kotonia(tmp_path, "doctor")
    line = next(x for x in out.splitlines() if x.startswith("saved KV states"))
    assert line.split(None, 3)[3].startswith("off (state_cache_mb = 0)")


def saved_items(path: Path) -> int:
    """The item count in a saved state's header (engine/state_file.py: magic, digest, length,
    JSON header)."""
    data = path.read_bytes()
    length = struct.unpack("<I", data[40:44])[0]
    return int(json.loads(data[44 : 44 + length])["items"])
