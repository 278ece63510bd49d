"""The error tree: every httpx exception mapped, stop ids settled, start-up checks that say what is wrong."""

from __future__ import annotations

import asyncio
import inspect
import socket

import httpx
import pytest

from harmony_responses.api.errors import to_api_error
from harmony_responses.engine import (
    EngineError,
    EngineMismatch,
    EngineOptions,
    EngineProtocolError,
    EngineRefused,
    EngineTimeout,
    EngineUnavailable,
    GenerateRequest,
    engine_from_spec,
)
from harmony_responses.engine._http import HTTPX_ERRORS, map_errors, refused, settle_stop

from .fakes import FAKES, VLLMFake, harmony, run_fake

HTTPX_EXCEPTIONS = [
    cls for name in httpx.__all__ if inspect.isclass(cls := getattr(httpx, name)) and issubclass(cls, Exception)
]


def test_every_httpx_exception_is_mapped() -> None:
    assert HTTPX_EXCEPTIONS, "httpx exports no exceptions?"
    unmapped = [cls.__name__ for cls in HTTPX_EXCEPTIONS if cls not in HTTPX_ERRORS]
    assert unmapped == []


@pytest.mark.parametrize("cls", HTTPX_EXCEPTIONS, ids=lambda c: c.__name__)
def test_map_errors_raises_our_class_naming_the_engine(cls: type[Exception]) -> None:
    try:
        exc = cls("boom")
    except TypeError:  # HTTPStatusError and friends need more arguments
        exc = cls.__new__(cls)
        Exception.__init__(exc, "boom")
    with pytest.raises(EngineError) as info, map_errors("vllm at http://x:8000"):
        raise exc
    assert type(info.value) is HTTPX_ERRORS[cls][0]
    assert str(info.value).startswith("vllm at http://x:8000: ") and info.value.__cause__ is exc


@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        (httpx.ConnectError("refused"), EngineUnavailable),
        (httpx.ReadTimeout("slow"), EngineTimeout),
        (httpx.RemoteProtocolError("peer closed"), EngineProtocolError),
        (KeyError("choices"), EngineProtocolError),
        (ValueError("not json"), EngineProtocolError),
    ],
)
def test_map_errors_examples(exc: Exception, cls: type[EngineError]) -> None:
    with pytest.raises(cls), map_errors("e"):
        raise exc


def test_map_errors_lets_bugs_and_our_errors_through() -> None:
    with pytest.raises(RuntimeError), map_errors("e"):
        raise RuntimeError("a bug")
    original = EngineMismatch("x")
    with pytest.raises(EngineMismatch) as info, map_errors("e"):
        raise original
    assert info.value is original


def test_engine_errors_become_openai_errors() -> None:
    unavailable = to_api_error(EngineUnavailable("vllm at u: cannot connect"))
    assert (unavailable.status, unavailable.code, unavailable.type) == (503, "engine_unavailable", "server_error")
    too_long = to_api_error(refused("vllm", 400, b'{"object":"error","message":"maximum context length is 8"}'))
    assert (too_long.status, too_long.code, too_long.type) == (400, "context_length_exceeded", "invalid_request_error")
    other = refused("vllm", 400, b"<html>nope</html>")
    assert isinstance(other, EngineRefused) and other.status_hint == 503 and "HTTP 400: <html>nope</html>" in str(other)


# ------------------------------------------------------------------------------ stop ids

PROMPT = harmony("<|start|>user<|message|>Hi<|end|><|start|>assistant")


@pytest.mark.parametrize(
    ("generated", "prompt", "matched", "eos", "expected"),
    [
        ("<|channel|>final<|message|>Hi<|return|>", "", None, False, []),
        ("<|channel|>final<|message|>Hi", "", None, False, [200002]),
        ("<|channel|>final<|message|>Hi", "", 200012, False, [200012]),
        ("<|channel|>final<|message|>Hi", "", None, True, []),
        ("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}", "", None, False, [200012]),
        (
            "<|channel|>analysis<|message|>x<|end|><|start|>assistant to=python<|channel|>analysis<|message|>1",
            "",
            None,
            False,
            [200012],
        ),
        ("{}", "<|channel|>commentary to=functions.f <|constrain|>json<|message|>", None, False, [200012]),
        ("<|channel|>final", "", None, False, [200002]),
    ],
)
def test_settle_stop(generated: str, prompt: str, matched: int | None, eos: bool, expected: list[int]) -> None:
    request = GenerateRequest(prompt_ids=PROMPT + harmony(prompt))
    assert settle_stop(request, harmony(generated), matched, eos) == (expected, None)


def test_settle_stop_reports_a_stop_on_end() -> None:
    extra, problem = settle_stop(
        GenerateRequest(prompt_ids=PROMPT), harmony("<|channel|>analysis<|message|>x<|end|>"), None, False
    )
    assert extra == [] and problem is not None and "<|end|>" in problem


# ------------------------------------------------------------------------------ start-up checks


def _start(spec: str, **options: object) -> EngineError:
    async def main() -> EngineError:
        engine = engine_from_spec(spec, EngineOptions(**options))  # type: ignore[arg-type]
        try:
            await engine.start()
        except EngineError as exc:
            return exc
        finally:
            await engine.aclose()
        raise AssertionError("the start-up check passed")

    return asyncio.run(main())


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("kind", list(FAKES))
def test_start_unreachable_engine(kind: str) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    exc = _start(f"{kind}:{url}", connect_timeout=1.0)
    assert isinstance(exc, EngineUnavailable)
    assert str(exc).startswith(f"{kind} at {url}: cannot connect")


@pytest.mark.parametrize("kind", list(FAKES))
def test_start_engine_without_harmony_vocabulary(kind: str) -> None:
    with run_fake(FAKES[kind](detokenize_ok=False)) as fake:
        exc = _start(f"{kind}:{fake.url}")
    assert isinstance(exc, (EngineMismatch, EngineRefused))
    if kind != "trtllm":
        assert "not Harmony's" in str(exc) and "[200006][200008][200002]" in str(exc)


def test_start_wrong_model_name() -> None:
    with run_fake(VLLMFake()) as fake:
        exc = _start(f"vllm:{fake.url}", model="llama-3")
    assert isinstance(exc, EngineMismatch)
    assert str(exc) == f"vllm at {fake.url} serves 'openai/gpt-oss-20b', not 'llama-3' (--engine-model)"


def test_start_wait_retries_until_the_engine_is_up() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    exc = _start(f"vllm:{url}", connect_timeout=0.5, start_wait=1.5)
    assert isinstance(exc, EngineUnavailable)


def test_spec_forms() -> None:
    engine = engine_from_spec("vllm:http://gpu:9000/v1/")
    assert engine.describe().startswith("vllm: http://gpu:9000")
    assert engine_from_spec("sglang").describe().startswith("sglang: http://127.0.0.1:30000")
    assert engine_from_spec("llamacpp", EngineOptions(url="http://h:1")).describe().startswith("llamacpp: http://h:1")
    with pytest.raises(ValueError, match="names a URL and --engine-url names another"):
        engine_from_spec("trtllm:http://a:1", EngineOptions(url="http://b:2"))
    with pytest.raises(ValueError, match="not an http"):
        engine_from_spec("vllm:gpu:8000")
    with pytest.raises(ValueError, match="needs a checkpoint folder"):
        engine_from_spec("transformers")


# ------------------------------------------------------------------------------ the connection pool


class _StubConnection:
    def __init__(self, idle: bool = True) -> None:
        self.idle = idle

    def can_handle_request(self, origin: object) -> bool:
        return True

    def is_available(self) -> bool:
        return self.idle  # as httpcore's HTTP/1.1 connection: available until a request starts on it

    def is_idle(self) -> bool:
        return self.idle

    def is_closed(self) -> bool:
        return False

    def has_expired(self) -> bool:
        return False


def test_fair_pool_gives_each_queued_request_its_own_connection() -> None:
    import httpcore

    from harmony_responses.engine._http import fair_pool

    transport = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=4, max_keepalive_connections=4))
    assert fair_pool(transport)
    pool = transport._pool
    warm = [_StubConnection() for _ in range(2)]
    pool._connections = list(warm)  # type: ignore[attr-defined]
    made: list[_StubConnection] = []
    pool.create_connection = lambda origin: made.append(_StubConnection(idle=False)) or made[-1]  # type: ignore[method-assign]
    requests = [
        httpcore._async.connection_pool.AsyncPoolRequest(httpcore.Request("POST", "http://e/x")) for _ in range(5)
    ]
    pool._requests = list(requests)  # type: ignore[attr-defined]

    async def assign() -> None:  # httpcore's events need an event loop
        pool._assign_requests_to_connections()  # type: ignore[attr-defined]

    asyncio.run(assign())
    assigned = [r.connection for r in requests]
    # Two warm connections, two new ones up to max_connections; the fifth request waits for one.
    assert assigned[:2] == warm and assigned[2:4] == made and assigned[4] is None
    assert len({id(c) for c in assigned[:4]}) == 4
