"""A turn's lore: World Info files attached to a character or a conversation, read each turn."""

from __future__ import annotations

import json

from kotonia_tui.chat.events import MemoryNotice, NoticeLevel
from kotonia_tui.config import app_dirs
from kotonia_tui.domain import ChatSettings
from tests.cards import write_short_card

from .conftest import tiny_settings

BOOK = {"entries": {"0": {"uid": 0, "key": ["storm"], "comment": "Storms", "content": "Gales."}}}


async def test_attached_world_info_fires_and_a_broken_file_is_named_not_fatal(
    make_service, tiny_model_path
):
    folder = app_dirs().world_info
    folder.mkdir(parents=True)
    (folder / "sea.json").write_text(json.dumps(BOOK), encoding="utf-8")
    write_short_card()
    service = await make_service(tiny_settings(tiny_model_path, reply_max_tokens=16))
    notices: list[MemoryNotice] = []
    service.subscribe(lambda e: notices.append(e) if isinstance(e, MemoryNotice) else None)
    conv = service.new_conversation(service.library.get("wren"))
    service.save_settings(conv.id, ChatSettings(world_info=("sea.json",)), ChatSettings())

    await (await service.send(conv.id, "A storm is coming.")).wait()
    lore = service.memory_view(conv.id).lore
    assert lore is not None and lore.books == ("sea.json",)
    assert [(f.label, f.keys, f.sent) for f in lore.selection.fired] == [
        ("Storms", ("storm",), True)
    ]

    (folder / "sea.json").write_text('{"entries": {"0": {"key": "storm"}}}', encoding="utf-8")
    done = await (await service.send(conv.id, "The storm again.")).wait()
    assert done.reply is not None  # the turn went on without the file
    warnings = [n.text for n in notices if n.level is NoticeLevel.WARNING]
    assert any(
        "sea.json" in w and "entries.0.key: expected a list of strings" in w for w in warnings
    )
    lore = service.memory_view(conv.id).lore
    assert lore is not None and lore.books == () and lore.selection.fired == ()
