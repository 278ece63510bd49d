"""``EngineOptions``: what a person says about an engine besides its spec (URL, model, bounds, recording)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["EngineOptions"]


@dataclass(frozen=True, kw_only=True)
class EngineOptions:
    """Options for the engines that need them; every field has a default that works on one machine.

    Args:
        url: the engine's base URL (``http://gpu-box:8000``); None: the engine's usual local port.
            A trailing ``/v1`` is accepted and dropped (people copy the OpenAI base URL).
        model: the engine's model name, for engines that want one in each request (vLLM, TensorRT-LLM);
            None: the one model the engine serves (the start-up check asks it).
        api_key: sent as ``Authorization: Bearer …`` to engines started with an API key.
        connect_timeout: seconds to open a connection (also to wait for a free pooled connection).
        first_token_timeout: seconds from sending a request to its first generated token (queueing and
            prefill of a long prompt happen here, hence the generous default).
        stall_timeout: seconds the engine may stay silent mid-stream (only while we wait for it: a slow
            client holding us back does not count).
        max_connections: the pool's size, i.e. at most this many concurrent generations per engine.
        start_wait: seconds the start-up check keeps retrying an engine that cannot be reached yet
            (0: one try), for servers started alongside their engine.
        record: a file that every engine call is appended to, in the replay engine's format.
        priority: send each call's ``GenerateRequest.priority`` (its service tier) as the engine's own
            ``priority`` field, for an engine started with priority scheduling (vLLM's ``--scheduling-policy
            priority``, SGLang's ``--enable-priority-scheduling``); a ``default`` tier call sends none.
    """

    url: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    connect_timeout: float = 10.0
    first_token_timeout: float = 300.0
    stall_timeout: float = 60.0
    max_connections: int = 256
    start_wait: float = 0.0
    record: str | None = None
    priority: bool = False

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "first_token_timeout", "stall_timeout"):
            value = getattr(self, name)
            assert math.isfinite(value) and value > 0, f"{name} must be a positive number of seconds, got {value}"
        assert math.isfinite(self.start_wait) and self.start_wait >= 0, "start_wait must be >= 0"
        assert self.max_connections >= 1, "max_connections must be at least 1"
