"""Several models and replicas: our real server in front of real engine servers (the fakes) and replay engines.

Which replica took a request is what the fakes received (their ``requests``, each naming our response id) or,
for replay engines, which script answered. Replicas go down and come back on the same port while our server
keeps running; ``GET /ready`` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn
from openai import AsyncOpenAI, OpenAI

from api.helpers import start_live, write_script
from harmony_responses.serve import Config, create_app
from reliability.server_process import BIN, server_process

from .fakes import Fake, LlamaCppFake, Scenario, SGLangFake, VLLMFake, harmony

MODEL = "gpt-oss-120b"
SMALL = "gpt-oss-20b"


def answer(text: str) -> list[int]:
    return harmony(f"<|channel|>final<|message|>{text}<|return|>")


class Replica:
    """A fake engine on a fixed port that can be stopped and started again (a replica going down and back)."""

    def __init__(self, fake: Fake, port: int | None = None) -> None:
        self.fake = fake
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Replica:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.fake.url = self.url
        server = uvicorn.Server(
            uvicorn.Config(self.fake.app(), log_level="critical", lifespan="on", timeout_graceful_shutdown=0.2)
        )
        self._server, self._sock = server, sock
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "the fake did not start"
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(10)
            self._sock.close()
            self._server = self._thread = None

    @property
    def ids(self) -> list[str]:
        """Our response ids, in the order this replica received them."""
        return [body["request_id"] for body in self.fake.requests]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def replicas(*fakes: Fake) -> Iterator[list[Replica]]:
    started = [Replica(f).start() for f in fakes]
    try:
        yield started
    finally:
        for r in started:
            r.stop()


@contextlib.contextmanager
def our_server(*bindings: tuple[str, str], **config: Any) -> Iterator[str]:
    """Our server with ``--engine NAME=SPEC`` bindings only; yields its root URL."""
    config.setdefault("current_date", "2025-06-01")
    live = start_live(create_app(Config(models=(), engine=None, model_engines=bindings, **config)))
    try:
        yield live.root
    finally:
        live.stop()


def client(root: str) -> OpenAI:
    return OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0, timeout=20)


def ready(root: str) -> tuple[int, dict[str, Any]]:
    reply = httpx.get(f"{root}/ready", timeout=10)
    return reply.status_code, reply.json()


def wait_until(what: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_two_replay_replicas_alternate_and_keep_affinity(tmp_path: Path) -> None:
    a = write_script(tmp_path / "a.jsonl", ["<|channel|>final<|message|>A<|return|>"])
    b = write_script(tmp_path / "b.jsonl", ["<|channel|>final<|message|>B<|return|>"])
    with our_server((MODEL, a), (MODEL, b)) as root, client(root) as c:
        # Idle replicas take turns.
        texts = [c.responses.create(model=MODEL, input="hi", store=False).output_text for _ in range(4)]
        assert texts in (["A", "B", "A", "B"], ["B", "A", "B", "A"])
        # A prompt_cache_key stays on the replica it first went to.
        first = c.responses.create(model=MODEL, input="hi", prompt_cache_key="k1", store=False).output_text
        assert [
            c.responses.create(model=MODEL, input="hi", prompt_cache_key="k1", store=False).output_text
            for _ in range(3)
        ] == [first] * 3
        # A follow-up goes where its previous response was generated.
        previous = c.responses.create(model=MODEL, input="hi")
        follow = [c.responses.create(model=MODEL, input="more", previous_response_id=previous.id) for _ in range(3)]
        assert [r.output_text for r in follow] == [previous.output_text] * 3
        # And so does a conversation.
        conversation = c.conversations.create()
        turns = [c.responses.create(model=MODEL, input="hi", conversation=conversation.id) for _ in range(3)]
        assert len({t.output_text for t in turns}) == 1


def test_concurrent_requests_spread_by_calls_in_flight() -> None:
    slow = Scenario(tokens=answer("slow answer here"), delay=0.4)
    with (
        replicas(VLLMFake(slow), VLLMFake(slow)) as (a, b),
        our_server((MODEL, f"vllm:{a.url}"), (MODEL, f"vllm:{b.url}")) as root,
    ):

        async def burst(n: int, **extra: Any) -> list[str]:
            async with AsyncOpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0, timeout=30) as ac:
                replies = await asyncio.gather(
                    *(ac.responses.create(model=MODEL, input="hi", store=False, **extra) for _ in range(n))
                )
            return [r.id for r in replies]

        ids = asyncio.run(burst(6))
        assert sorted(a.ids + b.ids) == sorted(ids)
        assert (len(a.ids), len(b.ids)) == (3, 3)

        # The same prompt_cache_key: a burst follows the first call until its replica is more than 4 calls busier
        # than the other (5 in flight against 0); the key then moves with the call that went elsewhere.
        before_a, before_b = len(a.ids), len(b.ids)
        asyncio.run(burst(7, prompt_cache_key="shared"))
        got = sorted([len(a.ids) - before_a, len(b.ids) - before_b])
        assert got == [2, 5]


def test_affinity_by_previous_response_id_on_http_replicas() -> None:
    with (
        replicas(VLLMFake(), VLLMFake()) as (a, b),
        our_server((MODEL, f"vllm:{a.url}"), (MODEL, f"vllm:{b.url}")) as root,
        client(root) as c,
    ):

        def replica_of(response_id: str) -> str:
            return "a" if response_id in a.ids else "b"

        # Six chains, their turns interleaved: each turn goes where its previous response was generated.
        chains = [[c.responses.create(model=MODEL, input=f"chain {i}").id] for i in range(6)]
        for turn in range(3):
            for chain in chains:
                chain.append(c.responses.create(model=MODEL, input=f"turn {turn}", previous_response_id=chain[-1]).id)
        for chain in chains:
            assert len({replica_of(r) for r in chain}) == 1, chain


def test_processes_sharing_a_store_keep_a_chain_on_one_replica(tmp_path: Path) -> None:
    # Two of our servers (as --workers runs them) sharing one store and two replicas, and nothing else: a
    # chain whose turns alternate between them stays on one replica.
    store = f"sqlite:{tmp_path / 'shared.db'}"
    with (
        replicas(VLLMFake(), VLLMFake()) as (a, b),
        our_server((MODEL, f"vllm:{a.url}"), (MODEL, f"vllm:{b.url}"), store=store) as first,
        our_server((MODEL, f"vllm:{a.url}"), (MODEL, f"vllm:{b.url}"), store=store) as second,
        client(first) as one,
        client(second) as two,
    ):
        two.responses.create(model=MODEL, input="warm up", store=False)  # the two choose in different turns
        for i in range(8):
            chain = [one.responses.create(model=MODEL, input=f"chain {i}").id]
            for turn in range(3):
                c = two if turn % 2 == 0 else one
                chain.append(c.responses.create(model=MODEL, input=f"turn {turn}", previous_response_id=chain[-1]).id)
            assert len({"a" if r in a.ids else "b" for r in chain}) == 1, (i, chain)


def test_a_replica_killed_mid_run_is_taken_out_and_put_back_when_it_answers(caplog: pytest.LogCaptureFixture) -> None:
    stalled = Scenario(tokens=answer("never finished"), stall_after=5)
    fine = Scenario(tokens=answer("fine"))
    with (
        replicas(VLLMFake(stalled, fine), VLLMFake(fine)) as (a, b),
        our_server((MODEL, f"vllm:{a.url}"), (MODEL, f"vllm:{b.url}")) as root,
    ):
        with client(root) as c:
            stream = c.responses.create(model=MODEL, input="hi", stream=True, store=False)
            events = iter(stream)
            first_delta = next(e for e in events if e.type == "response.output_text.delta")
            assert first_delta.delta
            victim, survivor = (a, b) if a.fake.requests else (b, a)
            assert victim is a  # the first call goes to the first replica
            a.stop()  # killed while the stream is under way
            with pytest.raises(openai.APIError, match="connection was cut"):  # the stream's error event
                for _ in events:
                    pass
            stream.close()

            # Later requests go to the other replica and succeed (taken out; or retried there, never an error).
            for _ in range(4):
                assert c.responses.create(model=MODEL, input="hi", store=False).output_text == "fine"
            assert len(a.ids) == 1 and len(b.ids) == 4
            # Taken out once (its failed stream got it probed), not tried again by every other request.
            logged = [r.getMessage() for r in caplog.records]
            assert sum("taken out of service" in m for m in logged) == 1
            assert sum("retrying the call on another replica" in m for m in logged) <= 1
            status, body = ready(root)
            assert status == 200  # one replica of the model answers
            (entry,) = body["models"]
            down = [e for e in entry["engines"] if not e["ready"]]
            assert len(down) == 1 and a.url in down[0]["engine"] and "cannot connect" in down[0]["error"]

            a.fake.scenarios = [fine]
            a.start()  # back on the same port
            wait_until(lambda: ready(root)[1]["models"][0]["engines"][0]["ready"])
            for _ in range(4):
                assert c.responses.create(model=MODEL, input="hi", store=False).output_text == "fine"
            assert len(a.ids) == 3  # in service again: idle replicas take turns


def test_readiness_says_which_engine_is_down_and_recovers_by_itself() -> None:
    with (
        replicas(VLLMFake(), VLLMFake()) as (a, b),
        our_server((MODEL, f"vllm:{a.url}"), (SMALL, f"vllm:{b.url}")) as root,
    ):
        status, body = ready(root)
        assert status == 200 and body["status"] == "ready"
        assert [m["id"] for m in body["models"]] == [MODEL, SMALL]
        b.stop()
        time.sleep(1.1)  # past the cached answer
        status, body = ready(root)
        assert status == 503 and body["status"] == "unavailable"
        assert SMALL in body["reason"] and MODEL not in body["reason"]
        by_model = {m["id"]: m for m in body["models"]}
        assert by_model[MODEL]["ready"] and not by_model[SMALL]["ready"]
        (engine,) = by_model[SMALL]["engines"]
        assert b.url in engine["engine"] and "cannot connect" in engine["error"]
        assert httpx.get(f"{root}/health").status_code == 200  # liveness stays up
        with client(root) as c, pytest.raises(openai.InternalServerError) as refused:
            c.responses.create(model=SMALL, input="hi", store=False)
        assert refused.value.status_code == 503
        b.start()
        wait_until(lambda: ready(root)[0] == 200)
        with client(root) as c:
            assert c.responses.create(model=SMALL, input="hi", store=False).output_text == "Hi"


def test_start_up_with_one_replica_down_succeeds_and_takes_it_in_later() -> None:
    down = Replica(VLLMFake())  # not started: nothing listens on its port
    with replicas(VLLMFake()) as (up,), our_server((MODEL, f"vllm:{up.url}"), (MODEL, f"vllm:{down.url}")) as root:
        try:
            with client(root) as c:
                for _ in range(3):
                    assert c.responses.create(model=MODEL, input="hi", store=False).output_text == "Hi"
                assert len(up.ids) == 3
                status, body = ready(root)
                assert status == 200 and not body["models"][0]["engines"][1]["ready"]
                down.start()
                wait_until(lambda: ready(root)[1]["models"][0]["engines"][1]["ready"])
                for _ in range(4):
                    c.responses.create(model=MODEL, input="hi", store=False)
                assert len(down.ids) == 2
        finally:
            down.stop()


def test_start_up_fails_when_no_replica_answers() -> None:
    urls = [f"http://127.0.0.1:{_free_port()}" for _ in range(2)]
    done = subprocess.run(
        [
            str(BIN),
            "serve",
            "--port",
            "0",
            "--engine",
            f"{MODEL}=vllm:{urls[0]}",
            "--engine",
            f"{MODEL}=vllm:{urls[1]}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("HARMONY_RESPONSES_")},
    )
    assert done.returncode == 1
    assert f"no replica of {MODEL} answers" in done.stderr and urls[0] in done.stderr and urls[1] in done.stderr


def test_command_line_serves_bound_models_and_replicas(tmp_path: Path) -> None:
    small = write_script(tmp_path / "small.jsonl", ["<|channel|>final<|message|>small<|return|>"])
    with replicas(VLLMFake(), VLLMFake()) as (a, b):
        args = [
            "--engine",
            f"{MODEL}=vllm:{a.url}",
            "--engine",
            f"{MODEL}=vllm:{b.url}",
            "--engine",
            f"{SMALL}={small}",
        ]
        with server_process(args) as process, client(process.root) as c:
            assert [m.id for m in c.models.list()] == [MODEL, SMALL]  # no plain --engine: only the bound names
            for _ in range(2):
                assert c.responses.create(model=MODEL, input="hi", store=False).output_text == "Hi"
            assert c.responses.create(model=SMALL, input="hi", store=False).output_text == "small"
            assert (len(a.ids), len(b.ids)) == (1, 1)
            with pytest.raises(openai.NotFoundError) as missing:
                c.responses.create(model="gpt-oss-7b", input="hi", store=False)
            assert missing.value.code == "model_not_found"
            assert ready(process.root)[0] == 200


def test_two_models_on_two_engines_each_get_their_own_requests() -> None:
    big, small = VLLMFake(Scenario(tokens=answer("big"))), VLLMFake(Scenario(tokens=answer("small")))
    with replicas(big, small) as (a, b), our_server((MODEL, f"vllm:{a.url}"), (SMALL, f"vllm:{b.url}")) as root:
        with client(root) as c:
            assert [m.id for m in c.models.list()] == [MODEL, SMALL]
            assert c.models.retrieve(SMALL).id == SMALL
            for _ in range(2):
                assert c.responses.create(model=MODEL, input="hi", store=False).output_text == "big"
                assert c.responses.create(model=SMALL, input="hi", store=False).output_text == "small"
            assert len(a.ids) == 2 and len(b.ids) == 2
            with pytest.raises(openai.NotFoundError) as missing:
                c.responses.create(model="gpt-4o", input="hi", store=False)
            assert missing.value.code == "model_not_found"
            with pytest.raises(openai.NotFoundError):
                c.models.retrieve("gpt-4o")


class SmallContextFake(VLLMFake):
    """vLLM started with ``--max-model-len 4096``."""

    async def models(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        data = [{"id": self.model, "object": "model", "owned_by": "vllm", "max_model_len": 4096}]
        return JSONResponse({"object": "list", "data": data})


def test_each_model_runs_within_its_own_engines_context() -> None:
    with (
        replicas(VLLMFake(), SmallContextFake()) as (a, b),
        our_server((MODEL, f"vllm:{a.url}"), (SMALL, f"vllm:{b.url}")) as root,
        client(root) as c,
    ):
        c.responses.create(model=MODEL, input="hi", store=False)
        c.responses.create(model=SMALL, input="hi", store=False)
        (big_call,), (small_call,) = a.fake.requests, b.fake.requests
        assert big_call["max_tokens"] == 131_072 - len(big_call["prompt"])
        assert small_call["max_tokens"] == 4096 - len(small_call["prompt"])
        # input_tokens renders as create would for that model: truncation keeps what fits its engine's context.
        long = [{"role": "user", "content": f"message {i} " + "word " * 200} for i in range(40)]
        counts = {
            model: httpx.post(
                f"{root}/v1/responses/input_tokens",
                json={"model": model, "input": long, "truncation": "auto"},
                timeout=30,
            ).json()["input_tokens"]
            for model in (MODEL, SMALL)
        }
        assert counts[SMALL] <= 4096 < counts[MODEL]


class CountingFake(VLLMFake):
    """Counts the health checks it answers."""

    health_checks = 0

    def routes(self) -> list[Any]:
        from starlette.responses import Response
        from starlette.routing import Route

        async def health(request: Any) -> Response:
            self.health_checks += 1
            return Response(b"", 200)

        return [Route("/health", health), *(r for r in super().routes() if r.path != "/health")]  # type: ignore[attr-defined]


def test_a_burst_of_readiness_probes_reaches_the_engine_once_and_needs_no_key() -> None:
    with replicas(CountingFake()) as (a,), our_server((MODEL, f"vllm:{a.url}"), api_keys=("sk-test",)) as root:
        fake = a.fake
        assert isinstance(fake, CountingFake)
        before = fake.health_checks  # the start-up check

        async def burst() -> list[int]:
            async with httpx.AsyncClient(timeout=10) as http:
                replies = await asyncio.gather(*(http.get(f"{root}/ready") for _ in range(20)))
            return [r.status_code for r in replies]

        assert asyncio.run(burst()) == [200] * 20  # no bearer token needed
        assert fake.health_checks - before == 1
        assert httpx.get(f"{root}/v1/models").status_code == 401  # the API itself still needs the key


def test_processes_sharing_replicas_send_a_prompt_cache_key_to_the_same_one() -> None:
    # Two of our servers (as --workers runs them) in front of the same two replicas, sharing no state.
    with (
        replicas(VLLMFake(), VLLMFake()) as (a, b),
        our_server((MODEL, f"vllm:{a.url}"), (MODEL, f"vllm:{b.url}")) as first,
        our_server((MODEL, f"vllm:{a.url}"), (MODEL, f"vllm:{b.url}")) as second,
        client(first) as one,
        client(second) as two,
    ):
        keys = [f"session-{i}" for i in range(16)]

        def replica_of(c: OpenAI, key: str) -> str:
            reply = c.responses.create(model=MODEL, input="hi", prompt_cache_key=key, store=False)
            return "a" if reply.id in a.ids else "b"

        by_first = {key: replica_of(one, key) for key in keys}
        by_second = {key: replica_of(two, key) for key in reversed(keys)}  # another order: turns would differ
        assert by_first == by_second
        assert set(by_first.values()) == {"a", "b"}  # the keys are spread over both


def test_replicas_of_different_engines_share_the_load_and_the_smallest_context() -> None:
    fakes = (
        VLLMFake(Scenario(tokens=answer("vllm"))),
        SGLangFake(Scenario(tokens=answer("sglang")), context=8192),
        LlamaCppFake(Scenario(tokens=answer("llamacpp"))),
    )
    with replicas(*fakes) as (v, s, lc):
        bindings = ((MODEL, f"vllm:{v.url}"), (MODEL, f"sglang:{s.url}"), (MODEL, f"llamacpp:{lc.url}"))
        with our_server(*bindings) as root, client(root) as c:
            texts = [c.responses.create(model=MODEL, input="hi", store=False).output_text for _ in range(6)]
            assert sorted(texts) == ["llamacpp", "llamacpp", "sglang", "sglang", "vllm", "vllm"]
            # Prompts are fitted to the smallest context among the replicas, wherever they go.
            (first, *_) = v.fake.requests
            assert first["max_tokens"] == 8192 - len(first["prompt"])
            s.stop()
            texts = [c.responses.create(model=MODEL, input="hi", store=False).output_text for _ in range(4)]
            assert sorted(texts) == ["llamacpp", "llamacpp", "vllm", "vllm"]
            status, body = ready(root)
            engines = body["models"][0]["engines"]
            assert status == 200 and [e["ready"] for e in engines] == [True, False, True]
            assert s.url in engines[1]["engine"]


class HangingFake(VLLMFake):
    """Its health check stops answering when ``hang`` is set (an engine wedged, its port still open)."""

    hang = False

    def routes(self) -> list[Any]:
        from starlette.responses import Response
        from starlette.routing import Route

        async def health(request: Any) -> Response:
            while self.hang:
                await asyncio.sleep(0.05)
            return Response(b"", 200)

        return [Route("/health", health), *(r for r in super().routes() if r.path != "/health")]  # type: ignore[attr-defined]


def test_a_replica_that_stops_answering_probes_is_out_but_the_model_stays_ready() -> None:
    with (
        replicas(VLLMFake(), HangingFake()) as (a, b),
        our_server((MODEL, f"vllm:{a.url}"), (MODEL, f"vllm:{b.url}")) as root,
        client(root) as c,
    ):
        wedged = b.fake
        assert isinstance(wedged, HangingFake)
        wedged.hang = True
        status, body = ready(root)
        engines = body["models"][0]["engines"]
        assert status == 200 and [e["ready"] for e in engines] == [True, False]
        assert "did not answer the probe within 5 s" in engines[1]["error"]
        for _ in range(3):
            c.responses.create(model=MODEL, input="hi", store=False)
        assert (len(a.ids), len(b.ids)) == (3, 0)  # taken out by the probe
        wedged.hang = False
        wait_until(lambda: all(e["ready"] for e in ready(root)[1]["models"][0]["engines"]))
        for _ in range(2):
            c.responses.create(model=MODEL, input="hi", store=False)
        assert len(b.ids) == 1


def test_a_replica_down_at_its_call_is_counted_out_and_the_call_retried() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    def scrape(root: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = httpx.get(f"{root}/metrics", timeout=10).text
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    fine = Scenario(tokens=answer("fine"))
    outage = ("harmony_responses_engine_replica_outages_total", (("engine", "vllm"), ("reason", "unavailable")))
    retries = ("harmony_responses_engine_retries_total", (("engine", "vllm"),))
    with (
        replicas(VLLMFake(fine), VLLMFake(fine)) as (a, b),
        our_server((MODEL, f"vllm:{a.url}"), (MODEL, f"vllm:{b.url}")) as root,
    ):
        before = scrape(root)
        a.stop()  # gone before the first call, which goes to the first replica
        with client(root) as c:
            assert c.responses.create(model=MODEL, input="hi", store=False).output_text == "fine"
        after = scrape(root)
        assert len(b.ids) == 1
        assert after.get(outage, 0) - before.get(outage, 0) == 1
        assert after.get(retries, 0) - before.get(retries, 0) == 1
