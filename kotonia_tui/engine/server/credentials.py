"""Credentials for the server backend, and keeping them out of sight.

A server can take an API key (from the variable the profile names, sent as a bearer token), a
user and password in `server_url` (sent as basic auth), or a token in its query (sent with
every request). None of them is ever shown: messages, the log file and `kotonia doctor` see a
URL through `redact_url`, the one function that hides credentials, and any text that may carry
one (a server's error message) through `Secrets.scrub`. A key that an HTTP header cannot carry
is refused by the variable's name, not echoed.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from kotonia_tui.engine.errors import CredentialError

HIDDEN = "***"
# A URL inside free text (an exception message, a log line): scheme, then no white space,
# not ending in the punctuation that follows it in a sentence ("http://host/x: failed").
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*[^\s'\"<>.,:;)]")


def redact_url(url: str) -> str:
    """`url` with its password (or a user name standing alone, often a token) and every
    query value replaced by ***. Anything unparseable is hidden whole after the scheme."""
    if "://" not in url:  # as typed, "user:password@host:port" (http:// is understood)
        return redact_url(f"http://{url}").removeprefix("http://")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a malformed port)
    except ValueError:
        scheme, sep, _ = url.partition("://")
        return f"{scheme}://{HIDDEN}" if sep else HIDDEN
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, has_password, _ = userinfo.partition(":")
        netloc = f"{user}:{HIDDEN}@{host}" if has_password else f"{HIDDEN}@{host}"
    query = "&".join(
        f"{name}={HIDDEN}" if sep else name
        for name, sep, _ in (pair.partition("=") for pair in parts.query.split("&") if pair)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def redact_urls(text: str) -> str:
    """Every URL in `text` through `redact_url`."""
    return _URL_IN_TEXT.sub(lambda match: redact_url(match.group(0)), text)


class RedactingFormatter(logging.Formatter):
    """A log formatter that hides credentials in any URL of a record (tracebacks too)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_urls(super().format(record))


@dataclass
class Secrets:
    """The secret strings of one server, to scrub from whatever text a server sends back."""

    values: set[str] = field(default_factory=set, repr=False)

    def add(self, value: str) -> None:
        if len(value) >= 4:  # shorter ones would blank out ordinary words
            self.values.add(value)

    def scrub(self, text: str) -> str:
        for value in sorted(self.values, key=len, reverse=True):
            text = text.replace(value, HIDDEN)
        return redact_urls(text)


@dataclass(frozen=True)
class ServerAddress:
    """Where requests go (`base`, with no credentials in it) and what goes with each."""

    base: str  # scheme://host:port[/prefix], no /v1, no credentials, no query
    shown: str  # `base` as messages show it (credentials hidden)
    # The URL's query, sent with every request, and its user and password (basic auth).
    params: tuple[tuple[str, str], ...] = field(repr=False)
    basic_auth: tuple[str, str] | None = field(repr=False)
    secrets: Secrets = field(repr=False)

    def where(self, path: str) -> str:
        """An endpoint as messages name it."""
        query = "&".join(f"{name}={HIDDEN}" for name, _ in self.params)
        return f"{self.shown}{path}" + (f"?{query}" if query else "")


def server_address(url: str) -> ServerAddress:
    """`http://host:port` and its credentials from what a user may type (a trailing `/v1` or
    slash, no scheme, user:password@, ?token=)."""
    url = url.strip()
    if "://" not in url:
        url = f"http://{url}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a malformed port)
    except ValueError as exc:
        raise CredentialError(
            f"server_url {redact_url(url)} is not a URL this app can use ({exc})"
        ) from None
    secrets = Secrets()
    basic_auth = None
    if parts.username is not None or parts.password is not None:
        basic_auth = (unquote(parts.username or ""), unquote(parts.password or ""))
        for value in (parts.username, parts.password, *basic_auth):
            secrets.add(value or "")
    params = tuple(parse_qsl(parts.query, keep_blank_values=True))
    for _, value in params:
        secrets.add(value)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    base = urlunsplit((parts.scheme, netloc, path, "", ""))
    userinfo = parts.netloc.rpartition("@")[0]
    with_user = f"{userinfo}@{netloc}" if "@" in parts.netloc else netloc
    shown = redact_url(urlunsplit((parts.scheme, with_user, path, "", "")))
    return ServerAddress(base, shown, params, basic_auth, secrets)


def api_key_headers(variable: str, secrets: Secrets) -> dict[str, str]:
    """A bearer header when the named variable holds a key (the key never goes to a file).

    A key an HTTP header cannot carry (a line break, a control character, anything outside
    ASCII) is refused by the variable's name: sending it would fail with the key in the
    error, or split the header.
    """
    key = os.environ.get(variable, "").strip() if variable else ""
    if not key:
        return {}
    for char in key:
        if "\x21" <= char <= "\x7e":
            continue
        if char in "\r\n\u2028\u2029\x85":
            what = "a line break"
        elif not char.isascii():
            what = "a character outside ASCII"
        elif char == " ":
            what = "a space"
        else:
            what = "a control character"
        raise CredentialError(
            f"${variable} holds {what}, which an HTTP header cannot carry: the API key was not "
            "sent. Set the variable to the key alone"
        )
    secrets.add(key)
    return {"Authorization": f"Bearer {key}"}
