"""HTTP plumbing for the server backend: timeouts, SSE parsing, error mapping, and
`ServerHttp`, the one connection to a server that probing, token counts and calls share.

Nothing here knows about prompts or models. Every error names the server and the endpoint and
says what happened in one line, because the user has to act on it (start the server, fix the
key, wait); the server's address in it has its credentials hidden, and a server's own message
is scrubbed of them (`credentials`).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from kotonia_tui.engine.errors import BackendUnavailableError, ServerResponseError
from kotonia_tui.engine.server import bodies
from kotonia_tui.engine.server.credentials import ServerAddress, redact_urls

# Statuses that mean "the server is there but cannot serve right now": a job waits and retries.
UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
MIN_READ_TIMEOUT_S = 120.0
TIMEOUT_MARGIN = 1.5  # on top of the estimated cold re-read
TIMEOUT_EXTRA_S = 60.0


def read_timeout_s(n_ctx: int, prompt_rate: float, configured: float | None) -> float:
    """How long the server may stay silent before the client gives up.

    A streamed reply sends nothing until the whole prompt is read. After a cache miss (the
    turn that applies a fold, a restarted server) that is up to the full window, so the
    timeout is that re-read at a conservative prompt rate, with a margin: a client that gives
    up first would abandon exactly the turn that folds, and the server would read it again.
    """
    if configured is not None:
        return configured
    return max(MIN_READ_TIMEOUT_S, n_ctx / prompt_rate * TIMEOUT_MARGIN + TIMEOUT_EXTRA_S)


def _answer_seconds(timeout: httpx.Timeout) -> float:
    """How long a whole answer that is not a stream may take: its read timeout."""
    return timeout.read if timeout.read is not None else MIN_READ_TIMEOUT_S


def timeouts(connect_s: float, read_s: float) -> httpx.Timeout:
    # No overall deadline: a long reply that keeps streaming is never cut by the client.
    return httpx.Timeout(connect=connect_s, read=read_s, write=max(60.0, connect_s), pool=None)


def unavailable(url: str, exc: httpx.HTTPError) -> BackendUnavailableError:
    """A transport failure as a one-line error naming the server."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        what = "the server does not answer (is it running?)"
    elif isinstance(exc, httpx.ReadTimeout):
        what = "the server sent nothing for longer than the read timeout"
    elif isinstance(exc, httpx.TimeoutException):
        what = f"timed out ({type(exc).__name__})"
    elif isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        what = "the connection was closed by the server"
    else:
        what = f"{type(exc).__name__}: {redact_urls(str(exc))}"
    return BackendUnavailableError(f"{url}: {what}")


def _detail(body: bytes) -> str:
    """The server's own error message, if its body carries one (OpenAI or FastAPI style)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body.decode("utf-8", "replace").strip()[:200]
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data))
        if isinstance(error, dict):
            error = error.get("message", error)
        return str(error)[:200]
    return str(data)[:200]


def status_error(
    url: str, status: int, body: bytes, scrub: Callable[[str], str] = str
) -> BackendUnavailableError | ServerResponseError:
    """`scrub` takes secrets out of the server's own message before it is shown."""
    detail = scrub(_detail(body))
    suffix = f": {detail}" if detail else ""
    if status in UNAVAILABLE_STATUSES:
        return BackendUnavailableError(f"{url}: the server is unavailable (HTTP {status}){suffix}")
    if status == 401 or status == 403:
        return ServerResponseError(
            f"{url}: the server refused the API key (HTTP {status}); set the variable named "
            f"by the profile's api_key_env{suffix}"
        )
    return ServerResponseError(f"{url}: HTTP {status}{suffix}")


async def sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The `data:` payloads of a server-sent event stream, one per event.

    Comments (`: ping`), `event:`/`id:` fields and blank keep-alives are skipped; a multi-line
    data field is joined with newlines as the SSE spec says. `[DONE]` is passed through.
    """
    data: list[str] = []
    async for raw in lines:
        line = raw.rstrip("\r")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


@dataclass(frozen=True)
class Answer:
    """A whole answer that is not a stream: its status and its body, decoded and bounded."""

    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class AnswerTimeout(BackendUnavailableError):
    """An answer that kept coming, a little at a time, for longer than its read timeout."""


_Chunk = TypeVar("_Chunk", bound=bytes)


class _Deadline:
    """The whole of an answer that is not a stream must arrive within its read timeout: a
    server dripping a byte at a time never trips the timeout between reads."""

    def __init__(self, where: str, seconds: float) -> None:
        self.where = where
        self.seconds = seconds
        self.until = time.monotonic() + seconds

    def check(self) -> None:
        if time.monotonic() > self.until:
            raise AnswerTimeout(
                f"{self.where}: the answer kept coming for more than {self.seconds:g} s; "
                "the rest was not read"
            )

    def watch(self, chunks: Iterable[_Chunk]) -> Iterable[_Chunk]:
        for chunk in chunks:
            self.check()
            yield chunk

    async def awatch(self, chunks: AsyncIterator[_Chunk]) -> AsyncIterator[_Chunk]:
        async for chunk in chunks:
            self.check()
            yield chunk


def parse_json(url: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ServerResponseError(f"{url}: the server sent something that is not JSON") from exc


def not_the_answer(where: str, expected: str, got: Any) -> ServerResponseError:
    """A well-formed answer of the wrong shape (a list where an object belongs, ...)."""
    return ServerResponseError(
        f"{where}: the server's answer is not {expected} (got {type(got).__name__})"
    )


class ServerHttp:
    """A server's address, headers and timeouts, and a pooled blocking client.

    Blocking calls (probing, a single token count) use the pool; streams and batches open an
    `AsyncClient` with the same settings on the running loop. `url` is the address as
    messages show it; requests go to the address without credentials in it, which travel as
    headers (basic auth from the URL, unless an API key is set) and query parameters.
    """

    def __init__(
        self, address: ServerAddress, headers: dict[str, str], connect_s: float, read_s: float
    ) -> None:
        self.address = address
        self.url = address.shown
        auth = None
        if address.basic_auth is not None and "Authorization" not in headers:
            auth = httpx.BasicAuth(*address.basic_auth)
        self._settings: dict[str, Any] = {
            # Only what `bodies` decodes itself, a bounded slice at a time.
            "headers": {"Accept-Encoding": bodies.ACCEPT_ENCODING, **headers},
            "params": address.params,
            "auth": auth,
        }
        self._connect_s = connect_s
        self.timeout = timeouts(connect_s, read_s)
        self._client = httpx.Client(**self._settings, timeout=self.timeout)

    def where(self, path: str) -> str:
        """How errors name an endpoint."""
        return self.address.where(path)

    def endpoint(self, path: str) -> str:
        """Where a request goes."""
        return self.address.base + path

    def scrub(self, text: str) -> str:
        """A server's own words with this server's credentials taken out."""
        return self.address.secrets.scrub(text)

    def set_read_timeout(self, read_s: float) -> None:
        self.timeout = timeouts(self._connect_s, read_s)

    def get(self, path: str) -> Answer:
        return self._request("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Answer:
        return self._request("POST", path, body)

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> Answer:
        """A blocking request; the answer read whole, decoded and bounded in size and time."""
        where = self.where(path)
        # A GET is a probe (the client's short timeout); a POST may wait for the model.
        timeout = self.timeout if body is not None else self._client.timeout
        try:
            with self._client.stream(
                method, self.endpoint(path), json=body, timeout=timeout
            ) as response:
                decoder = bodies.Decoder(response.headers.get("content-encoding", ""), where)
                chunks = _Deadline(where, _answer_seconds(timeout)).watch(response.iter_raw())
                if response.status_code != 200:
                    head = bodies.read_head(chunks, decoder, bodies.MAX_ERROR_BYTES)
                    return Answer(response.status_code, head)
                counted = bodies.Counted(bodies.MAX_ANSWER_BYTES, where, "one answer")
                return Answer(200, bodies.read_all(chunks, decoder, counted))
        except httpx.HTTPError as exc:
            raise unavailable(where, exc) from exc

    def json(self, path: str, response: Answer) -> Any:
        """The body of a 200 answer as JSON; any other status is an error naming the path."""
        if response.status_code != 200:
            raise self.status_error(path, response.status_code, response.content)
        return parse_json(self.where(path), response.text)

    def optional_json(self, path: str, response: Answer) -> Any:
        """The JSON of a 200 answer from an endpoint only some servers have; None otherwise
        (a missing endpoint, or a page that is not JSON: this is not that kind of server)."""
        if response.status_code != 200:
            return None
        try:
            return json.loads(response.text)
        except ValueError:
            return None

    def status_error(
        self, path: str, status: int, body: bytes
    ) -> BackendUnavailableError | ServerResponseError:
        return status_error(self.where(path), status, body, self.scrub)

    def async_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(**self._settings, timeout=self.timeout)

    async def apost(self, client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Any:
        """POST on the running loop; the answer's JSON (decoded and bounded as `post`)."""
        where = self.where(path)
        try:
            async with client.stream("POST", self.endpoint(path), json=body) as response:
                decoder = bodies.Decoder(response.headers.get("content-encoding", ""), where)
                deadline = _Deadline(where, _answer_seconds(client.timeout))
                chunks = deadline.awatch(response.aiter_raw())
                if response.status_code != 200:
                    head = await bodies.aread_head(chunks, decoder, bodies.MAX_ERROR_BYTES)
                    raise self.status_error(path, response.status_code, head)
                counted = bodies.Counted(bodies.MAX_ANSWER_BYTES, where, "one answer")
                content = await bodies.aread_all(chunks, decoder, counted)
        except httpx.HTTPError as exc:
            raise unavailable(where, exc) from exc
        return parse_json(where, content.decode("utf-8", "replace"))

    def close(self) -> None:
        self._client.close()
