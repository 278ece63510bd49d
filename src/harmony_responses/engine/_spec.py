"""Engine specs: the strings a person writes to choose an engine (``--engine vllm``, ``replay:PATH``).

HTTP engines take their URL from ``--engine-url`` or from the spec itself (``vllm:http://gpu:8000``);
without either, the engine's usual local port. ``EngineOptions.record`` wraps whichever engine in the
recorder (``_record.py``).
"""

from __future__ import annotations

import dataclasses

from ._base import Engine
from ._echo import EchoEngine
from ._http import HTTPEngine
from ._llamacpp import LlamaCppEngine
from ._options import EngineOptions
from ._record import RecordingEngine
from ._replay import ReplayEngine
from ._sglang import SGLangEngine
from ._trtllm import TRTLLMEngine
from ._vllm import VLLMEngine

__all__ = ["ENGINE_SPECS", "engine_from_spec"]

# Shown verbatim when a spec is not understood, so that the person sees every valid form.
ENGINE_SPECS: tuple[tuple[str, str], ...] = (
    ("echo", "a stand-in that echoes the last user message back (the default; not a model)"),
    ("replay:PATH", "plays a JSON Lines script, one line per engine call"),
    ("vllm[:URL]", "vLLM's server (default http://127.0.0.1:8000)"),
    ("sglang[:URL]", "SGLang's server (default http://127.0.0.1:30000)"),
    ("llamacpp[:URL]", "llama.cpp's llama-server (default http://127.0.0.1:8080)"),
    ("trtllm[:URL]", "TensorRT-LLM's trtllm-serve (default http://127.0.0.1:8000)"),
    ("transformers:PATH", "a local checkpoint run in-process by Hugging Face transformers"),
)

HTTP_ENGINES: dict[str, type[HTTPEngine]] = {
    "vllm": VLLMEngine,
    "sglang": SGLangEngine,
    "llamacpp": LlamaCppEngine,
    "trtllm": TRTLLMEngine,
}


def _valid_forms() -> str:
    return "; ".join(f"'{form}' ({what})" for form, what in ENGINE_SPECS)


def engine_from_spec(spec: str, options: EngineOptions | None = None) -> Engine:
    """Build the engine a spec names.

    Args:
        spec: ``echo``, ``replay:PATH``, ``vllm[:URL]``, ``sglang[:URL]``, ``llamacpp[:URL]``,
            ``trtllm[:URL]`` or ``transformers:PATH``.
        options: URL, model, bounds and recording for the engines that use them.

    Raises:
        ValueError: the spec names no engine (the message lists the valid forms), or the engine
            rejects its argument (e.g. an invalid replay script: file, line and what is wrong).
    """
    options = options or EngineOptions()
    engine = _build(spec.strip(), options)
    if options.record:
        engine = RecordingEngine(engine, options.record)
    return engine


def _build(spec: str, options: EngineOptions) -> Engine:
    kind, colon, argument = spec.partition(":")
    if kind == "echo" and not colon:
        return EchoEngine()
    if kind == "replay":
        if not argument:
            raise ValueError(f"engine 'replay' needs a script file: 'replay:PATH'; valid engines: {_valid_forms()}")
        return ReplayEngine(argument)
    if kind in HTTP_ENGINES:
        if argument:
            if options.url and options.url.rstrip("/") != argument.rstrip("/"):
                raise ValueError(f"engine {spec!r} names a URL and --engine-url names another ({options.url})")
            if not argument.startswith(("http://", "https://")):
                raise ValueError(f"engine {kind!r}: {argument!r} is not an http:// or https:// URL")
            options = dataclasses.replace(options, url=argument)
        return HTTP_ENGINES[kind](options)
    if kind == "transformers":
        if not argument:
            raise ValueError("engine 'transformers' needs a checkpoint folder: 'transformers:PATH'")
        from ._transformers import TransformersEngine  # torch is optional: imported only when asked for

        return TransformersEngine(argument, options)
    raise ValueError(f"unknown engine {spec!r}; valid engines: {_valid_forms()}")
