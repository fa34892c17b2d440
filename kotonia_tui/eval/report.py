"""The report in the terminal: a table per arm and a plain-text plot of recall by range (an
evidence-only run: of the share of questions with evidence in the prompt).

The plot uses only Unicode text (no plotting dependency): one column group per range, oldest
on the left, one marker letter per arm; a line of digits under it shows where two arms share a
point. The same figures are in the JSON, and `plot_png.py` draws them as an image.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kotonia_tui.eval.results import (
    ArmStatus,
    ArmSummary,
    EvalReport,
    EvidenceSpread,
    RunResult,
    Split,
    Spread,
)

MARKERS = {
    "generational": "G",
    "rolling": "R",
    "truncation": "T",
    "full": "F",
    "generational+recall": "g",
    "truncation+recall": "t",
}


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _spread(cell: Spread | None, digits: int = 2) -> str:
    if cell is None:
        return "-"
    if cell.min == cell.max:
        return _fmt(cell.mean, digits)
    return f"{cell.mean:.{digits}f} [{cell.min:.{digits}f}-{cell.max:.{digits}f}]"


def _share(cell: EvidenceSpread | None) -> str:
    """Evidence in prompt as "any/all" (means over runs)."""
    if cell is None:
        return "-"
    return "/".join(_fmt(None if part is None else part.mean) for part in (cell.any, cell.all))


def _split(split: Split) -> str:
    return f"{split.here} / {split.there} (p {split.p:.2f})"


def _columns(report: EvalReport) -> list[tuple[str, Callable[[ArmSummary], str]]]:
    """The table's columns after the arm's name: the reader's grades unless evidence only."""
    graded: list[tuple[str, Callable[[ArmSummary], str]]] = [
        ("recall", lambda row: _spread(row.mean_recall)),
        ("exact", lambda row: _spread(row.exact_match)),
        ("F1", lambda row: _spread(row.mean_f1)),
        ("judge yes", lambda row: _spread(row.judge_only_recall)),
    ]
    return [
        *([] if report.evidence_only else graded),
        ("evidence any/all", lambda row: _share(row.evidence_in_prompt)),
        ("answer words", lambda row: _spread(row.answer_in_prompt)),
        ("memory tok", lambda row: _spread(row.memory_tokens, 0)),
        ("prompt tok", lambda row: _spread(row.prompt_tokens, 0)),
        ("eval/q", lambda row: _spread(row.evaluated_per_question, 0)),
        ("questions", lambda row: _spread(row.questions_asked, 0)),
        ("calls", lambda row: _spread(row.calls, 0)),
        ("time s", lambda row: _spread(row.seconds, 1)),
    ]


def table(report: EvalReport) -> str:
    runs = report.runs
    ranges = runs[0].ranges if runs else []
    lines = []
    spans = " ".join(f"{r.first_message}-{r.last_message}" for r in ranges)
    points = "fold points" if report.options.get("folds", True) else "forced cuts"
    lines.append(
        f"{report.input.title or report.input.source}: "
        f"{report.input.messages} messages, {len(ranges)} ranges "
        f"({sum(1 for r in ranges if r.folded)} {points}), {len(runs)} run(s)"
        + _seeds(runs)
        + (" · evidence only: the reader was not asked" if report.evidence_only else "")
    )
    lines.append(f"ranges (message ids, oldest first): {spans}")
    if runs and runs[0].semantic:
        lines.append(f"semantic recall: {runs[0].semantic}")
    columns = _columns(report)
    head = ["arm", *(title for title, _cell in columns)]
    rows = [head]
    for name, row in report.summary.items():
        if row.status is not ArmStatus.OK:
            rows.append([name, "skipped", *[""] * (len(head) - 2)])
            continue
        rows.append([name, *(cell(row) for _title, cell in columns)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for index, row_cells in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row_cells)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    width = max((len(name) for name in report.summary), default=13)
    lines.append("")
    lines.append(f"{report.curve_label} by range, oldest -> newest (mean over runs):")
    for name, curve in report.curves().items():
        lines.append(f"  {name:<{width}} " + " ".join(_fmt(v) for v in curve))
    for name, row in report.summary.items():
        if row.note:
            lines.append(f"  note ({name}): {row.note}")
    if not report.evidence_only:
        lines.append("recall by question kind (mean over runs):")
        for name, row in report.summary.items():
            if row.recall_by_kind:
                kinds = "  ".join(
                    f"{kind} {_fmt(None if cell is None else cell.mean)}"
                    for kind, cell in row.recall_by_kind.items()
                )
                lines.append(f"  {name:<{width}} {kinds}")
    lines.append("evidence in prompt by question kind, any/all (mean over runs):")
    for name, row in report.summary.items():
        if row.evidence_by_kind:
            shares = row.evidence_by_kind.items()
            kinds = "  ".join(f"{kind} {_share(cell)}" for kind, cell in shares)
            lines.append(f"  {name:<{width}} {kinds}")
    if not report.evidence_only:
        lines.append("evidence in prompt (any) by range, oldest -> newest (mean over runs):")
        for name, row in report.summary.items():
            if row.status is ArmStatus.OK:
                cells = [
                    None if cell is None or cell.any is None else cell.any.mean
                    for cell in row.evidence_by_range
                ]
                lines.append(f"  {name:<{width}} " + " ".join(_fmt(v) for v in cells))
    if report.paired:
        lines.append(
            "question by question, every run pooled: only this arm / only the other "
            "(sign test p); a split near even says neither is better"
        )
        for pair in report.paired:
            right = "" if pair.right is None else f"right {_split(pair.right)}, "
            lines.append(
                f"  {pair.arm} against {pair.against} ({pair.questions} questions): "
                f"{right}evidence in prompt {_split(pair.evidence)}"
            )
    lines.append("evidence messages by place (share of all evidence messages, mean over runs):")
    for name, row in report.summary.items():
        if row.evidence_places:
            places = "  ".join(
                f"{place} {_fmt(None if cell is None else cell.mean)}"
                for place, cell in row.evidence_places.items()
            )
            lines.append(f"  {name:<{width}} {places}")
    return "\n".join(lines)


def terminal_plot(report: EvalReport, height: int = 10) -> str:
    """Recall (0..1, rows; evidence only: evidence in prompt) by range (columns), one letter
    per arm."""
    data = report.curves()
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


def audit_text(report: EvalReport) -> str:
    if not report.runs:
        return ""
    audit = report.runs[0].audit
    claims, topics, refusals = audit.claims_as_facts, audit.topics, audit.refusals
    lines = ["audit of the chronicler (run 1):"]
    lines.append(
        f"  {audit.pieces} pieces (chapters + synopsis versions); claims as facts: "
        f"{claims.established_fact_phrase} 'established fact', {claims.known_lies_as_fact} "
        f"known lies unattributed, {claims.lexical} lexical"
    )
    lines.append(
        f"  attribution in {audit.attribution.pieces_with_attribution} pieces, "
        f"{audit.attribution.on_the_surface_in_fact_pairs} 'On the surface / In fact' pairs"
    )
    lines.append(
        f"  topics: {topics.resolved_markers} 'Resolved:', {topics.open_items} 'Open:', "
        f"{topics.resolved_left_open} resolved but left open"
    )
    lines.append(
        f"  refusals: {refusals.refused} of {refusals.chronicler_calls} chronicler calls "
        f"({refusals.stored} stored)"
    )
    if (ledger := audit.ledger) is not None:
        kept = ", ".join(f"{n} {kind}" for kind, n in sorted(ledger.live.items())) or "nothing"
        lines.append(
            f"  ledger: {kept} live; {sum(ledger.ended.values())} ended; "
            f"{ledger.readback_misses} readback misses"
        )
        failed = sum(ledger.failed_attempts.values())
        lines.append(f"  fold attempts: {ledger.fold_attempts}, {failed} failed")
        for reason, count in list(ledger.failed_attempts.items())[:3]:
            lines.append(f"    {count} x {reason[:120]}")
        if ledger.dropped:
            out = ", ".join(f"{n} x {why}" for why, n in sorted(ledger.dropped.items()))
            lines.append(f"  items the chapter checks left out: {out}")
    for claim in claims.examples[:3]:
        lines.append(f"  e.g. [{claim.in_}] {claim.memory[:160]!r}")
    for left in topics.examples[:2]:
        lines.append(f"  e.g. [{left.in_}] Open: {left.open_line[:120]!r}")
    for refusal in refusals.examples[:2]:
        lines.append(f"  e.g. refusal: {refusal[:120]!r}")
    return "\n".join(lines)


def _seeds(runs: Sequence[RunResult]) -> str:
    """The seeds the runs drew with (" at seed 1", " at seeds 1-3"; "" when random)."""
    seeds = [r.seed for r in runs if r.seed is not None]
    if not seeds:
        return ""
    if len(seeds) == 1:
        return f" at seed {seeds[0]}"
    return f" at seeds {seeds[0]}-{seeds[-1]}"
