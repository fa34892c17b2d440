"""`kotonia chat ... --stats` run as a script runs it: a new process, the figures parsed."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def chat_with_stats(
    env: dict[str, str], *args: str, timeout: float = 120
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """`kotonia chat ARGS --stats` in a new process; its result and each turn's JSON line."""
    proc = subprocess.run(
        [sys.executable, "-m", "kotonia_tui", "chat", *args, "--stats"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    stats = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    return proc, stats
