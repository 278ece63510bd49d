"""Which engine serves which model: the ``--engine [NAME=]SPEC`` values → ``Config`` fields → model → ``Engine``.

``--engine NAME=SPEC`` binds model NAME to an engine (NAME is served even when ``--model`` does not list
it); a NAME given several times is served by all of its engines as replicas. A plain ``--engine SPEC``
serves every ``--model`` name not bound. Each model's engine is a ``ReplicaSet`` (one replica or more:
balancing, failover, background probes); models with the same specs share one.

Each spec is built by ``engine_from_spec`` with the process's ``EngineOptions``; an HTTP spec carrying
its URL (``vllm:http://gpu-a:8000``) is reached there, one without at ``--engine-url``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..engine import ENGINE_SPECS, Engine, ReplicaSet, engine_from_spec
from .config import Config

__all__ = ["build_engines", "describe_engines", "split_engine_values"]

# The spec kinds (``vllm`` of ``vllm[:URL]``): text before "=" that starts with one is a spec, not a name.
_KINDS = frozenset(form.split("[")[0].split(":")[0] for form, _ in ENGINE_SPECS)


def _binding(value: str) -> tuple[str | None, str]:
    """``NAME=SPEC`` → (NAME, SPEC); a plain spec → (None, SPEC).

    A spec may hold "=" itself (``replay:/runs/a=b.jsonl``, a URL's query): text before the first "=" is a
    model name only when it does not begin as a spec does (an engine kind, alone or before ":").
    """
    value = value.strip()
    name, equals, spec = value.partition("=")
    if not equals or name.strip().partition(":")[0] in _KINDS:
        return None, value
    name, spec = name.strip(), spec.strip()
    if not name or not spec:
        raise ValueError(f"--engine {value!r}: expected NAME=SPEC with both a model name and an engine spec")
    return name, spec


def split_engine_values(values: Sequence[str]) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """The ``--engine`` values → (the plain spec, or None; the ``(name, spec)`` bindings).

    Raises:
        ValueError: two plain specs (replicas need a name), or a binding without a name or spec.
    """
    plain: list[str] = []
    bound: list[tuple[str, str]] = []
    for value in values:
        name, spec = _binding(value)
        if name is None:
            plain.append(spec)
        else:
            bound.append((name, spec))
    if len(plain) > 1:
        raise ValueError(
            f"--engine is given {len(plain)} plain specs ({', '.join(plain)}); one serves every model not bound. "
            "For replicas of one model, name them: --engine MODEL=SPEC --engine MODEL=SPEC"
        )
    return (plain[0] if plain else None), tuple(bound)


def build_engines(config: Config) -> dict[str, Engine]:
    """Every served model → its engine, in ``config.served_models`` order.

    Raises:
        ValueError: a spec is not valid (the message lists the valid forms).
    """
    by_specs: dict[tuple[str, ...], Engine] = {}
    engines: dict[str, Engine] = {}
    for model in config.served_models:
        specs = config.engine_specs(model)
        if specs not in by_specs:
            names = [m for m in config.served_models if config.engine_specs(m) == specs]
            replicas = [engine_from_spec(spec, config.engine_options) for spec in specs]
            by_specs[specs] = ReplicaSet(replicas, label=", ".join(names))
        engines[model] = by_specs[specs]
    return engines


def describe_engines(engines: dict[str, Engine]) -> str:
    """For the banner: the one engine's line, or one line per engine naming its models."""
    distinct = {id(e): e for e in engines.values()}
    if len(distinct) == 1:
        return next(iter(distinct.values())).describe()
    lines = []
    for engine in distinct.values():
        names = ", ".join(m for m, e in engines.items() if e is engine)
        lines.append(f"{names} → {engine.describe()}")
    return "\n          ".join(lines)
