"""Two app instances on one database file (a second terminal): no corruption, one result per fold.

Both are full chat services (store, engine, fold worker) in one process on the same SQLite file,
so the test can interleave them precisely; SQLite's locking is the same as across processes.
"""

from __future__ import annotations

import asyncio

from kotonia_tui.chat.events import ServiceEvent
from kotonia_tui.domain import FoldJob, FoldKind, FoldStatus, Role, utcnow
from tests.scripted_chapters import written_by_script

from .conftest import SEEDED_CHAPTER, db_path, seed_conversation, settings_on, write_card


async def test_interleaved_turns_from_two_instances_stay_consistent(make_service, scripted_model):
    write_card()
    settings = settings_on(scripted_model("The lamp is lit."), prewarm_after_fold=False)
    first = await make_service(settings, db=db_path())
    second = await make_service(settings, db=db_path())
    conv = first.new_conversation(first.library.get("wren"))
    for index in range(6):
        service = (first, second)[index % 2]
        done = await (await service.send(conv.id, f"Line {index} from terminal {index % 2}")).wait()
        assert done.error is None and done.reply.text == "The lamp is lit."
    for service in (first, second):
        messages = list(service.store.iter_messages(conv.id))
        assert [m.role for m in messages] == [Role.CHARACTER] + [Role.USER, Role.CHARACTER] * 6
        assert [m.text for m in messages if m.role is Role.USER] == [
            f"Line {i} from terminal {i % 2}" for i in range(6)
        ]
        assert service.store.get_conversation(conv.id).message_count == 13
        assert service.store.integrity_check() == "ok"


async def test_a_fold_job_is_run_once_when_a_second_instance_starts(make_service, scripted_model):
    """The second instance's start-up must not requeue (and run again) the first one's job."""
    write_card()
    model = scripted_model(SEEDED_CHAPTER)
    settings = settings_on(model, prewarm_after_fold=False)
    key = f"{model.name}:{model.stat().st_size}"
    first = await make_service(settings, db=db_path(), start=False)
    ids = seed_conversation(first.store, 30, token_key=key)
    conv_id = first.store.get_message(ids[0]).conversation_id
    job = first.store.enqueue_fold(
        FoldJob(
            conversation_id=conv_id,
            kind=FoldKind.CHAPTER,
            first_message_id=ids[0],
            last_message_id=ids[15],
            not_before=utcnow(),
        )
    )
    events: dict[str, list[ServiceEvent]] = {"first": [], "second": []}
    first.subscribe(events["first"].append)
    await first.start()
    for _ in range(400):  # until the first instance has claimed the job
        if first.store.get_fold(job.id).status is FoldStatus.RUNNING:
            break
        await asyncio.sleep(0.005)
    second = await make_service(settings, db=db_path(), start=False)
    second.subscribe(events["second"].append)
    await second.start()  # a second terminal opens the same file while the fold runs
    await asyncio.wait_for(first.worker.wait_settled(conv_id), 60)
    await asyncio.wait_for(second.worker.wait_settled(conv_id), 60)

    final = first.store.get_fold(job.id)
    assert final.status is FoldStatus.DONE, final
    # Claimed once: the second instance left it to its live worker, so its model call was
    # not paid for twice (it requeued and ran it again before claims named their worker).
    assert final.attempts == 1
    assert final.claimed_by == first.worker.claimer
    chapters = first.store.chapters(conv_id, include_superseded=True)
    assert len(chapters) == 1 and written_by_script(chapters[0], SEEDED_CHAPTER)  # stored once
    # Both workers are still alive for the next job.
    assert first.worker._task is not None and not first.worker._task.done()
    assert second.worker._task is not None and not second.worker._task.done()
    assert first.store.integrity_check() == "ok"
