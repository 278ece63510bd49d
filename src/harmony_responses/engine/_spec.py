"""Engine specs: the strings a person writes to choose an engine (``--engine echo``, ``replay:PATH``)."""

from __future__ import annotations

from ._base import Engine
from ._echo import EchoEngine
from ._replay import ReplayEngine

__all__ = ["ENGINE_SPECS", "engine_from_spec"]

# Shown verbatim when a spec is not understood, so that the person sees every valid form.
ENGINE_SPECS: tuple[tuple[str, str], ...] = (
    ("echo", "a stand-in that echoes the last user message back (the default; not a model)"),
    ("replay:PATH", "plays a JSON Lines script, one line per engine call"),
)


def _valid_forms() -> str:
    return "; ".join(f"'{form}' ({what})" for form, what in ENGINE_SPECS)


def engine_from_spec(spec: str) -> Engine:
    """Build the engine a spec names.

    Raises:
        ValueError: the spec names no engine (the message lists the valid forms), or the engine
            rejects its argument (e.g. an invalid replay script: file, line and what is wrong).
    """
    kind, colon, argument = spec.strip().partition(":")
    if kind == "echo" and not colon:
        return EchoEngine()
    if kind == "replay":
        if not argument:
            raise ValueError(f"engine 'replay' needs a script file: 'replay:PATH'; valid engines: {_valid_forms()}")
        return ReplayEngine(argument)
    raise ValueError(f"unknown engine {spec!r}; valid engines: {_valid_forms()}")
