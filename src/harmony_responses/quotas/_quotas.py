"""A server's quotas at run time: which key a request carries, its admission, its slot and its tokens.

A request (``POST``, ``GET`` or ``DELETE`` under ``/v1/``, and each ``response.create`` on a WebSocket) with a
limited key is admitted (``Quotas.admit``) when its key's requests bucket has a request left and its tokens
bucket a token: it takes the request, and its ``Grant`` says the levels for the ``x-ratelimit-*`` headers.
A response then holds a concurrency slot (``Grant.acquire``) until it ends (a background one until its run
ends), and its tokens are taken as the engine produces them (``Grant.tokens``, fed by ``metrics.RunMetrics``
through ``metrics.TOKEN_SINK``), reconciled to its usage (input + output) when it ends.

Precision, across processes and gateways: admissions and slots are exact (one transaction each, in the
shared database). Tokens are taken ``TAKE_EVERY`` seconds after they are produced, for every running
response of a key in one transaction, so a process's last ``TAKE_EVERY`` of a key's tokens are not seen by
the others yet, and a response's prompt is taken when it ends; a response admitted on the last token may
overdraw the minute by its own size, never more, and the overdraft is paid back before the next admission
(the level must be back above 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import APIError
from ..ids import random_id
from ..metrics import QUOTA_REJECTIONS
from ._counters import SLOT_TTL, Counters, Levels, SlotAsk
from ._limits import ASKED, KeyLimits, key_id

__all__ = ["CURRENT", "TAKE_EVERY", "Grant", "Quotas", "resolve_tier"]

logger = logging.getLogger("harmony_responses.quotas")

# How long a process keeps the tokens its responses produce before it takes them from their key's bucket
# (one transaction per key for all of them).
TAKE_EVERY = 0.1
# The request's grant (HTTP: set by http/quotas.py around the request; WebSocket: per response.create).
CURRENT: contextvars.ContextVar[Grant | None] = contextvars.ContextVar("harmony_responses_quota", default=None)

_LIMIT_NAMES = {"requests": "requests_per_minute", "tokens": "tokens_per_minute"}
_UNITS = {"requests": "requests per min (RPM)", "tokens": "tokens per min (TPM)"}


def duration(seconds: float) -> str:
    """OpenAI's ``x-ratelimit-reset-*`` format: ``17ms``, ``1.5s``, ``6m0s``."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{max(1, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


def _wait(level: float, limit: int) -> float:
    """Seconds until a bucket at ``level`` is back to 1."""
    return max(0.0, (1 - level) * 60.0 / limit)


# Tasks nothing else holds (a slot's release, a background response's settling) until they are done: the
# event loop keeps only weak references to its tasks.
_TASKS: set[asyncio.Task[Any]] = set()


def _keep(task: asyncio.Task[Any]) -> asyncio.Task[Any]:
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)
    return task


class QuotaExceeded(APIError):
    """429 in the API's shape, with ``retry-after`` (and ``-ms``, which the openai SDKs read first)."""

    def __init__(self, message: str, *, type: str, retry: float, headers: dict[str, str]) -> None:
        retry = max(retry, 0.001)
        super().__init__(
            message,
            status=429,
            type=type,
            code="rate_limit_exceeded",
            headers={**headers, "retry-after": str(math.ceil(retry)), "retry-after-ms": str(math.ceil(retry * 1000))},
        )


def resolve_tier(requested: str | None) -> str:
    """The tier a request runs in (``service_tier``): ``auto`` is ``default``, unless the request's key may not
    use ``default``. Raises APIError 403 when the key may not use the tier asked for."""
    grant = CURRENT.get()
    if grant is None:
        return ASKED.get(requested or "auto") or "default"
    tier = grant.limits.tier(requested)
    if tier is None:
        allowed = ", ".join(grant.limits.service_tiers or ())
        raise APIError(
            f"This API key may not use service_tier '{requested}'; it may use: {allowed}.",
            status=403,
            type="invalid_request_error",
            param="service_tier",
            code="service_tier_not_allowed",
        )
    return tier


class Quotas:
    """The limited keys and the counters they are kept in; ``open()`` in the app's lifespan, ``aclose()`` at
    its end."""

    def __init__(self, keys: Iterable[KeyLimits], counters: Counters) -> None:
        self.keys = {k.id: k for k in keys}
        self.counters = counters
        self.holder = random_id("qp")  # this process's slots
        self._renewing: asyncio.Task[None] | None = None
        self._tokens: dict[str, int] = {}  # per key: tokens produced here, not yet taken from its bucket
        self._taking: dict[str, asyncio.Task[None]] = {}  # per key: the task that takes them

    async def open(self) -> None:
        await self.counters.open()
        self._renewing = asyncio.get_running_loop().create_task(self._renew(), name="quota-slots")

    def take(self, limits: KeyLimits, count: int) -> None:
        """Take ``count`` tokens from ``limits``'s bucket soon: within ``TAKE_EVERY`` seconds, in one
        transaction for every response of the key running in this process."""
        key = limits.id
        self._tokens[key] = self._tokens.get(key, 0) + count
        if key not in self._taking:
            self._taking[key] = _keep(asyncio.get_running_loop().create_task(self._take(limits)))

    async def _take(self, limits: KeyLimits) -> None:
        key, tpm = limits.id, limits.tokens_per_minute
        assert tpm is not None
        try:
            await asyncio.sleep(TAKE_EVERY)
            while count := self._tokens.pop(key, 0):
                await self.counters.charge(key, tpm, count)
        except Exception:
            logger.exception("quota tokens not taken (key %s)", limits.name)
        finally:
            self._taking.pop(key, None)

    async def aclose(self) -> None:
        for limits in [self.keys[key] for key in self._taking]:  # what is waiting is taken now
            count = self._tokens.pop(limits.id, 0)
            if count and limits.tokens_per_minute is not None:
                with contextlib.suppress(Exception):
                    await self.counters.charge(limits.id, limits.tokens_per_minute, count)
        if self._renewing is not None:
            self._renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewing
        with contextlib.suppress(Exception):
            await self.counters.release_holder(self.holder)  # a clean stop frees its slots at once
        await self.counters.aclose()

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(SLOT_TTL / 3)
            try:
                await self.counters.renew(self.holder)
            except Exception:
                logger.exception("quota slots: renewing failed (they expire %g s after the last renewal)", SLOT_TTL)

    def limits_for(self, authorization: str) -> KeyLimits | None:
        """The limits of the key in an ``Authorization`` header's value (None: an unlimited key, or none)."""
        token = authorization.partition(" ")[2].strip()
        return self.keys.get(key_id(token)) if token else None

    async def admit(self, limits: KeyLimits, *, response: bool = False) -> Grant:
        """Take one request from ``limits``'s key, and for a ``response`` (a create) its concurrency slot in
        the same transaction. Raises QuotaExceeded (its buckets are empty, its slots taken) or a 503."""
        if not limits.limited and limits.max_concurrent is None and limits.max_concurrent_background is None:
            return Grant(self, limits, Levels(None, None))  # only its tiers are restricted: nothing to count
        ask = None
        if response and limits.max_concurrent is not None:
            ask = SlotAsk(random_id("qs"), self.holder, limits.max_concurrent)
        try:
            levels = await self.counters.admit(limits.id, limits.requests_per_minute, limits.tokens_per_minute, ask)
        except Exception as exc:
            logger.exception("quota counters failed")
            raise APIError(
                "The server could not check this key's rate limits; try again shortly.",
                status=503,
                type="server_error",
                code="quota_unavailable",
            ) from exc
        grant = Grant(self, limits, levels)
        if levels.refused == "max_concurrent":
            raise grant.concurrency_exceeded("max_concurrent")
        if levels.refused is not None:
            kind = levels.refused
            QUOTA_REJECTIONS.labels(limits.name, _LIMIT_NAMES[kind]).inc()
            limit = limits.requests_per_minute if kind == "requests" else limits.tokens_per_minute
            assert limit is not None
            level = levels.requests if kind == "requests" else levels.tokens
            assert level is not None
            retry = _wait(level, limit)
            used = limit - max(math.floor(level), 0)
            raise QuotaExceeded(
                f"Rate limit reached for API key '{limits.name}' on {_UNITS[kind]}: Limit {limit}, Used {used}, "
                f"Requested 1. Please try again in {duration(retry)}.",
                type=kind,
                retry=retry,
                headers=dict(grant.headers()),
            )
        if ask is not None:
            grant._slot = ask.id
        return grant


class Grant:
    """One admitted request of a limited key: its headers, its slot, its tokens (``metrics.TOKEN_SINK``)."""

    def __init__(self, quotas: Quotas, limits: KeyLimits, levels: Levels) -> None:
        self.quotas = quotas
        self.limits = limits
        self.levels = levels
        self._slot: str | None = None

    def headers(self) -> Sequence[tuple[str, str]]:
        """OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` for the levels at admission."""
        out: list[tuple[str, str]] = []
        for kind, limit, level in (
            ("requests", self.limits.requests_per_minute, self.levels.requests),
            ("tokens", self.limits.tokens_per_minute, self.levels.tokens),
        ):
            if limit is None or level is None:
                continue
            out += [
                (f"x-ratelimit-limit-{kind}", str(limit)),
                (f"x-ratelimit-remaining-{kind}", str(max(math.floor(level), 0))),
                (f"x-ratelimit-reset-{kind}", duration((limit - level) * 60.0 / limit)),
            ]
        return out

    async def acquire(self, *, background: bool) -> None:
        """Hold a concurrency slot for the response about to start (its admission took one already unless it
        runs in the background under ``max_concurrent_background``). Raises QuotaExceeded."""
        limits = self.limits
        if limits.max_concurrent is None and (not background or limits.max_concurrent_background is None):
            return
        if self._slot is not None:
            if not background or limits.max_concurrent_background is None:
                return  # taken with the admission
            held, self._slot = self._slot, None
            await self._release(held)  # a background slot instead: it counts against both limits
        slot = random_id("qs")
        refused = await self.quotas.counters.acquire(
            limits.id,
            slot,
            self.quotas.holder,
            background=background,
            most=limits.max_concurrent,
            most_background=limits.max_concurrent_background,
        )
        if refused is not None:
            raise self.concurrency_exceeded(refused)
        self._slot = slot

    def concurrency_exceeded(self, refused: str) -> QuotaExceeded:
        """The 429 for a concurrency limit (``max_concurrent``, ``max_concurrent_background``), counted."""
        limits = self.limits
        QUOTA_REJECTIONS.labels(limits.name, refused).inc()
        most = limits.max_concurrent if refused == "max_concurrent" else limits.max_concurrent_background
        what = "concurrent responses" if refused == "max_concurrent" else "concurrent background responses"
        return QuotaExceeded(
            f"Rate limit reached for API key '{limits.name}' on {what}: Limit {most}. Please try again once one of "
            "them has finished.",
            type="requests",
            retry=1.0,
            headers=dict(self.headers()),
        )

    def hold_until(self, task: asyncio.Future[Any]) -> None:
        """The response runs on in ``task`` (a background one): its slot is freed when that ends, not with the
        request."""
        slot, self._slot = self._slot, None
        if slot is not None:
            task.add_done_callback(lambda _: _keep(asyncio.get_running_loop().create_task(self._release(slot))))

    async def _release(self, slot: str) -> None:
        try:
            await self.quotas.counters.release(slot)
        except Exception:
            logger.exception("quota slot not released (it expires by itself in %g s)", SLOT_TTL)

    def tokens(self, count: int) -> None:
        """``count`` tokens produced (or, negative, given back when usage is settled): see ``Quotas.take``."""
        if self.limits.tokens_per_minute is not None and count:
            self.quotas.take(self.limits, count)

    async def close(self) -> None:
        """The request is over: its slot (unless held by a background run) goes back. Shielded: a request
        cancelled (its client gone) still gives its slot back."""
        slot, self._slot = self._slot, None
        if slot is not None:
            await asyncio.shield(_keep(asyncio.get_running_loop().create_task(self._release(slot))))
