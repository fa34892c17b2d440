"""Why a fold call gave nothing to store, as data: the reasons a chapter's quote note and a
job's failure name, so no code reads a reason back from an exception's text."""

from __future__ import annotations

from enum import StrEnum

from kotonia_tui.chat.fold.chronicle import Chronicled
from kotonia_tui.memory.chronicler import Verdict


class FoldFailure(StrEnum):
    """Why a chronicler call (or a fold step) gave nothing to store, in the words a chapter's
    note says after "the chronicler's chapter was unusable (...)"."""

    REFUSED = "the chronicler refused it"
    EMPTY = "it was empty"
    CUT = "it hit the output cap"
    HOLLOW = "it holds nothing from its messages"
    MALFORMED = "it did not follow its JSON schema"
    NO_ROOM = "the fold context had no room for it"
    NOT_SHORTER = "its notes did not get shorter when merged"
    NOTHING_TO_FOLD = "nothing was left to fold it from"
    MODEL_FAILED = "the model failed"


# The failure a chronicler's verdict is (OK is no failure).
VERDICT_FAILURES = {
    Verdict.EMPTY: FoldFailure.EMPTY,
    Verdict.CUT: FoldFailure.CUT,
    Verdict.REFUSED: FoldFailure.REFUSED,
    Verdict.HOLLOW: FoldFailure.HOLLOW,
    Verdict.MALFORMED: FoldFailure.MALFORMED,
}


class FoldFailed(Exception):
    """A fold that produced nothing usable (refused twice, empty, cut, or far from its length):
    `reason` says which, `why` what was wrong in one line, and the message adds what follows
    from it (the job's last error)."""

    def __init__(self, reason: FoldFailure, why: str, then: str = "") -> None:
        super().__init__(f"{why}; {then}" if then else why)
        self.reason = reason
        self.why = why


class NoRoomFailed(FoldFailed):
    """The chronicler's prompt left too little of the fold context for its answer."""

    def __init__(self, why: str) -> None:
        super().__init__(FoldFailure.NO_ROOM, why)


def failure_of(done: Chronicled) -> FoldFailed:
    """The failure an unusable chronicler reply is."""
    why, then = done.problem_parts()
    return FoldFailed(VERDICT_FAILURES[done.reply.verdict], why, then)
