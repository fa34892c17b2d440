"""`kotonia` processes forked from a server that has imported the app once (one per pytest
worker), instead of a new interpreter for each.

A hostile input is run in a process of its own: a crash in llama.cpp kills only that process, a
hang is cut by a timeout (the child is killed), and the environment, working folder, umask and
standard streams (pipes, or a file or device for standard output) are its own. What a new
interpreter would add is starting Python and importing the app: about 0.7 s of CPU, hundreds of
times a run. tests/hostile/fork_server.py says what the child does to be the process `exec`
would start; the harness keeps `exec` for the runs where the difference could matter (peak
memory, a plain user's run, another copy of the code).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

_SERVER = Path(__file__).with_name("fork_server.py")


class Timeout(Exception):
    """The forked command did not end in time; it was killed."""


class _Server:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self.socket = ours
        self.process = subprocess.Popen(
            [sys.executable, str(_SERVER), str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=None,  # a server that fails says why in the test's output
        )
        theirs.close()
        self.buffer = b""
        self.lock = threading.Lock()

    def close(self) -> None:
        self.socket.close()
        self.process.wait(timeout=10)

    def reply(self, timeout: float | None = None) -> int:
        """The server's next answer (a pid, then an exit status); TimeoutError after
        `timeout` seconds without one."""
        self.socket.settimeout(timeout)
        try:
            while b"\n" not in self.buffer:
                part = self.socket.recv(64)
                if not part:
                    raise RuntimeError(f"the fork server ended (status {self.process.poll()})")
                self.buffer += part
        finally:
            self.socket.settimeout(None)
        line, _, self.buffer = self.buffer.partition(b"\n")
        return int(line)


_server: _Server | None = None


def _the_server() -> _Server:
    global _server
    if _server is None or _server.process.poll() is not None:
        _server = _Server()
        atexit.register(_server.close)
    return _server


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def run_forked(
    args: Sequence[str | bytes],
    *,
    env: Mapping[str, str],
    stdin: bytes,
    timeout: float,
    cwd: Path | None = None,
    stdout_path: Path | None = None,
) -> tuple[int, bytes, bytes]:
    """Run `python -m kotonia_tui.cli ARGS` in a forked child; (exit status, stdout, stderr).
    Raises Timeout after killing a child that ran longer than `timeout` seconds."""
    server = _the_server()
    request = {
        "args": [os.fsdecode(a) for a in args],
        "env": dict(env),
        "cwd": str(cwd or os.getcwd()),
        "umask": _umask(),
        "stdout_path": None if stdout_path is None else str(stdout_path),
    }
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    read_out: list[bytes] = []
    read_err: list[bytes] = []
    with server.lock:
        try:
            data = (json.dumps(request) + "\n").encode()
            socket.send_fds(server.socket, [data], [in_r, out_w, err_w])
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        pipes = [
            threading.Thread(target=_read_all, args=(out_r, read_out), daemon=True),
            threading.Thread(target=_read_all, args=(err_r, read_err), daemon=True),
            threading.Thread(target=_write_all, args=(in_w, stdin), daemon=True),
        ]
        for pipe in pipes:
            pipe.start()
        pid = server.reply()
        try:
            code = server.reply(timeout)
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            server.reply()
            raise Timeout from None
        finally:
            for pipe in pipes:
                pipe.join()
    return code, b"".join(read_out), b"".join(read_err)


def _read_all(fd: int, into: list[bytes]) -> None:
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(1 << 16):
            into.append(chunk)


def _write_all(fd: int, data: bytes) -> None:
    # A command may end without reading all its input: the pipe is then broken.
    with contextlib.suppress(BrokenPipeError), os.fdopen(fd, "wb") as pipe:
        pipe.write(data)
