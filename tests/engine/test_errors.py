"""The error tree: every aiohttp exception mapped, stop ids settled, start-up checks that say what is wrong."""

from __future__ import annotations

import asyncio
import inspect
import socket
import ssl

import aiohttp
import aiohttp.client_exceptions
import aiohttp.http_exceptions
import pytest
from aiohttp.client_reqrep import ConnectionKey
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

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
from harmony_responses.engine._http import CLIENT_ERRORS, map_errors, refused, settle_stop
from harmony_responses.http.errors import to_api_error

from .fakes import FAKES, VLLMFake, harmony, run_fake


def _exported(module: object) -> set[type[Exception]]:
    names = getattr(module, "__all__", ())
    # Warnings (multipart's BadContentDisposition*) are Exception subclasses that aiohttp warns, never raises.
    return {
        cls
        for name in names
        if inspect.isclass(cls := getattr(module, name)) and issubclass(cls, Exception) and not issubclass(cls, Warning)
    }


AIOHTTP_EXCEPTIONS = sorted(
    _exported(aiohttp) | _exported(aiohttp.client_exceptions) | _exported(aiohttp.http_exceptions),
    key=lambda c: c.__name__,
)

KEY = ConnectionKey("x", 8000, False, True, None, None, None)
INFO = aiohttp.RequestInfo(URL("http://x:8000/v1/completions"), "POST", CIMultiDictProxy(CIMultiDict()))
# Arguments for the exceptions that take more than a message, found along the MRO.
ARGS: dict[type[Exception], tuple[object, ...]] = {
    aiohttp.ClientConnectorCertificateError: (KEY, ssl.SSLCertVerificationError("boom")),
    aiohttp.ClientConnectorError: (KEY, ConnectionRefusedError(111, "boom")),
    aiohttp.ClientResponseError: (INFO, ()),
    aiohttp.ServerFingerprintMismatch: (b"a", b"b", "x", 8000),
    aiohttp.InvalidURL: ("nope://x",),
    aiohttp.WebSocketError: (1002, "boom"),
    aiohttp.http_exceptions.LineTooLong: (b"boom", 10),
    aiohttp.http_exceptions.HttpProcessingError: (),
}


def _instance(cls: type[Exception]) -> Exception:
    args = next((ARGS[c] for c in cls.__mro__ if c in ARGS), ("boom",))
    return cls(*args)


def test_every_aiohttp_exception_is_mapped() -> None:
    assert len(AIOHTTP_EXCEPTIONS) > 20, "aiohttp exports no exceptions?"
    unmapped = [cls.__name__ for cls in AIOHTTP_EXCEPTIONS if cls not in CLIENT_ERRORS]
    assert unmapped == []
    # Most specific first, as the lookup along the MRO picks them.
    order = list(CLIENT_ERRORS)
    late = [(b.__name__, a.__name__) for i, a in enumerate(order) for b in order[i + 1 :] if issubclass(b, a)]
    assert late == []


@pytest.mark.parametrize("cls", AIOHTTP_EXCEPTIONS, ids=lambda c: c.__name__)
def test_map_errors_raises_our_class_naming_the_engine(cls: type[Exception]) -> None:
    exc = _instance(cls)
    with pytest.raises(EngineError) as info, map_errors("vllm at http://x:8000"):
        raise exc
    assert type(info.value) is CLIENT_ERRORS[cls][0]
    assert str(info.value).startswith("vllm at http://x:8000: ") and info.value.__cause__ is exc


@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        (_instance(aiohttp.ClientConnectorError), EngineUnavailable),
        (aiohttp.ConnectionTimeoutError("pool"), EngineUnavailable),
        (aiohttp.SocketTimeoutError("slow"), EngineTimeout),
        (TimeoutError(), EngineTimeout),
        (aiohttp.ClientPayloadError("cut"), EngineProtocolError),
        (aiohttp.ServerDisconnectedError(), EngineProtocolError),
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


def test_an_output_budget_over_the_engines_context_is_said_so() -> None:
    # vLLM 0.33's words when max_tokens > max_model_len: not a prompt that is too long.
    body = (
        b'{"error":{"message":"max_tokens=130999 cannot be greater than max_model_len=4096. Please request fewer '
        b'output tokens. (parameter=max_tokens, value=130999)","type":"BadRequestError","param":"max_tokens",'
        b'"code":400}}'
    )
    error = to_api_error(refused("vllm at u", 400, body))
    assert (error.status, error.code) == (400, "invalid_request_error")
    assert "the output budget (130999 tokens) is larger than the engine's context (4096 tokens)" in error.message
    assert "--context-window 4096" in error.message


def test_error_objects_in_a_stream_map_by_their_code() -> None:
    logprobs = {
        "error": {"message": "Requested sample logprobs of 8, which is greater than max allowed: 5", "code": 400}
    }
    assert (refused("e", None, logprobs).status_hint, refused("e", None, logprobs).code_hint) == (
        400,
        "invalid_request_error",
    )
    context = {"error": {"message": "The input (9000 tokens) is longer than the model's context length", "code": 400}}
    assert refused("e", None, context).code_hint == "context_length_exceeded"
    crash = {"error": {"message": "CUDA error", "code": 500}}
    assert refused("e", None, crash).status_hint == 503
    assert refused("e", None, {"object": "error", "message": "no code at all"}).status_hint == 503


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
        # <|endoftext|>: the model's own end (vLLM adds it to the stop ids), whatever the engine says matched.
        ("<|channel|>final<|message|>Hi<|endoftext|>", "", None, False, []),
        ("<|channel|>final<|message|>Hi<|endoftext|>", "", 199999, False, []),
        ("<|channel|>final<|message|>Hi", "", 199999, False, []),
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


def test_vllm_generate_chunks_with_and_without_stop_reason() -> None:
    # vLLM 0.33's generate chunks carry stop_reason (null: the tokenizer's eos, <|return|> for gpt-oss, kept
    # in token_ids); a chunk without the field (older versions) leaves the stop id to be inferred.
    from harmony_responses.engine._vllm import _GenerateReader

    request = GenerateRequest(prompt_ids=PROMPT)
    said = _GenerateReader(request, "vllm")
    said.feed({"choices": [{"index": 0, "token_ids": [12194], "finish_reason": "stop", "stop_reason": None}]})
    assert (said.finish, said.eos, said.matched) == ("stop", True, None)
    silent = _GenerateReader(request, "vllm")
    silent.feed({"choices": [{"index": 0, "token_ids": [12194], "finish_reason": "stop"}]})
    assert (silent.finish, silent.eos, silent.matched) == ("stop", False, None)
