"""A group turn's cache reuse on the real engine (issue 31): a tiny real GGUF, a real SQLite
file, two short cards. The cast's setup is read once; a reply by another member than the last
evaluates what a one-card chat's turn evaluates, plus the speaker's note."""

from __future__ import annotations

import json

from kotonia_tui.chat.prompting import speaker_note
from kotonia_tui.config import app_dirs

from .conftest import tiny_settings


def _cards() -> None:
    folder = app_dirs().user_characters
    folder.mkdir(parents=True, exist_ok=True)
    for key, name, about in (
        ("wren", "Wren", "keeps the lighthouse"),
        ("mira", "Mira", "mends nets"),
    ):
        data = {"name": name, "description": f"{name} {about}.", "first_mes": f"{name} nods."}
        card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": data}
        (folder / f"{key}.json").write_text(json.dumps(card), encoding="utf-8")


async def test_a_change_of_speaker_reads_nothing_before_the_new_lines(
    make_service, tiny_model_path
):
    _cards()
    service = await make_service(tiny_settings(tiny_model_path, reply_max_tokens=16))
    one = service.new_conversation(service.library.get("mira"))
    await (await service.send(one.id, "Hello there.")).wait()
    await service.states_settled()
    single = (await (await service.send(one.id, "How are the nets today?")).wait()).metrics

    group = service.groups.new_group([service.library.get("wren"), service.library.get("mira")])
    await (await service.send(group.id, "Hello there.", speaker="wren")).wait()
    await service.states_settled()
    turn = await service.send(group.id, "How are the nets today?", speaker="mira")
    changed = (await turn.wait()).metrics
    note = service.engine.count_tokens(speaker_note("Mira")) + 4  # and the blank line before it
    print(
        f"tiny GGUF: one-card turn {single.evaluated} of {single.prompt_positions} evaluated; "
        f"group turn after a change of speaker {changed.evaluated} of {changed.prompt_positions}"
    )
    # The replies before are in the KV cache (settled): only the new message, the notes and
    # the template's tail are evaluated, in both chats.
    assert changed.evaluated <= single.evaluated + note
    setup = service.engine.count_tokens(turn.prepared.request.messages[0].content)
    assert changed.reused > setup  # the whole cast's setup was not read again
