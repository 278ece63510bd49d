"""``ReplicaSet``: several engines serving one model, balanced, with failover, behind the ``Engine`` interface.

The server above sees one engine; this module decides which replica takes each call.

Choosing a replica (``_choose``):

1. Only replicas in service are candidates (when every one is out, all of them are: the call is then a
   probe of its own, and the first replica that answers is back in service).
2. Affinity: the call's own response (a later call of the same tool loop), then its ``affinity`` keys in
   order (the previous response, the conversation, the ``prompt_cache_key``) go to the replica that
   served them last, so that its prefix cache holds the prompt's start. Affinity yields when that replica
   is out, or when it has more calls in flight than the least busy candidate by more than
   ``max(affinity_slack, least // 2)`` (4 by default: a replica 5 calls busier than an idle one, or 50%
   plus busier under load, loses the call; a recomputed prefix costs less than queueing behind others).
3. A key this process has not seen (a conversation, ``prompt_cache_key`` or ``previous_response_id``
   chain whose earlier turns another worker process served, or that is new) goes to the replica its
   rendezvous hash prefers, with the same slack: every process sharing the replicas picks the same one,
   without sharing any state.
4. Otherwise the candidate with the fewest calls in flight; among equals, the one chosen least recently.

The key → replica map is a bounded LRU (``affinity_size`` entries) in this process; when a call is sent,
its keys are re-pointed at the replica chosen (so the calls of a burst sharing a key follow the first). A
previous response is found through this map; one another process generated, through its chain's hash.

Failures. A replica that cannot take a call before its first item (unreachable, timed out, a cut
connection, an HTTP 5xx) is taken out of service and the call goes to another replica not tried yet; a
refusal of the request itself (a 4xx: too long a prompt, a bad parameter) is the client's and is raised
as it is, the replica staying in service. A replica whose stream ends in an error mid-way is probed at
once (the stream cannot move: tokens were sent). A probe that fails, for whatever reason (unreachable, or
the replica now answers but cannot serve Harmony), takes the replica out. A replica out of
service is probed in the background (``Engine.probe``: the HTTP engines' start-up check) after
``probe_delay`` seconds, doubling up to ``probe_max_delay``, and put back when it answers.

Start-up succeeds when at least one replica starts; the others are logged and probed in the background.
A replica that answers but cannot serve Harmony (``EngineMismatch``) or refuses us (a 4xx such as a
wrong API key) fails the start: waiting would not mend it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
from collections import OrderedDict
from collections.abc import Sequence

from .. import tracing
from ..metrics import ENGINE_RETRIES, REPLICA_OUTAGES, engine_label, failure_reason
from ..tokens import EngineEnd
from ._base import (
    Engine,
    EngineError,
    EngineHealth,
    EngineProtocolError,
    EngineRefused,
    EngineStream,
    EngineTimeout,
    EngineUnavailable,
    GenerateRequest,
)

__all__ = ["ReplicaSet", "is_outage"]

logger = logging.getLogger("harmony_responses.engine")

AFFINITY_SLACK = 4
AFFINITY_SIZE = 100_000
PROBE_DELAY = 0.5
PROBE_MAX_DELAY = 15.0
# A replica that takes longer to answer a probe is treated as down (a readiness probe must answer quickly).
PROBE_TIMEOUT = 5.0
# Keys a client sends with every turn (unlike a response id, which only the process that made it knows).
HASHED_KEYS = ("conversation:", "prompt_cache_key:", "chain:")


def is_outage(exc: EngineError) -> bool:
    """Whether ``exc`` says the replica is out of order (rather than that it refused this request)."""
    if isinstance(exc, EngineUnavailable | EngineTimeout | EngineProtocolError):
        return True
    return isinstance(exc, EngineRefused) and exc.status is not None and exc.status >= 500


class _Replica:
    __slots__ = ("engine", "error", "identity", "in_flight", "last_chosen", "probing", "up")

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # What the rendezvous hash knows it by: its description before start, the same in every process.
        self.identity = engine.describe().encode()
        self.in_flight = 0
        self.last_chosen = 0
        self.up = True
        self.error: str | None = None  # why it is out of service
        self.probing: asyncio.Task[None] | None = None


class ReplicaSet(Engine):
    """``replicas`` serving one model as one engine (see the module docstring).

    Args:
        replicas: the engines, each a full ``Engine`` (its own URL, pool and start-up check).
        label: what log lines and errors call the set (the model name).
        affinity_slack: how many more calls in flight than the least busy replica an affine one may have.
        probe_delay, probe_max_delay: the background probe's first wait and its longest, in seconds.
        probe_timeout: seconds a replica may take to answer a probe.
        affinity_size: the most affinity keys remembered.
    """

    name = "replicas"

    def __init__(
        self,
        replicas: Sequence[Engine],
        *,
        label: str,
        affinity_slack: int = AFFINITY_SLACK,
        probe_delay: float = PROBE_DELAY,
        probe_max_delay: float = PROBE_MAX_DELAY,
        probe_timeout: float = PROBE_TIMEOUT,
        affinity_size: int = AFFINITY_SIZE,
    ) -> None:
        assert replicas, "a ReplicaSet needs at least one replica"
        self.replicas = [_Replica(engine) for engine in replicas]
        self.label = label
        self.affinity_slack = affinity_slack
        self.probe_delay = probe_delay
        self.probe_max_delay = probe_max_delay
        self.probe_timeout = probe_timeout
        self.affinity_size = affinity_size
        self._affinity: OrderedDict[str, _Replica] = OrderedDict()
        self._clock = itertools.count(1)
        self._closed = False

    @property
    def engines(self) -> list[Engine]:
        return [r.engine for r in self.replicas]

    @property
    def direct_reads(self) -> bool:  # type: ignore[override]
        # What this relay looks at is the streams' ends, never taken where they are read.
        return all(r.engine.direct_reads for r in self.replicas)

    def in_service(self) -> list[Engine]:
        return [r.engine for r in self.replicas if r.up]

    # ------------------------------------------------------------------ lifetime

    async def start(self) -> None:
        results = await asyncio.gather(*(r.engine.start() for r in self.replicas), return_exceptions=True)
        fatal: BaseException | None = None
        for replica, result in zip(self.replicas, results, strict=True):
            if result is None:
                continue
            if isinstance(result, EngineError) and is_outage(result):
                replica.up, replica.error = False, str(result)
                REPLICA_OUTAGES.labels(engine_label(replica.engine), failure_reason(result)).inc()
            elif fatal is None:
                fatal = result
        if fatal is None and not any(r.up for r in self.replicas):
            errors = [r for r in results if isinstance(r, BaseException)]
            fatal = errors[0] if len(errors) == 1 else EngineUnavailable(self._why_none())
        if fatal is not None:
            await self.aclose()
            raise fatal
        windows = [r.engine.context_window for r in self.replicas if r.up and r.engine.context_window is not None]
        self.context_window = min(windows) if windows else None
        for replica in self.replicas:
            if not replica.up:
                logger.warning("%s: a replica is out, probed in the background: %s", self.label, replica.error)
                self._probe_later(replica)

    async def aclose(self) -> None:
        self._closed = True
        for replica in self.replicas:
            if replica.probing is not None:
                replica.probing.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await replica.probing
                replica.probing = None
        for replica in self.replicas:
            await replica.engine.aclose()

    def describe(self) -> str:
        if len(self.replicas) == 1:
            return self.replicas[0].engine.describe()
        return f"{len(self.replicas)} replicas: " + "; ".join(r.engine.describe() for r in self.replicas)

    # ------------------------------------------------------------------ health

    async def probe(self) -> None:
        if not any(h.error is None for h in await self.health()):
            raise EngineUnavailable(self._why_none())

    async def health(self) -> list[EngineHealth]:
        """Probe every replica now; a replica's answer puts it back or takes it out."""
        results = await asyncio.gather(*(self._probe_once(r) for r in self.replicas))
        return [EngineHealth(r.engine.describe(), error) for r, error in zip(self.replicas, results, strict=True)]

    async def _probe(self, replica: _Replica) -> None:
        try:
            await asyncio.wait_for(replica.engine.probe(), self.probe_timeout)
        except TimeoutError:
            raise EngineTimeout(
                f"{replica.engine.describe()}: did not answer the probe within {self.probe_timeout:g} s"
            ) from None

    async def _probe_once(self, replica: _Replica) -> str | None:
        try:
            await self._probe(replica)
        except EngineError as exc:
            self._take_out(replica, exc)  # whatever the probe found wrong, calls should not go there
            return str(exc) or type(exc).__name__
        self._put_back(replica)
        return None

    def _why_none(self) -> str:
        reasons = "; ".join(r.error or "not answering" for r in self.replicas)
        return f"no replica of {self.label} answers: {reasons}"

    def _take_out(self, replica: _Replica, exc: BaseException) -> None:
        replica.error = str(exc) or type(exc).__name__
        if replica.up:
            replica.up = False
            REPLICA_OUTAGES.labels(engine_label(replica.engine), failure_reason(exc)).inc()
            logger.warning("%s: a replica is taken out of service: %s", self.label, replica.error)
        self._probe_later(replica)

    def _put_back(self, replica: _Replica) -> None:
        if not replica.up:
            replica.up, replica.error = True, None
            logger.warning("%s: a replica is back in service: %s", self.label, replica.engine.describe())
            if self.context_window is None or (
                replica.engine.context_window is not None and replica.engine.context_window < self.context_window
            ):
                # Prompts were fitted to the others' context; one smaller would refuse the longest.
                logger.warning(
                    "%s: the replica back in service has a context of %s tokens (the others: %s)",
                    self.label,
                    replica.engine.context_window,
                    self.context_window,
                )
        probing = replica.probing
        if probing is not None and probing is not asyncio.current_task():
            probing.cancel()
            replica.probing = None

    def _probe_later(self, replica: _Replica) -> None:
        if self._closed or (replica.probing is not None and not replica.probing.done()):
            return
        replica.probing = asyncio.get_running_loop().create_task(self._probe_until_back(replica))

    async def _probe_until_back(self, replica: _Replica) -> None:
        delay = self.probe_delay
        while not replica.up:
            await asyncio.sleep(delay)
            try:
                await self._probe(replica)
            except EngineError as exc:
                replica.error = str(exc) or type(exc).__name__
                delay = min(delay * 2, self.probe_max_delay)
                continue
            replica.probing = None
            self._put_back(replica)

    def _suspect(self, replica: _Replica) -> None:
        """A stream of ``replica`` failed mid-way: probe it now, and take it out if it does not answer."""
        if self._closed or not replica.up or (replica.probing is not None and not replica.probing.done()):
            return

        async def check() -> None:
            try:
                await self._probe(replica)
            except EngineError as exc:
                replica.probing = None
                self._take_out(replica, exc)
            else:
                replica.probing = None
                self._put_back(replica)  # a call may have taken it out meanwhile

        replica.probing = asyncio.get_running_loop().create_task(check())

    # ------------------------------------------------------------------ generation

    def _keys(self, request: GenerateRequest) -> list[str]:
        own = [f"response:{request.request_id}"] if request.request_id else []
        return own + list(request.affinity)

    def _choose(self, request: GenerateRequest, tried: set[_Replica]) -> _Replica | None:
        untried = [r for r in self.replicas if r not in tried]
        candidates = [r for r in untried if r.up] or untried
        if not candidates:
            return None
        least = min(r.in_flight for r in candidates)
        slack = max(self.affinity_slack, least // 2)
        for key in self._keys(request):
            replica = self._affinity.get(key)
            if replica is not None and replica in candidates and replica.in_flight - least <= slack:
                return replica
        for key in request.affinity:
            if key.startswith(HASHED_KEYS) and key not in self._affinity:
                replica = max(candidates, key=lambda r: _rendezvous(key, r.identity))
                if replica.in_flight - least <= slack:
                    return replica
                break
        return min(candidates, key=lambda r: (r.in_flight, r.last_chosen))

    def _remember(self, request: GenerateRequest, replica: _Replica) -> None:
        for key in self._keys(request):
            self._affinity[key] = replica
            self._affinity.move_to_end(key)
        while len(self._affinity) > self.affinity_size:
            self._affinity.popitem(last=False)

    async def generate(self, request: GenerateRequest) -> EngineStream:  # type: ignore[override]
        tried: set[_Replica] = set()
        # One replica (the common setup) has no choice to make and nothing to remember for the next call.
        alone = self.replicas[0] if len(self.replicas) == 1 else None
        while True:
            replica = alone or self._choose(request, tried)
            assert replica is not None
            tried.add(replica)
            replica.in_flight += 1
            if alone is None:
                replica.last_chosen = next(self._clock)
                # At once, not at the first token: calls of a burst sharing a key follow the first one.
                self._remember(request, replica)
            if tracing.enabled():  # the engine call's span (run/loop.py) names the replica
                tracing.annotate(tracing.current(), {"harmony.replica": replica.engine.describe()})
            stream = replica.engine.generate(request)
            try:
                try:
                    first = await anext(stream)
                except StopAsyncIteration:
                    return
                except EngineError as exc:
                    if not is_outage(exc):
                        raise
                    self._take_out(replica, exc)
                    if len(tried) == len(self.replicas):
                        raise
                    ENGINE_RETRIES.labels(engine_label(replica.engine)).inc()
                    logger.warning("%s: retrying the call on another replica", self.label)
                    continue
                self._put_back(replica)  # it answered: in service (a call made while every replica was out)
                if isinstance(first, EngineEnd) and first.reason == "error":
                    self._suspect(replica)
                yield first
                async for item in stream:
                    if isinstance(item, EngineEnd) and item.reason == "error":
                        self._suspect(replica)
                    yield item
                return
            finally:
                replica.in_flight -= 1
                await stream.aclose()


def _rendezvous(key: str, identity: bytes) -> bytes:
    # Highest random weight: a replica leaving moves only its own keys. blake2b, not hash(): the same in
    # every process (str hashes are salted per process).
    return hashlib.blake2b(key.encode() + b"\0" + identity, digest_size=8).digest()
