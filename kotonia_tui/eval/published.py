"""Public long-memory benchmarks read in their own published layouts (`kotonia eval FILE`).

A checker who holds LoCoMo's `locomo10.json` or a LongMemEval file points `kotonia eval` at it
as it is; the layout is recognised by its content, never by the file's name (`recognise`), and
`locomo` or `longmemeval` turns one sample of it into an `EvalConversation` with questions and
evidence message ids. What the two have in common lives here:

- the choices a run makes (`PublishedChoice`: which sample, which speaker plays the character,
  whether a question whose evidence names no message stops the run or is left out);
- each session opens with a narration line carrying its date, written the way
  `story_dates` reads a scene's date (`session_opening`);
- what the loader decided on the user's behalf (the sample it took, the questions it left
  out) is kept as notes, printed by the command and written in the report: never silent;
- bad input is one line naming the file, the record and the field (`LayoutError`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

Layout = Literal["locomo", "longmemeval"]

DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

# LoCoMo writes "1:56 pm on 8 May, 2023"; LongMemEval "2023/05/20 (Sat) 02:21".
_LOCOMO_WHEN = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$",
    re.IGNORECASE,
)
_LONGMEMEVAL_WHEN = re.compile(
    r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]{2,9}\.?\))?\s*(?:(\d{1,2}):(\d{2}))?\s*$"
)


class LayoutError(Exception):
    """A published file that cannot be evaluated as it is; the message says where and why."""


@dataclass(frozen=True)
class PublishedChoice:
    """What a run chooses of a published file (`--sample`, `--character-speaker`,
    `--skip-bad-evidence`)."""

    sample: str | None = None
    character_speaker: str | None = None
    skip_bad_evidence: bool = False

    @property
    def given(self) -> bool:
        return (
            self.sample is not None or self.character_speaker is not None or self.skip_bad_evidence
        )


def recognise(raw: Any) -> Layout | None:
    """Which published layout a parsed JSON file is in, by its content: LoCoMo's samples
    hold `conversation` and `qa`; LongMemEval's records hold `question_id` and
    `haystack_sessions`. A single sample (a JSON object) is taken as a list of one."""
    records = raw if isinstance(raw, list) else [raw]
    first = records[0] if records else None
    if not isinstance(first, dict):
        return None
    if "conversation" in first and "qa" in first:
        return "locomo"
    if "haystack_sessions" in first and "question_id" in first:
        return "longmemeval"
    return None


def parse_when(text: str) -> datetime | None:
    """A session's date in LoCoMo's or LongMemEval's format; None for any other."""
    if match := _LOCOMO_WHEN.match(text):
        hour, minute, half, day, month_name, year = match.groups()
        month = _month(month_name)
        if month is None:
            return None
        hour24 = int(hour) % 12 + (12 if half.lower() == "p" else 0)
        return _datetime(int(year), month, int(day), hour24, int(minute))
    if match := _LONGMEMEVAL_WHEN.match(text):
        year, month_number, day, hour, minute = match.groups()
        return _datetime(int(year), int(month_number), int(day), int(hour or 0), int(minute or 0))
    return None


def _month(name: str) -> int | None:
    for number, month in enumerate(MONTHS, start=1):
        if len(name) >= 3 and month.casefold().startswith(name.casefold()):
            return number
    return None


def _datetime(year: int, month: int, day: int, hour: int, minute: int) -> datetime | None:
    try:
        return datetime(year, month, day, hour, minute)
    except ValueError:
        return None


def spoken_when(moment: datetime, with_time: bool = True) -> str:
    """A date as a scene opening writes it: "Saturday, 20 May 2023, 2:21 am"."""
    day = f"{DAYS[moment.weekday()]}, {moment.day} {MONTHS[moment.month - 1]} {moment.year}"
    if not with_time:
        return day
    hour = moment.hour % 12 or 12
    return f"{day}, {hour}:{moment.minute:02d} {'am' if moment.hour < 12 else 'pm'}"


def session_opening(number: int, written: str) -> str:
    """The narration line a session opens with: its number and its date, spelled out when
    the format is known (so `story_dates` finds it), else as the file wrote it."""
    moment = parse_when(written)
    when = spoken_when(moment) if moment is not None else " ".join(written.split())
    return f"*Session {number}: {when}.*" if when else f"*Session {number}.*"


def answer_text(value: Any) -> str:
    """A reference answer as text: numbers as written, a list joined with commas."""
    if isinstance(value, list):
        return ", ".join(answer_text(v) for v in value)
    return str(value).strip()


def validation_message(exc: ValidationError, prefix: str) -> str:
    """The first problem pydantic found, as `prefix` + `.field[3].name: message`."""
    first = exc.errors()[0]
    where = prefix
    for part in first["loc"]:
        where += f"[{part}]" if isinstance(part, int) else f".{part}"
    return f"{where}: {first['msg']}"


def choose_sample(
    path: Path, names: list[str], wanted: str | None, what: str
) -> tuple[int, str | None]:
    """The index of the sample to evaluate: `wanted` by name (or by its 1-based number), or
    the first one. Returns the note to print when the file held several and none was named."""
    if wanted is None:
        if len(names) == 1:
            return 0, None
        others = ", ".join(names[1:11]) + (", ..." if len(names) > 11 else "")
        return 0, (
            f"{path}: {len(names)} {what}s; evaluating the first, {names[0]} "
            f"(choose another with --sample: {others})"
        )
    if wanted in names:
        return names.index(wanted), None
    if wanted.isdigit() and 1 <= int(wanted) <= len(names) and wanted not in names:
        return int(wanted) - 1, None
    listed = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")
    raise LayoutError(f"{path}: --sample {wanted!r} names no {what}; the file has: {listed}")


def left_out_note(path: Path, label: str, reasons: dict[str, int]) -> str | None:
    """One line counting the questions left out, by reason; None when none was."""
    if not reasons:
        return None
    total = sum(reasons.values())
    detail = "; ".join(f"{count} {reason}" for reason, count in reasons.items())
    return f"{path}: {label}: left out {total} question{'s' if total != 1 else ''}: {detail}"
