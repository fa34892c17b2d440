"""The server backend: the same engine surface as `LlamaEngine`, over an OpenAI-compatible API.

For models that do not fit the player's machine: llama.cpp's `llama-server`, vLLM, or
llama-cpp-python's own server (`python -m llama_cpp.server`). This package never imports
llama_cpp; it speaks HTTP (httpx) and parses the streamed server-sent events itself.

How a prompt travels, and why:

* The prompt is rendered here, with the same formatter the in-process engine uses, whenever
  that is possible, and sent as text to `/v1/completions`. Then the bytes the server reads are
  the bytes the in-process engine would read: the memory's placement rules (a stable prefix
  between folds) carry over unchanged, and the server's prompt cache (llama-server:
  `cache_prompt`) reuses everything before the new message.
  - `transcript` profiles always go this way (the format needs no template).
  - `template` profiles go this way when the server hands out the model's chat template
    (llama-server's `/props` does, with the BOS/EOS pieces).
* Otherwise (`template` on vLLM or llama-cpp-python's server, which do not expose the
  template; or any prompt with images, which need the server's multimodal path) the messages
  go to `/v1/chat/completions` and the server applies the model's template. That path is
  deterministic too (same messages, same text), so the cache still works turn to turn; only
  `render()` is then an approximation, for display.

Token counts come from the server's tokenizer, cached per text (`tokens`); a server with none
gets an estimate, which `kotonia doctor` says. The context size is the server's where it
reports it (llama-server `/props`, vLLM `max_model_len`), the profile's otherwise (`probe`).
What differs between kinds of server is in one object per kind (`kinds`).

One request at a time goes to the server, through a priority gate (`gate`): a user turn waits
for nothing but another user turn. A background call (a fold, a prewarm) that holds the gate
when a user turn arrives is stopped and raises `CallPreemptedError`; the fold worker runs it
again shortly. (llama-cpp-python's server does the same on its side: a new request interrupts
the one streaming.)
"""

from typing import TYPE_CHECKING

from kotonia_tui.lazy import lazy_exports

if TYPE_CHECKING:
    from kotonia_tui.engine.server.call import ServerCall
    from kotonia_tui.engine.server.engine import ServerEngine
    from kotonia_tui.engine.server.kinds import ServerKind
    from kotonia_tui.engine.server.probe import ServerInfo

# Imported when first used: this package's `credentials` serve the log and the CLI, which
# must not wait for httpx.
__getattr__ = lazy_exports(
    __name__,
    {
        "ServerCall": "kotonia_tui.engine.server.call",
        "ServerEngine": "kotonia_tui.engine.server.engine",
        "ServerKind": "kotonia_tui.engine.server.kinds",
        "ServerInfo": "kotonia_tui.engine.server.probe",
    },
)

__all__ = ["ServerCall", "ServerEngine", "ServerInfo", "ServerKind"]
