"""Benchmark 8: start-up. Wall time of `kotonia --version`, `kotonia characters` and the app's
first frame, against `python -c pass` (the interpreter alone), each in a new process.

The app runs in a pseudo-terminal (120x40) that this benchmark reads: the first frame is the
moment the character picker's title arrives; "model ready" is when the status line names the
loaded model (the model loads in the background after the first frame). The benchmark answers
the two terminal queries textual-image makes at start (device attributes, cell size) as a
terminal would; unanswered, each waits 0.1 s. Every command runs once untimed first (files,
page cache), then RUNS times; the table shows medians.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from benchmarks.common import BenchResult, Table, median, ratio

RUNS = 7
APP_RUNS = 3
FIRST_FRAME = b"choose a character"  # the picker's title
MODEL_READY = b"n_ctx"  # the status line once the model is loaded ("<model> · n_ctx ...")
APP_TIMEOUT_S = 120.0
ANSWERS = {
    b"\x1b[c": b"\x1b[?62;22c",  # device attributes: a VT220-like terminal, no Sixel
    b"\x1b[16t": b"\x1b[6;20;10t",  # cell size in pixels
}


def _kotonia() -> list[str]:
    script = Path(sys.executable).parent / "kotonia"
    return [str(script)] if script.exists() else [sys.executable, "-m", "kotonia_tui.cli"]


def _wall_ms(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True, timeout=120)
    return (time.perf_counter() - started) * 1000


def _app_ms() -> tuple[float, float]:
    """One start of the app in a pseudo-terminal: ms to the first frame and to model ready."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLORTERM": "truecolor"}
    started = time.perf_counter()
    proc = subprocess.Popen(
        _kotonia(), stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True
    )
    os.close(slave)
    seen = b""
    marks: dict[bytes, float] = {}
    try:
        while len(marks) < 2 and time.perf_counter() - started < APP_TIMEOUT_S:
            readable, _, _ = select.select([master], [], [], 0.02)
            if not readable:
                continue
            try:
                data = os.read(master, 1 << 16)
            except OSError:
                break
            seen = seen[-4096:] + data
            for query, answer in ANSWERS.items():
                if query in data:
                    os.write(master, answer)
            for mark in (FIRST_FRAME, MODEL_READY):
                if mark not in marks and mark in seen:
                    marks[mark] = (time.perf_counter() - started) * 1000
        os.write(master, b"\x11")  # Ctrl+Q
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    if len(marks) < 2:
        raise RuntimeError("the app did not show its first frame and the model in time")
    return marks[FIRST_FRAME], marks[MODEL_READY]


async def run() -> BenchResult:
    started = time.perf_counter()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "kotonia --version": [*_kotonia(), "--version"],
        "kotonia characters": [*_kotonia(), "characters"],
    }
    times: dict[str, list[float]] = {}
    for name, command in commands.items():
        _wall_ms(command)
        times[name] = [_wall_ms(command) for _ in range(RUNS)]
    _app_ms()  # the first start assembles the embedded model into the cache if it must
    app = [_app_ms() for _ in range(APP_RUNS)]
    base = median(times["python -c pass"])
    table = Table("8. Start-up: wall time to ...", ("what", "median ms", "x python -c pass"))
    for name, values in times.items():
        table.add(name, round(median(values), 1), ratio(median(values), base))
    first_frame = median(f for f, _ in app)
    ready = median(r for _, r in app)
    table.add("kotonia: the app's first frame", round(first_frame, 1), ratio(first_frame, base))
    table.add("kotonia: model loaded (status line)", round(ready, 1), ratio(ready, base))
    table.notes = [
        f"medians of {RUNS} runs ({APP_RUNS} for the app), each a new process, after one "
        "untimed run",
        "the app in a 120x40 pseudo-terminal; the first frame is the picker's title arriving",
        "none of --version, characters or the first frame loads llama_cpp or numpy "
        "(tests/test_startup.py); the model loads after the first frame",
        "model loaded includes semantic recall's shipped embedding model (converted into the "
        "cache on the untimed first run, loaded in tens of ms) since D-46",
    ]
    figures = {
        "runs_ms": times,
        "app_first_frame_ms": [f for f, _ in app],
        "app_model_ready_ms": [r for _, r in app],
    }
    return BenchResult("startup", [table], figures, time.perf_counter() - started)
