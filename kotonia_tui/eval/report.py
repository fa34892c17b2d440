"""The report in the terminal: a table per arm and a plain-text plot of recall by range.

The plot uses only Unicode text (no plotting dependency): one column group per range, oldest
on the left, one marker letter per arm; a line of digits under it shows where two arms share a
point. The same figures are in the JSON, and `plot_png.py` draws them as an image.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MARKERS = {"generational": "G", "rolling": "R", "truncation": "T", "full": "F"}


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _spread(cell: dict[str, float] | None, digits: int = 2) -> str:
    if cell is None:
        return "-"
    if cell["min"] == cell["max"]:
        return _fmt(cell["mean"], digits)
    return f"{cell['mean']:.{digits}f} [{cell['min']:.{digits}f}-{cell['max']:.{digits}f}]"


def curves(report: dict[str, Any]) -> dict[str, list[float | None]]:
    """The curve to show per arm: the mean over runs, per range index."""
    out: dict[str, list[float | None]] = {}
    for name, row in report["summary"].items():
        if row.get("status") != "ok":
            continue
        out[name] = [None if c is None else c["mean"] for c in row["recall_by_range"]]
    return out


def table(report: dict[str, Any]) -> str:
    runs = report["runs"]
    first = runs[0] if runs else {"ranges": []}
    lines = []
    ranges = first["ranges"]
    spans = " ".join(f"{r['first_message']}-{r['last_message']}" for r in ranges)
    lines.append(
        f"{report['input']['title'] or report['input']['source']}: "
        f"{report['input']['messages']} messages, {len(ranges)} ranges "
        f"({sum(1 for r in ranges if r['folded'])} fold points), {len(runs)} run(s)"
    )
    lines.append(f"ranges (message ids, oldest first): {spans}")
    head = ["arm", "recall", "exact", "F1", "judge yes", "memory tok", "prompt tok", "calls"]
    head.append("time s")
    rows = [head]
    for name, row in report["summary"].items():
        if row.get("status") != "ok":
            rows.append([name, "skipped", *[""] * (len(head) - 2)])
            continue
        rows.append(
            [
                name,
                _spread(row["mean_recall"]),
                _spread(row.get("exact_match")),
                _spread(row["mean_f1"]),
                _spread(row.get("judge_only_recall")),
                _spread(row["memory_tokens"], 0),
                _spread(row["prompt_tokens"], 0),
                _spread(row["calls"], 0),
                _spread(row["seconds"], 1),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("recall by range, oldest -> newest (mean over runs):")
    for name, curve in curves(report).items():
        lines.append(f"  {name:<13} " + " ".join(_fmt(v) for v in curve))
    for name, row in report["summary"].items():
        if row.get("note"):
            lines.append(f"  note ({name}): {row['note']}")
    return "\n".join(lines)


def terminal_plot(report: dict[str, Any], height: int = 10) -> str:
    """Recall (0..1, rows) by range (columns), one letter per arm."""
    data = curves(report)
    if not data:
        return "(no arm answered: nothing to plot)"
    points = max(len(c) for c in data.values())
    cell = 4  # characters per range column
    grid = [[" "] * (points * cell) for _ in range(height + 1)]
    for name, curve in data.items():
        mark = MARKERS.get(name, name[:1].upper())
        for x, value in enumerate(curve):
            if value is None:
                continue
            y = round(value * height)
            column = x * cell + 1 + list(data).index(name) % 3
            row = grid[height - y]
            row[column] = mark if row[column] == " " else "*"
    lines = []
    for index, row in enumerate(grid):
        level = 1 - index / height
        label = f"{level:.1f}" if index % 2 == 0 else "   "
        lines.append(f"{label} │{''.join(row)}")
    lines.append("    └" + "─" * (points * cell))
    lines.append("     " + "".join(f"{x + 1:<{cell}}" for x in range(points)))
    legend = "  ".join(f"{MARKERS.get(n, n[:1].upper())}={n}" for n in data)
    lines.append(f"     range (oldest -> newest)   {legend}   *=overlap")
    return "\n".join(lines)


def audit_text(report: dict[str, Any]) -> str:
    lines = ["audit of the chronicler (run 1):"]
    runs: Sequence[dict[str, Any]] = report["runs"]
    if not runs:
        return ""
    audit = runs[0]["audit"]
    claims = audit["claims_as_facts"]
    topics = audit["topics"]
    refusals = audit["refusals"]
    lines.append(
        f"  {audit['pieces']} pieces (chapters + synopsis versions); claims as facts: "
        f"{claims['established_fact_phrase']} 'established fact', {claims['known_lies_as_fact']} "
        f"known lies unattributed, {claims['lexical']} lexical"
    )
    lines.append(
        f"  attribution in {audit['attribution']['pieces_with_attribution']} pieces, "
        f"{audit['attribution']['on_the_surface_in_fact_pairs']} 'On the surface / In fact' pairs"
    )
    lines.append(
        f"  topics: {topics['resolved_markers']} 'Resolved:', {topics['open_items']} 'Open:', "
        f"{topics['resolved_left_open']} resolved but left open"
    )
    lines.append(
        f"  refusals: {refusals['refused']} of {refusals['chronicler_calls']} chronicler calls "
        f"({refusals['stored']} stored)"
    )
    for example in claims["examples"][:3]:
        lines.append(f"  e.g. [{example['in']}] {example['memory'][:160]!r}")
    for example in topics["examples"][:2]:
        lines.append(f"  e.g. [{example['in']}] Open: {example['open_line'][:120]!r}")
    for example in refusals["examples"][:2]:
        lines.append(f"  e.g. refusal: {example[:120]!r}")
    return "\n".join(lines)
