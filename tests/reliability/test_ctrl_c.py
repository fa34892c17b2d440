"""Ctrl-C (SIGINT) during a headless reply: the partial reply is stored, marked as stopped.

A real `kotonia chat` subprocess on the tiny model that never stops by itself (the reply runs to
its 3,000-token cap), SIGINT sent while the reply streams. The line-by-line chat stops the reply
and goes on (Ctrl-D then ends it, exit status 0); a script's `--say` ends with status 130. Either
way the database holds what the model wrote, as the terminal showed it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from kotonia_tui.domain import MessageStatus, Role, StoredMessage
from kotonia_tui.store import Store

from .conftest import db_path, write_card, write_config
from .test_kill9 import CLI, LONG_REPLY, say_a_long_story


class Output:
    """Everything a pipe has delivered so far, read by a thread (the reply streams)."""

    def __init__(self, pipe: object) -> None:
        self.text = ""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: object) -> None:
        assert hasattr(pipe, "read")
        while chunk := pipe.read(1):
            with self._lock:
                self.text += chunk

    def wait_for(self, predicate, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if predicate(self.text):
                    return self.text
            time.sleep(0.01)
        raise AssertionError(f"timed out; the output so far: {self.text[-500:]!r}")

    def join(self) -> str:
        self._thread.join(timeout=30)
        return self.text


def _last_reply() -> StoredMessage:
    with Store.open(db_path()) as store:
        (conv,) = store.list_conversations()
        reply = store.last_message(conv.id)
        metrics = store.last_turn_metrics(conv.id)
    assert reply is not None and reply.role is Role.CHARACTER
    assert metrics is not None and 0 < metrics.generated < LONG_REPLY  # stopped part way
    return reply


def test_ctrl_c_stops_the_reply_in_the_line_by_line_chat_and_stores_it(tiny_noeos_model_path: Path):
    write_card()
    write_config(tiny_noeos_model_path, reply_max_tokens=LONG_REPLY, n_ctx=4096)
    proc = subprocess.Popen(
        [*CLI, "chat", "wren"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    assert proc.stdin is not None
    out, err = Output(proc.stdout), Output(proc.stderr)
    out.wait_for(lambda text: "User: " in text)  # the greeting, then the prompt
    proc.stdin.write("Tell me a very long story.\n")
    proc.stdin.flush()
    # The reply is on the screen and still coming: the second "Wren: " is the reply's.
    out.wait_for(lambda text: text.count("Wren: ") == 2 and len(text.split("Wren: ")[2]) > 40)
    proc.send_signal(signal.SIGINT)
    err.wait_for(lambda text: "[stopped: Ctrl-C]" in text)
    # Ctrl-C stopped the reply, not the chat: it asks for the next message, Ctrl-D ends it.
    out.wait_for(lambda text: text.endswith("User: "))
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0, err.join()[-1500:]

    reply = _last_reply()
    assert reply.status is MessageStatus.CANCELLED
    assert reply.status_reason == "stopped: Ctrl-C"
    printed = out.join().split("Wren: ", 2)[-1].rsplit("\nUser: ", 1)[0]
    assert reply.text and reply.text == printed.strip()  # what the terminal showed, all of it


def test_ctrl_c_during_a_say_reply_stores_it_before_the_program_ends(tiny_noeos_model_path: Path):
    proc, said = say_a_long_story(tiny_noeos_model_path)  # its first words are written
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (said + err)[-1500:]

    reply = _last_reply()
    assert reply.text
    assert reply.status is MessageStatus.CANCELLED
    assert reply.status_reason == "stopped: Ctrl-C"
