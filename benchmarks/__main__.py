"""`python -m benchmarks` (`make bench`): run every benchmark, print the tables, write JSON.

The results go to bench-results/latest.json and a timestamped copy beside it, so runs can be
compared. Everything runs in a temporary KOTONIA_HOME (the embedded model is assembled into its
cache once per run); logs go to bench-results/bench.log, the terminal shows only the tables.

    python -m benchmarks                     # all of them, as `make bench`
    python -m benchmarks --only images       # one (or several, comma-separated)
    python -m benchmarks --turns 60          # a shorter prompt-cache conversation
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Before anything loads llama_cpp: the engine package sets how llama.cpp's threads wait
# (engine/threads.py), which the OpenMP runtime reads once, when it loads.
import kotonia_tui.engine  # noqa: F401
from benchmarks.common import BenchResult

NAMES = (
    "prompt_cache",
    "images",
    "turn_assembly",
    "engine_overhead",
    "ui_responsiveness",
    "memory_footprint",
    "search",
    "recall",
    "resume",
    "startup",
    "first_turns",
    "fast_typist",
    "prompt_steps",
    "long_import",
    "memory_dates",
    "default_recall",
)


def _runner(name: str, args: argparse.Namespace) -> Callable[[], Awaitable[BenchResult]]:
    # Imported late: KOTONIA_HOME must be set before anything reads the app dirs.
    if name == "prompt_cache":
        from benchmarks import prompt_cache

        return lambda: prompt_cache.run(args.turns, args.prewarm_off_turns)
    module = __import__(f"benchmarks.{name}", fromlist=["run"])
    return module.run


def _machine() -> dict[str, Any]:
    import llama_cpp

    load = os.getloadavg()
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in load],
        "llama_cpp_python": getattr(llama_cpp, "__version__", "?"),
    }


async def _main(args: argparse.Namespace) -> int:
    wanted = NAMES if not args.only else tuple(n.strip() for n in args.only.split(","))
    unknown = [n for n in wanted if n not in NAMES]
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)} (known: {', '.join(NAMES)})",
            file=sys.stderr,
        )
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        filename=out_dir / "bench.log",
        filemode="w",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    started = time.perf_counter()
    report: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": _machine(),
        "benchmarks": {},
    }
    failed = 0
    for name in wanted:
        print(f"[{name}] running...", file=sys.stderr, flush=True)
        try:
            result = await _runner(name, args)()
        except Exception as exc:
            logging.exception("benchmark %s failed", name)
            print(f"[{name}] FAILED: {type(exc).__name__}: {exc}\n", flush=True)
            report["benchmarks"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            failed += 1
            continue
        for table in result.tables:
            print(table.render() + "\n", flush=True)
        print(f"[{name}] {result.seconds:.1f} s", file=sys.stderr, flush=True)
        report["benchmarks"][name] = {
            "seconds": round(result.seconds, 1),
            "tables": [t.as_json() for t in result.tables],
            "figures": result.figures,
        }
    report["wall_s"] = round(time.perf_counter() - started, 1)
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(report, indent=2, default=str)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    (out_dir / "latest.json").write_text(text, encoding="utf-8")
    (out_dir / f"bench-{stamp}.json").write_text(text, encoding="utf-8")
    print(
        f"total {report['wall_s']:.0f} s; results in {out_dir / 'latest.json'} "
        f"(and bench-{stamp}.json)"
    )
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--only", help="comma-separated names: " + ", ".join(NAMES))
    parser.add_argument("--turns", type=int, default=300, help="prompt-cache turns (300)")
    parser.add_argument(
        "--prewarm-off-turns",
        type=int,
        default=0,
        help="also run the prompt-cache conversation with prewarm off for N turns",
    )
    parser.add_argument("--out", default="bench-results", help="folder for the JSON results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kotonia-bench-") as home:
        os.environ["KOTONIA_HOME"] = home
        for name in [k for k in os.environ if k.startswith("KOTONIA_") and k != "KOTONIA_HOME"]:
            del os.environ[name]  # the benchmarks set their own model and window
        return asyncio.run(_main(args))


if __name__ == "__main__":
    sys.exit(main())
