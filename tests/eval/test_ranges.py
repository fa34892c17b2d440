"""Range splitting against the fold policy: the ranges end where `plan_turn` queues folds."""

from __future__ import annotations

from kotonia_tui.chat.bootstrap import open_engine
from kotonia_tui.eval.replay import replay, split_ranges
from kotonia_tui.memory.budgets import Budgets
from kotonia_tui.memory.policy import TurnInputs, WindowMessage, plan_turn
from tests.eval.conftest import ScriptedEngine, short_conversation


def test_split_ranges_is_contiguous_and_tolerates_repeated_points():
    messages = [(i, 10 * i) for i in range(1, 13)]
    source = {i: 100 + i for i in range(1, 13)}
    ranges = split_ranges(messages, [4, 9, 4, 7], source)
    assert [(r.first_id, r.last_id, r.folded) for r in ranges] == [
        (1, 4, True),
        (5, 7, True),
        (8, 9, True),
        (10, 12, False),
    ]
    assert ranges[1].tokens == 50 + 60 + 70
    assert (ranges[0].first_source, ranges[-1].last_source) == (101, 112)
    assert [r.index for r in ranges] == [0, 1, 2, 3]
    # No fold: one verbatim range. A fold at the last message: no tail.
    assert [(r.first_id, r.last_id, r.folded) for r in split_ranges(messages, [], source)] == [
        (1, 12, False)
    ]
    assert split_ranges(messages, [12], source)[-1].folded


async def test_replay_ranges_follow_the_policy(eval_settings_for):
    settings = eval_settings_for()
    conv = short_conversation(20)
    engine = open_engine(settings)
    try:
        replayed = await replay(conv, settings, ScriptedEngine(engine, {}))
        try:
            prompter = replayed.service.prompter
            messages = replayed.all_messages()
            tokens = {m.id: prompter.message_tokens(m) for m in messages}
            queued = [e for e in replayed.events if e.state == "queued"]
            folded = [r for r in replayed.ranges if r.folded]
            assert len(queued) == len(folded) >= 2
            # Each folded range ends where a fold job was queued, in order, and starts right
            # after the previous one: the ranges are the policy's own fold points.
            assert [r.last_source for r in folded] == [e.last for e in queued]
            assert replayed.ranges[0].first_source == 1
            assert replayed.ranges[-1].last_source == len(conv.messages)

            # The first fold, recomputed from the policy alone: the first user turn whose
            # history passes the trigger queues (1 .. choose_fold_range's end).
            budgets: Budgets = prompter.budgets
            setup = replayed.setup
            fixed = engine.count_tokens(setup.system_text) + engine.count_tokens(setup.post_history)
            window: list[WindowMessage] = []
            first_plan = None
            for message in messages:
                window.append(WindowMessage(message.id, tokens[message.id]))
                if message.role.value != "user":
                    continue
                plan = plan_turn(
                    TurnInputs(
                        budgets=budgets,
                        verbatim_start_id=None,
                        window=window,
                        applied_memory_tokens=0,
                        landed_memory_tokens=None,
                        landed_covered_through=None,
                        covered_through=None,
                        fold_in_flight=False,
                        fixed_tokens=fixed,
                    )
                )
                if plan.queue_range is not None:
                    first_plan = (message.id, plan.queue_range)
                    break
            assert first_plan is not None
            at, (first, last) = first_plan
            assert queued[0].at_message == replayed.to_source[at]
            assert (queued[0].first, queued[0].last) == (first, last)
            assert folded[0].first_id == first and folded[0].last_id == last
            # Every range's token count is the sum of its messages' exact counts.
            for span in replayed.ranges:
                inside = [t for mid, t in tokens.items() if span.first_id <= mid <= span.last_id]
                assert span.tokens == sum(inside)
        finally:
            await replayed.close()
    finally:
        engine.close()


def test_retry_clock_follows_the_backoff_in_user_turns(tmp_path):
    from datetime import timedelta

    from kotonia_tui.chat.fold.worker import RETRY_BACKOFF_S
    from kotonia_tui.domain import Conversation, FoldJob, FoldKind, utcnow
    from kotonia_tui.eval.replay import RetryClock
    from kotonia_tui.store import Store

    with Store.open(tmp_path / "clock.sqlite3") as store:
        conv = store.create_conversation(
            Conversation(character_key="b", character_name="B", persona_name="A")
        )
        job = store.enqueue_fold(
            FoldJob(
                conversation_id=conv.id,
                kind=FoldKind.CHAPTER,
                first_message_id=1,
                last_message_id=5,
            )
        )
        claimed = store.claim_next_fold(utcnow())
        assert claimed is not None and claimed.attempts == 1
        store.fail_fold(job.id, "cut", utcnow() + timedelta(seconds=30))

        clock = RetryClock(turn_seconds=30.0)
        clock.park_failures(store, conv.id)
        parked = store.get_fold(job.id)
        assert parked.not_before > utcnow() + timedelta(days=300)  # the wall clock cannot free it
        turns = int(RETRY_BACKOFF_S[0] // 30)
        for _ in range(turns - 1):
            clock.tick()
            assert not clock.release_due(store, conv.id)
        clock.tick()
        assert clock.release_due(store, conv.id)
        assert store.claim_next_fold(utcnow()) is not None  # due now
        # Parking the same attempt twice does nothing; a second failure waits longer.
        store.fail_fold(job.id, "cut again", utcnow())
        clock.park_failures(store, conv.id)
        assert clock.due[job.id] == clock.now + RETRY_BACKOFF_S[1]
