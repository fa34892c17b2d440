"""A hostile inference server: a small HTTP app on loopback that answers each endpoint with
bytes the test chose.

A fake, and the tests that use it say so: it stands in only for answers a real server on this
machine cannot be made to give (a model list that is a JSON list, a context size of 10^30,
broken JSON, a count that is not a number). It records every request it gets.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    body: bytes
    status: int = 200
    content_type: str = "application/json"

    @classmethod
    def of(cls, value: Any, status: int = 200) -> Answer:
        return cls(json.dumps(value).encode(), status)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)


class HostileServer:
    """Answers `routes[path]` (the path without its query); 404 for anything else."""

    def __init__(self, routes: dict[str, Answer]) -> None:
        self.routes = routes
        self.seen: list[Seen] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                path = self.path.split("?", 1)[0]
                server.seen.append(Seen(self.command, self.path, dict(self.headers.items())))
                answer = server.routes.get(path, Answer(b'{"error": "not found"}', 404))
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.content_type)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:  # quiet
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def vllm(entry: dict[str, Any]) -> dict[str, Answer]:
    """A vLLM-like server whose one model entry is `entry` (plus its id and owner)."""
    return {
        "/v1/models": Answer.of({"data": [{"id": "m", "owned_by": "vllm", **entry}]}),
        "/tokenize": Answer.of({"tokens": [1, 2, 3]}),
    }


def llama_server(props: dict[str, Any]) -> dict[str, Answer]:
    """A llama-server-like server whose /props is `props` (plus its settings key)."""
    return {
        "/v1/models": Answer.of({"data": [{"id": "m"}]}),
        "/props": Answer.of({"default_generation_settings": {}, **props}),
        "/tokenize": Answer.of({"tokens": [1, 2, 3]}),
    }
