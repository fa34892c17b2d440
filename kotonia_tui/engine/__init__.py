"""The engine: the only layer that imports llama_cpp.

Model loading and checks, the owner thread (never two model calls at once), KV slots with prefix
reuse, chunked multimodal evaluation, streaming with cancellation, and exact token counting.
"""

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
    SlotTakenOverError,
    StreamInterruptedError,
)
from kotonia_tui.engine.llama_engine import (
    LlamaEngine,
    gpu_offload_supported,
    llama_cpp_version,
)
from kotonia_tui.engine.protocol import Call, Engine, ModelInfo
from kotonia_tui.engine.server import ServerCall, ServerEngine, ServerInfo, ServerKind
from kotonia_tui.engine.types import (
    ChatMessage,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    ImageInput,
    Priority,
    ReasoningDelta,
    Slot,
    StreamEvent,
    TextDelta,
)

__all__ = [
    "BackendUnavailableError",
    "Call",
    "CallPreemptedError",
    "ChatMessage",
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
    "SlotTakenOverError",
    "StreamEvent",
    "StreamInterruptedError",
    "TextDelta",
    "gpu_offload_supported",
    "llama_cpp_version",
]
