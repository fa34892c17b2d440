"""`kotonia memory`: the memory the next turn of a conversation carries (synopsis, chapters,
ledger, open threads, fold jobs), as the inspector shows it; `--json` for scripts."""

from __future__ import annotations

import argparse

from kotonia_tui.chat.bootstrap import ledger_fitter, open_store
from kotonia_tui.chat.memory_report import memory_lines, memory_report
from kotonia_tui.cli.output import json_text
from kotonia_tui.config import Settings
from kotonia_tui.terminal_text import visible


def memory(args: argparse.Namespace, settings: Settings) -> int:
    with (
        open_store(settings, args.db, read_only=args.read_only) as store,
        ledger_fitter(settings) as fit,
    ):
        report = memory_report(store, args.id, fit)
    if args.json:
        print(json_text(report))
    else:
        for line in memory_lines(report):
            print(visible(line, one_line=True))
    return 0
