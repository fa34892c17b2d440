"""The server that forks `kotonia` processes for tests/hostile/forking.py (run as a script).

It starts as a fresh interpreter, imports the command's modules once (never llama_cpp nor
numpy: the app imports those when a model opens, in the child) and, single-threaded, answers
each request on its socket by forking: the child takes the standard streams sent with the
request, its environment, working folder, umask and arguments, and runs
`python -m kotonia_tui.cli` from the top level of this script, so it ends through the
interpreter's normal exit (atexit, the flush of standard output, the exit status) as the
command started by `exec` does. The server waits for the child and answers its exit status
(a signal as a negative number, as `subprocess` gives it).
"""

from __future__ import annotations

import json
import os
import runpy
import socket
import sys
from typing import Any

# What every command imports, and what most of the hostile runs add (a chat, a listing).
PRELOADED = ("kotonia_tui.cli", "kotonia_tui.cli.chat", "kotonia_tui.cli.listings")


def _serve(server: socket.socket) -> dict[str, Any] | None:
    """Fork a child per request; in the child, return its request (None: the client left)."""
    while True:
        fds: list[int] = []
        line = b""
        while not line.endswith(b"\n"):
            part, got, _flags, _addr = socket.recv_fds(server, 1 << 16, 3)
            if not part:
                return None
            fds += got
            line += part
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                os.close(fd)
            server.close()
            return request
        for fd in fds:
            os.close(fd)
        server.sendall(f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        server.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())


def _become(request: dict[str, Any]) -> None:
    """Turn this forked child into the process `exec` would have started."""
    os.umask(request["umask"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    from kotonia_tui.engine import threads

    threads.wait_briefly()  # what importing the engine does with the child's environment
    if request["stdout_path"] is not None:
        out = os.open(request["stdout_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        os.dup2(out, 1)
        os.close(out)
    sys.argv = ["kotonia", *request["args"]]
    sys.path[0] = os.getcwd()  # `python -m` puts the working folder first


def main() -> None:
    for module in PRELOADED:
        __import__(module)
    assert "numpy" not in sys.modules and "llama_cpp" not in sys.modules
    server = socket.socket(fileno=int(sys.argv[1]))
    request = _serve(server)
    if request is None:
        return
    _become(request)
    runpy.run_module("kotonia_tui.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
