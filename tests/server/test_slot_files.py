"""Saved states on the server backend: llama-server's slot save/restore (`--slot-save-path`).

llama-server cannot run here, and llama-cpp-python's server has no slot API. So the one fake in
these tests is that endpoint: a small proxy forwards every request to a real llama-cpp-python
server on the tiny model (completions, token counts, model list) and answers only
`POST /slots/{id}?action=...` itself, as llama-server does (documented answers: `n_saved`,
`n_restored`; 400 for an unknown action or a file never saved; 501 without a save path). It
records the slot requests, which is what these tests check: when the engine saves, what it
restores and when, and what `kotonia doctor` says.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from kotonia_tui.cli import main
from kotonia_tui.engine.server import ServerEngine
from tests.cards import write_short_card

from .conftest import server_settings, write_server_config

HOP_HEADERS = {"connection", "transfer-encoding", "keep-alive", "content-length", "host"}


@dataclass
class SlotProxy:
    """Forwards to `upstream`; `/slots/N?action=...` answered here (None: 501, no save path)."""

    upstream: str
    save_path: bool = True
    saved: dict[str, int] = field(default_factory=dict)  # filename -> tokens
    actions: list[tuple[str, int, str]] = field(default_factory=list)  # action, slot, file
    refuse: set[str] = field(default_factory=set)  # actions answered 500 (a full disk, say)

    def __post_init__(self) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                parts = urlsplit(self.path)
                if parts.path.startswith("/slots/"):
                    self._slot(int(parts.path.rsplit("/", 1)[1]), parts.query, body)
                else:
                    self._forward(body)

            def _slot(self, slot: int, query: str, body: bytes) -> None:
                action = parse_qs(query).get("action", [""])[0]
                filename = json.loads(body or b"{}").get("filename", "")
                proxy.actions.append((action, slot, filename))
                if not proxy.save_path:
                    self._json(
                        501,
                        {
                            "error": {
                                "code": 501,
                                "message": "This server does not "
                                "support slots action. Start it with `--slot-save-path`",
                            }
                        },
                    )
                elif action in proxy.refuse:
                    self._json(500, {"error": {"code": 500, "message": f"failed to {action}"}})
                elif action == "save":
                    proxy.saved[filename] = 321
                    self._json(200, {"id_slot": slot, "filename": filename, "n_saved": 321})
                elif action == "restore" and filename in proxy.saved:
                    answer = {"id_slot": slot, "filename": filename, "n_restored": 321}
                    self._json(200, answer)
                elif action == "restore":
                    self._json(400, {"error": {"code": 400, "message": "file not found"}})
                else:
                    self._json(400, {"error": {"code": 400, "message": "Invalid action"}})

            def _json(self, status: int, value: object) -> None:
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _forward(self, body: bytes | None) -> None:
                request = urllib.request.Request(
                    proxy.upstream + self.path,
                    data=body,
                    method=self.command,
                    headers={k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS},
                )
                try:
                    response = urllib.request.urlopen(request, timeout=120)
                except urllib.error.HTTPError as error:
                    response = error
                self.send_response(response.status)
                for key, value in response.headers.items():
                    if key.lower() not in HOP_HEADERS:
                        self.send_header(key, value)
                self.send_header("Connection", "close")
                self.end_headers()
                while chunk := response.read1(65536):  # streams pass as they come
                    self.wfile.write(chunk)
                    self.wfile.flush()

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def proxy(scripted_server):
    slots = SlotProxy(scripted_server.url)
    yield slots
    slots.close()


def settings_for(url: str):
    return server_settings(url, n_ctx=2048, reply_max_tokens=16)


async def test_the_chat_slot_is_saved_after_a_turn_and_restored_when_the_conversation_returns(
    make_service, proxy, kotonia_home: Path
):
    key = write_short_card()
    service = await make_service(settings_for(proxy.url))
    assert isinstance(service.engine, ServerEngine)
    assert service.engine.slot_support.available
    conv = service.new_conversation(service.library.get(key))
    done = await (await service.send(conv.id, "Good evening, Wren.")).wait()
    assert done.error is None
    await service.states_settled()
    probe, save = proxy.actions[0], proxy.actions[1]
    assert probe[0] == "kotonia-probe"  # asked once at open; touches no slot
    assert save[:2] == ("save", 0) and save[2] in proxy.saved
    assert save[2].startswith("kotonia-") and save[2].endswith(f"-{conv.id}.bin")
    await service.close()

    # A new process: the first thing sent for the conversation is its restore.
    proxy.actions.clear()
    again = await make_service(settings_for(proxy.url))
    await again.open_conversation(conv.id)
    await again.states_settled()
    assert proxy.actions[1:] == [("restore", 0, save[2])]
    done = await (await again.send(conv.id, "Is the lamp lit?")).wait()
    assert done.error is None
    await again.states_settled()
    # Holding the conversation already, the turn restored nothing more; then it was saved.
    assert [a[0] for a in proxy.actions[1:]] == ["restore", "save"]


async def test_a_conversation_not_saved_on_the_server_is_never_restored(make_service, proxy):
    key = write_short_card()
    service = await make_service(settings_for(proxy.url))
    conv = service.new_conversation(service.library.get(key))
    await service.open_conversation(conv.id)
    await service.states_settled()
    # A restore of a file the server does not have would empty the slot: none is asked for.
    assert [a[0] for a in proxy.actions] == ["kotonia-probe"]


async def test_a_server_that_does_not_save_slots_chats_as_before(make_service, proxy):
    proxy.save_path = False
    key = write_short_card()
    service = await make_service(settings_for(proxy.url))
    assert not service.engine.slot_support.available
    conv = service.new_conversation(service.library.get(key))
    done = await (await service.send(conv.id, "Good evening, Wren.")).wait()
    assert done.error is None and done.reply is not None and done.reply.text
    assert done.metrics is not None and done.metrics.restored == 0
    await service.states_settled()
    await service.close()
    again = await make_service(settings_for(proxy.url))
    await again.open_conversation(conv.id)
    await again.states_settled()
    done = await (await again.send(conv.id, "Is the lamp lit?")).wait()
    assert done.error is None and done.reply is not None
    await again.close()
    # Asked once per start whether it can; then never a save or a restore.
    assert [a[0] for a in proxy.actions] == ["kotonia-probe", "kotonia-probe"]


async def test_a_save_the_server_refuses_costs_the_chat_nothing(make_service, proxy):
    proxy.refuse = {"save"}
    key = write_short_card()
    service = await make_service(settings_for(proxy.url))
    conv = service.new_conversation(service.library.get(key))
    done = await (await service.send(conv.id, "Good evening, Wren.")).wait()
    await service.states_settled()
    assert done.error is None and done.reply is not None and done.reply.text
    assert service.store.last_message(conv.id).text == done.reply.text
    await service.close()
    # Tried after the turn and again on closing; never saved, so never asked for back.
    assert [a[0] for a in proxy.actions] == ["kotonia-probe", "save", "save"]
    proxy.actions.clear()
    again = await make_service(settings_for(proxy.url))
    await again.open_conversation(conv.id)
    await again.states_settled()
    await again.close()
    assert [a[0] for a in proxy.actions] == ["kotonia-probe"]


async def test_a_slot_file_gone_from_the_server_is_asked_for_once(make_service, proxy):
    key = write_short_card()
    service = await make_service(settings_for(proxy.url))
    conv = service.new_conversation(service.library.get(key))
    await (await service.send(conv.id, "Good evening, Wren.")).wait()
    await service.states_settled()
    await service.close()
    proxy.saved.clear()  # the server's owner emptied its --slot-save-path folder
    proxy.actions.clear()
    again = await make_service(settings_for(proxy.url))
    await again.open_conversation(conv.id)
    await again.states_settled()
    done = await (await again.send(conv.id, "Is the lamp lit?")).wait()
    await again.states_settled()
    assert done.error is None and done.reply is not None and done.reply.text
    assert done.metrics is not None and done.metrics.restored == 0
    # The refused restore is not asked again before the turn; the turn's slot is saved anew.
    assert [a[0] for a in proxy.actions] == ["kotonia-probe", "restore", "save"]
    await again.close()


@pytest.mark.parametrize("save_path", [True, False], ids=["allowed", "no-save-path"])
def test_doctor_says_whether_the_server_saves_slots(proxy, save_path, capsys):
    proxy.save_path = save_path
    write_server_config(proxy.url)
    assert main(["doctor"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("slot save"))
    if save_path:
        assert "yes" in line and "--slot-save-path" in line
    else:
        assert "no: the server was started without --slot-save-path" in line
