"""The engine: the only layer that imports llama_cpp.

Model loading and checks, the owner thread (never two model calls at once), KV slots with prefix
reuse, chunked multimodal evaluation, streaming with cancellation, exact token counting, and the
saved KV state that lets a conversation resume warm after a restart.

The two backends are imported when first used (PEP 562 `__getattr__`): importing this package
loads neither llama_cpp (and numpy) nor httpx, so a command that needs no model starts at once.
It sets how llama.cpp's threads wait for each other (engine/threads.py), which must happen
before llama_cpp first loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kotonia_tui.engine import threads
from kotonia_tui.engine.calls import EngineCall, EngineInfo
from kotonia_tui.engine.errors import (
    BackendUnavailableError,
    CallPreemptedError,
    EngineClosedError,
    EngineError,
    ImageError,
    ModelFileError,
    PromptTooLongError,
    ServerResponseError,
    SlotTakenError,
    StreamInterruptedError,
)
from kotonia_tui.engine.protocol import Call, Engine, ModelInfo
from kotonia_tui.engine.types import (
    ChatMessage,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    ImageInput,
    Priority,
    ReasoningDelta,
    Slot,
    StateRef,
    StreamEvent,
    TextDelta,
    Work,
)
from kotonia_tui.lazy import lazy_exports

threads.wait_briefly()  # nothing above loads llama_cpp; every module that does comes after

if TYPE_CHECKING:
    from kotonia_tui.engine.embedding import EmbeddingEngine
    from kotonia_tui.engine.llama_engine import (
        LlamaEngine,
        gpu_offload_supported,
        llama_cpp_version,
    )
    from kotonia_tui.engine.server import ServerCall, ServerEngine, ServerInfo, ServerKind

__getattr__ = lazy_exports(
    __name__,
    {
        "EmbeddingEngine": "kotonia_tui.engine.embedding",
        "LlamaEngine": "kotonia_tui.engine.llama_engine",
        "gpu_offload_supported": "kotonia_tui.engine.llama_engine",
        "llama_cpp_version": "kotonia_tui.engine.llama_engine",
        "ServerCall": "kotonia_tui.engine.server",
        "ServerEngine": "kotonia_tui.engine.server",
        "ServerInfo": "kotonia_tui.engine.server",
        "ServerKind": "kotonia_tui.engine.server",
    },
)

__all__ = [
    "BackendUnavailableError",
    "Call",
    "CallPreemptedError",
    "ChatMessage",
    "EmbeddingEngine",
    "Engine",
    "EngineCall",
    "EngineClosedError",
    "EngineError",
    "EngineInfo",
    "FinishReason",
    "GenerationRequest",
    "GenerationResult",
    "ImageError",
    "ImageInput",
    "LlamaEngine",
    "ModelFileError",
    "ModelInfo",
    "Priority",
    "PromptTooLongError",
    "ReasoningDelta",
    "ServerCall",
    "ServerEngine",
    "ServerInfo",
    "ServerKind",
    "ServerResponseError",
    "Slot",
    "SlotTakenError",
    "StateRef",
    "StreamEvent",
    "StreamInterruptedError",
    "TextDelta",
    "Work",
    "gpu_offload_supported",
    "llama_cpp_version",
]
