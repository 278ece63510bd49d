"""Engines: token ids in, token ids out, cancellable. See ``_base`` for the stream contract."""

from ._base import HARMONY_STOP_TOKEN_IDS, Engine, EngineError, EngineStream, GenerateRequest
from ._echo import EchoEngine
from ._mock import MockEngine
from ._play import fake_logprobs
from ._replay import ReplayEngine, ScriptedCall, load_script
from ._spec import ENGINE_SPECS, engine_from_spec

__all__ = [
    "ENGINE_SPECS",
    "HARMONY_STOP_TOKEN_IDS",
    "EchoEngine",
    "Engine",
    "EngineError",
    "EngineStream",
    "GenerateRequest",
    "MockEngine",
    "ReplayEngine",
    "ScriptedCall",
    "engine_from_spec",
    "fake_logprobs",
    "load_script",
]
