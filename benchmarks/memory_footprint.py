"""Benchmark 6: resident memory with a conversation of 100 and of 50,000 messages open.

Each size runs in a fresh child process (`python -m benchmarks.memory_footprint --child N`) so
nothing the parent built is counted: it opens the chat service on the benchmark's database (the
files benchmark 3 built, with a tiny real model), opens the conversation, assembles one turn
(`Prompter.prepare`) and reports VmRSS from /proc/self/status, also right after start-up and
after the service opened, so the table shows what the conversation itself adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

from benchmarks.common import BenchResult, Table, ratio, rss_kib
from benchmarks.turn_assembly import (
    db_path,
    ensure_dbs,
    settings_for,
    tiny_model,
)
from kotonia_tui.chat.bootstrap import open_engine

SIZES = (100, 50_000)


def _child(n: int, conv_id: int) -> dict[str, Any]:
    from kotonia_tui.chat.bootstrap import open_service

    start = rss_kib()
    service = open_service(settings_for(tiny_model()), db=db_path(n))
    opened = rss_kib()
    conv = service.store.get_conversation(conv_id)
    card = service.library.get(conv.character_key)
    prepared = asyncio.run(
        service.prompter.preview(conv_id, card, service.setup_for(card), service.persona)
    )
    assembled = rss_kib()
    result = {
        "messages": service.store.message_count(conv_id),
        "window": len(prepared.window),
        "rss_start_kib": start,
        "rss_open_kib": opened,
        "rss_turn_kib": assembled,
    }
    service.engine.close()
    service.store.close()
    return result


def _measure(n: int, conv_id: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory_footprint", "--child", str(n), str(conv_id)],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ.copy(),
        timeout=300,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


async def run() -> BenchResult:
    started = time.perf_counter()
    missing = [n for n in SIZES if not db_path(n).exists()]
    engine = await asyncio.to_thread(open_engine, settings_for(tiny_model()))
    try:
        convs = ensure_dbs(engine, SIZES) if missing else {n: 1 for n in SIZES}
    finally:
        engine.close()
    results = [await asyncio.to_thread(_measure, n, convs[n]) for n in SIZES]
    table = Table(
        "6. Memory footprint: VmRSS with the conversation open and one turn assembled",
        (
            "messages",
            "RSS at start MiB",
            "service open MiB",
            "turn assembled MiB",
            "added by the conversation MiB",
        ),
    )
    for row in results:
        table.add(
            row["messages"],
            row["rss_start_kib"] / 1024,
            row["rss_open_kib"] / 1024,
            row["rss_turn_kib"] / 1024,
            (row["rss_turn_kib"] - row["rss_open_kib"]) / 1024,
        )
    small, large = results[0], results[-1]
    table.notes = [
        "one fresh process per size; tiny real model (the model's weights are ~0.5 MB), so the "
        "figures are the app's own memory",
        f"ratio 50,000 / 100 (turn assembled): "
        f"{ratio(large['rss_turn_kib'], small['rss_turn_kib'])}",
    ]
    figures = {
        "sizes": results,
        "rss_ratio_50000_100": ratio(large["rss_turn_kib"], small["rss_turn_kib"]),
    }
    return BenchResult("memory_footprint", [table], figures, time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=2, type=int, metavar=("MESSAGES", "CONVERSATION"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(*args.child)))


if __name__ == "__main__":
    main()
