"""Engines: token ids in, token ids out, cancellable. See ``_base`` for the stream contract."""

from ._base import (
    HARMONY_STOP_TOKEN_IDS,
    Engine,
    EngineError,
    EngineHealth,
    EngineMismatch,
    EngineProtocolError,
    EngineRefused,
    EngineStream,
    EngineTimeout,
    EngineUnavailable,
    GenerateRequest,
    ToolGrammar,
)
from ._echo import EchoEngine
from ._http import HTTPEngine
from ._llamacpp import LlamaCppEngine
from ._mock import MockEngine
from ._options import EngineOptions
from ._play import fake_logprobs
from ._reading import Reading, current_reading, reading_here
from ._record import RecordingEngine
from ._replay import ReplayEngine, ScriptedCall, load_script
from ._replicas import ReplicaSet
from ._sglang import SGLangEngine
from ._spec import ENGINE_SPECS, engine_from_spec
from ._trtllm import TRTLLMEngine
from ._vllm import VLLMEngine

__all__ = [
    "ENGINE_SPECS",
    "HARMONY_STOP_TOKEN_IDS",
    "EchoEngine",
    "Engine",
    "EngineError",
    "EngineHealth",
    "EngineMismatch",
    "EngineOptions",
    "EngineProtocolError",
    "EngineRefused",
    "EngineStream",
    "EngineTimeout",
    "EngineUnavailable",
    "GenerateRequest",
    "HTTPEngine",
    "LlamaCppEngine",
    "MockEngine",
    "Reading",
    "RecordingEngine",
    "ReplayEngine",
    "ReplicaSet",
    "SGLangEngine",
    "ScriptedCall",
    "TRTLLMEngine",
    "ToolGrammar",
    "VLLMEngine",
    "current_reading",
    "engine_from_spec",
    "fake_logprobs",
    "load_script",
    "reading_here",
]
