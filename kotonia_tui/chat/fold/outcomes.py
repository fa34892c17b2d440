"""What a fold does after each outcome of a step, in one table, and why a step gave nothing
to store, as data (no code reads a reason back from an exception's text).

A step is a chapter piece (one chronicler call's range), a synopsis draft, or a job as the
worker sees it. After each outcome the step stores, asks again, asks again with its draft to
shorten, quotes its source (memory/extract.py), defers (back to pending, not an attempt), or
fails the attempt (retried after its backoff). `then` reads the table; nothing else decides.
"""

from __future__ import annotations

from enum import StrEnum

from kotonia_tui.engine import BackendUnavailableError
from kotonia_tui.memory.chronicler import ChronicleReply, Verdict


class FoldFailure(StrEnum):
    """Why a chronicler call (or a fold step) gave nothing to store, in the words a chapter's
    note says after "the chronicler's chapter was unusable (...)"."""

    REFUSED = "the chronicler refused it"
    EMPTY = "it was empty"
    CUT = "it hit the output cap"
    HOLLOW = "it holds nothing from its messages"
    THIN = "it keeps almost nothing of what it folds"
    MALFORMED = "it did not follow its JSON schema"
    NO_ROOM = "the fold context had no room for it"
    NOT_SHORTER = "its notes did not get shorter when merged"
    NOTHING_TO_FOLD = "nothing was left to fold it from"
    MODEL_FAILED = "the model failed"
    OFF_LENGTH = "it was far from its length"  # a synopsis draft more than 20% off its target
    SAYS_AGAIN = "it only said the old synopsis again"
    SERVER_DOWN = "the model server did not answer"


class Step(StrEnum):
    CHAPTER = "chapter"  # one chronicler call's piece of a chapter job's range
    SYNOPSIS = "synopsis"  # one draft of a major fold's synopsis
    JOB = "job"  # a whole job, as the worker ends its attempt


class Then(StrEnum):
    STORE = "store"
    ASK_AGAIN = "ask again"  # the same request (a greedy model may answer otherwise next)
    REDRAFT = "ask again with the draft"  # a synopsis draft shown to be written to its length
    QUOTE = "quote"  # the source's own lines, at the size a summary would have
    DEFER = "defer"  # back to pending, not counted as an attempt
    FAIL = "fail"  # a failed attempt: retried after its backoff


OK = None  # the outcome of a step that gave something to store

# After each outcome of each step. A chapter's range is quoted rather than failed (asked again,
# a greedy chronicler writes the same answer; a range failed for good would be in neither the
# prompt nor the memory once the window moves on); a synopsis is asked again, then quoted.
AFTER: dict[tuple[Step, FoldFailure | None], Then] = {
    (Step.CHAPTER, OK): Then.STORE,
    **{
        (Step.CHAPTER, why): Then.QUOTE
        for why in (
            FoldFailure.REFUSED,
            FoldFailure.EMPTY,
            FoldFailure.CUT,
            FoldFailure.HOLLOW,
            FoldFailure.THIN,
            FoldFailure.MALFORMED,
            FoldFailure.NO_ROOM,
            FoldFailure.NOT_SHORTER,
        )
    },
    (Step.CHAPTER, FoldFailure.MODEL_FAILED): Then.FAIL,  # quoted on the job's last attempt
    (Step.CHAPTER, FoldFailure.SERVER_DOWN): Then.DEFER,
    (Step.CHAPTER, FoldFailure.NOTHING_TO_FOLD): Then.FAIL,
    (Step.SYNOPSIS, OK): Then.STORE,
    (Step.SYNOPSIS, FoldFailure.REFUSED): Then.ASK_AGAIN,
    (Step.SYNOPSIS, FoldFailure.EMPTY): Then.ASK_AGAIN,
    (Step.SYNOPSIS, FoldFailure.SAYS_AGAIN): Then.ASK_AGAIN,
    (Step.SYNOPSIS, FoldFailure.CUT): Then.REDRAFT,
    (Step.SYNOPSIS, FoldFailure.OFF_LENGTH): Then.REDRAFT,
    (Step.SYNOPSIS, FoldFailure.NO_ROOM): Then.QUOTE,  # asked again, the draft leaves no room
    (Step.SYNOPSIS, FoldFailure.THIN): Then.QUOTE,  # asked again, a greedy model writes it again
    (Step.SYNOPSIS, FoldFailure.MODEL_FAILED): Then.FAIL,
    (Step.SYNOPSIS, FoldFailure.SERVER_DOWN): Then.DEFER,
    (Step.SYNOPSIS, FoldFailure.NOTHING_TO_FOLD): Then.FAIL,
    (Step.JOB, OK): Then.STORE,
    (Step.JOB, FoldFailure.SERVER_DOWN): Then.DEFER,
    **{(Step.JOB, why): Then.FAIL for why in FoldFailure if why is not FoldFailure.SERVER_DOWN},
}


def then(step: Step, outcome: FoldFailure | None, *, last_attempt: bool = False) -> Then:
    """What `step` does after `outcome` (None: it gave something to store). On a job's last
    attempt a chapter that would fail is quoted: no range is failed for good."""
    if step is Step.CHAPTER and outcome is FoldFailure.MODEL_FAILED and last_attempt:
        return Then.QUOTE
    return AFTER[(step, outcome)]


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


def outcome_of(exc: Exception) -> FoldFailure:
    """The outcome an exception out of a fold step is."""
    if isinstance(exc, FoldFailed):
        return exc.reason
    if isinstance(exc, BackendUnavailableError):
        return FoldFailure.SERVER_DOWN
    return FoldFailure.MODEL_FAILED


def reply_problem(reply: ChronicleReply, calls: int, cap: int) -> tuple[str, str]:
    """What was wrong with the chronicler's last reply after `calls` calls with an output cap
    of `cap` tokens, and what follows from it ("" when nothing)."""
    what = reply.request.kind.value
    match reply.verdict:
        case Verdict.OK:
            return "", ""
        case Verdict.EMPTY:
            return f"the chronicler wrote an empty {what}", ""
        case Verdict.CUT:
            return (
                f"the {what} hit the output cap ({cap} tokens) and was cut",
                "a cut summary is never stored",
            )
        case Verdict.REFUSED:
            times = "twice" if calls == 2 else f"{calls} times"
            return f"the chronicler refused {times}", f"the {what} was not stored"
        case Verdict.HOLLOW:
            messages = reply.request.messages
            return (
                f"the {what} holds nothing from messages #{messages[0].id}-#{messages[-1].id}",
                "it was not stored",
            )
        case Verdict.MALFORMED:
            start = reply.text[:80]
            return f"the chronicler's {what} did not follow its JSON schema: {start!r}", ""


def reply_failure(reply: ChronicleReply, calls: int, cap: int) -> FoldFailed:
    """The failure an unusable reply is (for a usable one, a bug: it is not a failure)."""
    why, then = reply_problem(reply, calls, cap)
    return FoldFailed(VERDICT_FAILURES[reply.verdict], why, then)
