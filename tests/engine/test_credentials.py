"""Hiding a server's credentials: the one redaction function, in URLs as typed and in text."""

from __future__ import annotations

import logging

import pytest

from kotonia_tui.engine.server.credentials import (
    RedactingFormatter,
    redact_url,
    redact_urls,
    server_address,
)

CASES = {
    "http://ann:pw@host:8080/v1": "http://ann:***@host:8080/v1",
    "ann:pw@host:8080": "ann:***@host:8080",  # as typed, without a scheme
    "https://tok3n@host/v1": "https://***@host/v1",  # a user name alone is often a token
    "http://host/v1?api_key=k3y&debug": "http://host/v1?api_key=***&debug",
    "http://host:99999999/x?k=k3y": "http://***",  # unparseable: nothing after the scheme
    "http://[::1]:8080/v1": "http://[::1]:8080/v1",  # nothing to hide
}


@pytest.mark.parametrize("url, shown", CASES.items())
def test_redact_url_hides_passwords_tokens_and_query_values(url, shown):
    assert redact_url(url) == shown


def test_urls_in_text_and_log_records_are_redacted_whatever_the_punctuation():
    text = "GET http://ann:pw@h:1/v1/models?key=k3y: refused (see http://x/y?t=k3y)."
    assert redact_urls(text) == (
        "GET http://ann:***@h:1/v1/models?key=***: refused (see http://x/y?t=***)."
    )
    try:
        raise ValueError("cannot reach http://ann:pw@h:1/v1")
    except ValueError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "at %s", ("http://t0k@h",), None
        )
        record.exc_info = __import__("sys").exc_info()
    line = RedactingFormatter("%(message)s").format(record)
    assert "pw" not in line and "t0k" not in line and "http://ann:***@h:1/v1" in line


def test_a_server_address_keeps_credentials_out_of_its_base_and_its_messages():
    address = server_address("ann:p%40ss@127.0.0.1:8080/v1/?key=t0ken")
    assert address.base == "http://127.0.0.1:8080"
    assert address.basic_auth == ("ann", "p@ss") and address.params == (("key", "t0ken"),)
    assert address.where("/v1/models") == "http://ann:***@127.0.0.1:8080/v1/models?key=***"
    assert "t0ken" not in repr(address) and "p@ss" not in repr(address)
    assert address.secrets.scrub("bad token t0ken for p%40ss") == "bad token *** for ***"
