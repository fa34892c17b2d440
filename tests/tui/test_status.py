"""The status line's fold item: every fold state has its own words (no stale "running")."""

from __future__ import annotations

import pytest

from kotonia_tui.chat.events import FoldProgress, FoldState
from kotonia_tui.domain import FoldKind, StoredFoldJob
from kotonia_tui.tui.app import fold_status

WORDS = {
    FoldState.QUEUED: "queued",
    FoldState.RUNNING: "running",
    FoldState.DEFERRED: "waiting: the model server did not answer",
    FoldState.LANDED: "landed: applied on the next turn",
    FoldState.FAILED: "failed: the model server did not answer",
}


@pytest.mark.parametrize("state", list(FoldState))
def test_every_fold_state_has_its_own_status(state: FoldState) -> None:
    job = StoredFoldJob(id=7, conversation_id=1, kind=FoldKind.MAJOR_GC)
    event = FoldProgress(1, job, state, "the model server did not answer")
    text = fold_status(event).plain
    assert text.endswith(f"fold #7 major gc {WORDS[state]}")
    # A deferred job waits for the server: the line must not keep saying it runs.
    assert ("running" in text) is (state is FoldState.RUNNING)
