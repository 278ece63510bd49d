"""Wire-faithful fakes of the engines' HTTP protocols (engines.md), served by uvicorn on 127.0.0.1.

Each fake answers the endpoints our adapter uses with the fields engines.md documents, and plays
``Scenario``s, one per generate request (the last one repeats), to script what the engine does:
the completion's ids, chunking, whether the stop id is returned, logprobs, HTTP errors before the
stream, an error object, garbage or a cut connection mid-stream, a stall. A fake stops on the stop ids
the request sends (llama.cpp: on its end-of-generation set) and at the request's budget, like the real
engine, and records what it received: request bodies, abort calls, and streams that ended because the
client went away.

Run one as ``with run_fake(VLLMFake(...)) as fake:``; ``fake.url`` is its base URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from harmony_responses.vocab import load_encoding, load_vocabulary

RETURN, CALL, END, EOT = 200002, 200012, 200007, 199999
CUDA = "CUDA error: an illegal memory access"


def harmony(text: str) -> list[int]:
    return load_encoding().encode(text, allowed_special="all")


def fake_lp(k: int, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
    """Deterministic logprobs of the k-th generated token: the token itself first, then neighbours."""
    lp = round(-0.05 * (k + 1), 6)
    return lp, [(token if j == 0 else (token + j) % 199998, round(lp - j, 6)) for j in range(max(top, 1))]


@dataclass
class Scenario:
    """What the fake does for one generate request."""

    tokens: list[int] = field(default_factory=list)
    chunk: int = 1
    include_stop: bool = True  # the matched stop id is returned among the ids
    status: int | None = None  # answer this HTTP status before any stream
    message: str = "bad request"
    error_after: int | None = None  # send an error object after this many tokens
    # The error object's message and code: vLLM and SGLang refuse a request admitted already (logprobs over
    # the engine's maximum, a prompt over its context) with code 400 inside the HTTP 200 stream.
    error_message: str = CUDA
    error_code: int = 500
    drop_after: int | None = None  # cut the connection after this many tokens
    garbage_after: int | None = None  # send a line that is not JSON after this many tokens
    stall_after: int | None = None  # go silent after this many tokens (until the client leaves)
    delay: float = 0.0  # seconds between chunks
    # Set by the test to let the first token go: until then the engine has admitted the request (its status
    # line and headers are sent) and is "prefilling".
    first_token_gate: threading.Event | None = None
    cached: int = 0
    eos: bool = False  # report the stop as the model's own EOS (vLLM: stop_reason null)
    stop_reason: bool = True  # TRT-LLM: send stop_reason at all


class Fake:
    """State and the generation loop common to the four fakes."""

    model = "openai/gpt-oss-20b"
    eog = (RETURN, CALL)  # llama.cpp only: what ends generation without stop ids

    def __init__(self, *scenarios: Scenario, detokenize_ok: bool = True) -> None:
        self.scenarios = list(scenarios) or [Scenario(tokens=harmony("<|channel|>final<|message|>Hi<|return|>"))]
        self.detokenize_ok = detokenize_ok
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # each generate request's HTTP headers (traceparent), vLLM's
        self.aborts: list[str] = []  # ids given to an abort endpoint
        self.disconnects: list[str] = []  # streams that ended because the client went away
        self.sent: dict[str, int] = {}  # tokens sent per request id
        self.url = ""
        self._served = 0

    def scenario(self) -> Scenario:
        scenario = self.scenarios[min(self._served, len(self.scenarios) - 1)]
        self._served += 1
        return scenario

    def detok(self, ids: list[int]) -> str:
        return load_encoding().decode(ids) if self.detokenize_ok else "".join(f"[{t}]" for t in ids)

    def plan(self, s: Scenario, stops: list[int], budget: int) -> tuple[list[int], str, int | None]:
        """The ids a real engine would generate: up to the first stop id, cut at the budget."""
        out: list[int] = []
        for token in s.tokens:
            if len(out) >= budget:
                return out, "length", None
            out.append(token)
            if token in stops:
                return out, "stop", token
        return out, ("length" if len(out) >= budget else "stop"), None

    async def play(
        self, request: Request, s: Scenario, rid: str, out: list[int], encode: Any, final: Any, done: bool = True
    ) -> AsyncIterator[bytes]:
        """SSE lines: ``encode(k, ids, last)`` per chunk, ``final()`` lines after, ``[DONE]``."""
        sent = 0
        finished = False
        try:
            chunks = [out[i : i + s.chunk] for i in range(0, len(out), s.chunk)] or [[]]
            for i, ids in enumerate(chunks):
                for trigger, what in (
                    (s.error_after, "error"),
                    (s.drop_after, "drop"),
                    (s.garbage_after, "garbage"),
                    (s.stall_after, "stall"),
                ):
                    if trigger is not None and sent >= trigger:
                        if what == "error":
                            error = {"message": s.error_message, "type": "BadRequestError", "code": s.error_code}
                            yield b"data: " + orjson.dumps({"error": error}) + b"\n\n"
                            finished = True
                            return
                        if what == "drop":
                            raise ConnectionResetError("fake: dropping the connection")
                        if what == "garbage":
                            yield b"data: <html>502 Bad Gateway</html>\n\n"
                            await asyncio.sleep(0.5)
                            finished = True
                            return
                        await asyncio.sleep(3600)
                if i == 0 and s.first_token_gate is not None:
                    yield b": prefilling\n\n"  # (an SSE comment) the answer's head goes out with it
                    while not s.first_token_gate.is_set():
                        await asyncio.sleep(0.01)
                if i and s.delay:
                    await asyncio.sleep(s.delay)
                last = i == len(chunks) - 1
                obj = encode(sent, ids, last)
                if obj is not None:  # None: a chunk the engine holds back (llama.cpp, mid-character)
                    yield b"data: " + orjson.dumps(obj) + b"\n\n"
                sent += len(ids)
                self.sent[rid] = sent
                await asyncio.sleep(0)  # a real engine's chunks are separate writes
            for obj in final():
                yield b"data: " + orjson.dumps(obj) + b"\n\n"
            if done:
                yield b"data: [DONE]\n\n"
            finished = True
        finally:
            if not finished:
                self.disconnects.append(rid)

    def error(self, s: Scenario) -> Response:
        return JSONResponse(
            {"object": "error", "message": s.message, "type": "BadRequestError", "param": None, "code": s.status},
            status_code=s.status or 400,
        )

    def routes(self) -> list[Route]:
        raise NotImplementedError

    def app(self) -> Starlette:
        return Starlette(routes=self.routes())


def _lp_maps(k: int, ids: list[int], top: int) -> dict[str, Any]:
    values, tops = [], []
    for j, token in enumerate(ids):
        lp, alts = fake_lp(k + j, token, top)
        values.append(lp)
        tops.append({f"token_id:{t}": v for t, v in alts})
    return {
        "tokens": [f"token_id:{t}" for t in ids],
        "token_logprobs": values,
        "top_logprobs": tops,
        "text_offset": [0] * len(ids),
    }


class VLLMFake(Fake):
    """vLLM 0.33 (as its real server answered, tests/real_engines/vllm): /v1/completions with token ids;
    with ``generate_endpoint`` (``--enable-scale-out``) also /inference/v1/generate and
    /inference/v1/abort_requests, with ``tokens_only`` (``--tokens-only``) the legacy /abort_requests
    too and a /detokenize that answers 400 (no tokenizer).

    What the real server does and this fake copies: errors are ``{"error": {message, type, param,
    code}}``; vLLM adds the generation config's ``<|endoftext|>`` to the stop ids; ``<|return|>`` is the
    tokenizer's eos, so stopping on it gives ``stop_reason: null`` (the id stays in ``token_ids``), any
    other stop id gives that id; generate chunks carry ``stop_reason`` too, name the request
    ``generate-tokens-<request_id>``, and give logprobs as integer ``token_id``s, the sampled token first.
    """

    eos_id = RETURN  # the tokenizer's eos (gpt-oss: <|return|>)

    def __init__(
        self, *scenarios: Scenario, generate_endpoint: bool = False, tokens_only: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*scenarios, **kwargs)
        self.generate_endpoint = generate_endpoint or tokens_only
        self.tokens_only = tokens_only

    def routes(self) -> list[Route]:
        routes = [
            Route("/health", lambda r: Response(b"", 200)),
            Route("/v1/models", self.models),
            Route("/detokenize", self.detokenize, methods=["POST"]),
            Route("/openapi.json", self.openapi),
            Route("/v1/completions", self.completions, methods=["POST"]),
        ]
        if self.generate_endpoint:
            routes += [
                Route("/inference/v1/generate", self.generate, methods=["POST"]),
                Route("/inference/v1/abort_requests", self.abort, methods=["POST"]),
            ]
        if self.tokens_only:
            routes.append(Route("/abort_requests", self.abort, methods=["POST"]))
        return routes

    def error(self, s: Scenario) -> Response:
        status = s.status or 400
        error = {"message": s.message, "type": "BadRequestError", "param": None, "code": status}
        return JSONResponse({"error": error}, status_code=status)

    def stop_reason(self, s: Scenario, matched: int | None) -> int | None:
        # A stripped stop id (include_stop=False: not what 0.33 does) is named, as versions that strip did.
        if s.eos or matched is None or (matched == self.eos_id and s.include_stop):
            return None
        return matched

    async def models(self, request: Request) -> Response:
        data = [{"id": self.model, "object": "model", "owned_by": "vllm", "max_model_len": 131072}]
        return JSONResponse({"object": "list", "data": data})

    async def detokenize(self, request: Request) -> Response:
        if self.tokens_only:
            return self.error(Scenario(status=400, message="Unable to get tokenizer because skip_tokenizer_init=True"))
        body = await request.json()
        return JSONResponse({"prompt": self.detok(body["tokens"])})

    async def openapi(self, request: Request) -> Response:
        paths = ["/v1/completions", "/health", "/detokenize"]
        if self.generate_endpoint:
            paths += ["/inference/v1/generate", "/inference/v1/abort_requests"]
        if self.tokens_only:
            paths.append("/abort_requests")
        return JSONResponse({"openapi": "3.1.0", "paths": {p: {} for p in paths}})

    async def abort(self, request: Request) -> Response:
        self.aborts.extend((await request.json())["request_ids"])
        return Response(status_code=200)

    async def completions(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        s = self.scenario()
        if s.status:
            return self.error(s)
        assert isinstance(body["prompt"], list) and body["stream"] and body["return_token_ids"]
        prompt, rid = body["prompt"], "cmpl-" + body.get("request_id", "x")
        out, finish, matched = self.plan(s, [*body["stop_token_ids"], EOT], body.get("max_tokens", 16))
        top = body.get("logprobs")

        def encode(k: int, ids: list[int], last: bool) -> dict[str, Any]:
            shown = ids[:-1] if last and matched is not None and not s.include_stop else ids
            choice: dict[str, Any] = {
                "index": 0,
                "text": load_encoding().decode([t for t in shown if t < 200000]),
                "logprobs": _lp_maps(k, shown, top) if top is not None else None,
                "finish_reason": finish if last else None,
                "stop_reason": self.stop_reason(s, matched) if last else None,
                "token_ids": shown,
            }
            if k == 0:
                choice["prompt_token_ids"] = prompt
            return {"id": rid, "object": "text_completion", "created": 0, "model": self.model, "choices": [choice]}

        def final() -> list[dict[str, Any]]:
            usage = {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(out),
                "total_tokens": len(prompt) + len(out),
                "prompt_tokens_details": {"cached_tokens": s.cached},
            }
            return [
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": 0,
                    "model": self.model,
                    "choices": [],
                    "usage": usage,
                }
            ]

        return StreamingResponse(self.play(request, s, rid, out, encode, final), media_type="text/event-stream")

    async def generate(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        s = self.scenario()
        if s.status:
            return self.error(s)
        sampling, rid = body["sampling_params"], "generate-tokens-" + body["request_id"]
        prompt = body["token_ids"]
        out, finish, matched = self.plan(s, [*sampling["stop_token_ids"], EOT], sampling["max_tokens"])
        top = sampling.get("logprobs")

        def encode(k: int, ids: list[int], last: bool) -> dict[str, Any]:
            shown = ids[:-1] if last and matched is not None and not s.include_stop else ids
            lp = None
            if top is not None:
                content = []
                for j, token in enumerate(shown):
                    value, alts = fake_lp(k + j, token, top)
                    content.append(
                        {
                            "token_id": token,
                            "logprob": value,
                            "rank": 1,
                            "top_logprobs": [
                                {"token_id": t, "logprob": v, "rank": r} for r, (t, v) in enumerate(alts, 1)
                            ],
                        }
                    )
                lp = {"content": content}
            choice = {
                "index": 0,
                "finish_reason": finish if last else None,
                "stop_reason": self.stop_reason(s, matched) if last else None,
                "token_ids": shown,
                "logprobs": lp,
            }
            return {"request_id": rid, "usage": None, "output_mode": "tokens", "choices": [choice]}

        def final() -> list[dict[str, Any]]:
            usage = {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(out),
                "total_tokens": len(prompt) + len(out),
                "prompt_tokens_details": {"cached_tokens": s.cached},
            }
            return [{"request_id": rid, "usage": usage, "output_mode": "tokens", "choices": []}]

        return StreamingResponse(self.play(request, s, rid, out, encode, final), media_type="text/event-stream")


class SGLangFake(Fake):
    """SGLang 0.5.23: native /generate with input_ids; cumulative output_ids unless ``incremental``.

    As the real server answered (tests/real_engines/sglang): ``/detokenize`` skips special tokens unless
    the body says ``skip_special_tokens: false`` (Harmony's come back as ""); ``/v1/models`` gives the
    context as ``max_model_len``; a prompt or ``max_new_tokens`` over it is refused inside a 200 stream
    (``{"error": {"message", "type", "code": 400, "retryable"}}`` then ``[DONE]``); the matched stop id
    stays in ``output_ids`` (``include_stop=False`` plays an engine that trims it); finish reasons are
    ``{"type": "stop", "matched"}``, ``{"type": "length", "length"}``, ``{"type": "abort", …}``; ``text``
    and the logprob arrays follow ``output_ids`` (cumulative or not).
    """

    def __init__(
        self,
        *scenarios: Scenario,
        incremental: bool = False,
        context: int = 131072,
        reports_context: bool = True,
        skip_tokenizer_init: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*scenarios, **kwargs)
        self.incremental = incremental
        self.context = context
        self.reports_context = reports_context  # False: /v1/models without max_model_len (the server cannot know)
        # --skip-tokenizer-init: no tokenizer, so /detokenize answers 400 and chunks carry no text.
        self.skip_tokenizer_init = skip_tokenizer_init
        self.detokenized: list[dict[str, Any]] = []  # /detokenize bodies

    def routes(self) -> list[Route]:
        return [
            Route("/health", lambda r: Response(b"", 200)),
            Route("/v1/models", self.models),
            Route("/detokenize", self.detokenize, methods=["POST"]),
            Route("/generate", self.generate, methods=["POST"]),
            Route("/abort_request", self.abort, methods=["POST"]),
            Route("/server_info", self.server_info),
        ]

    async def server_info(self, request: Request) -> Response:
        return JSONResponse({"model_path": self.model, "skip_tokenizer_init": self.skip_tokenizer_init})

    async def models(self, request: Request) -> Response:
        model = {"id": self.model, "object": "model", "owned_by": "sglang", "root": self.model, "parent": None}
        if self.reports_context:
            model["max_model_len"] = self.context
        return JSONResponse({"object": "list", "data": [model]})

    def text(self, ids: list[int], skip_special: bool) -> str:
        return self.detok([t for t in ids if t < 199998] if skip_special else ids)

    async def detokenize(self, request: Request) -> Response:
        body = await request.json()
        self.detokenized.append(body)
        if self.skip_tokenizer_init:
            message = (
                "Error decoding tokens: 'NoneType' object has no attribute 'decode'. "
                "Input tokens might be invalid for the model."
            )
            error = {"object": "error", "message": message, "type": "DecodeError", "param": None, "code": 400}
            return JSONResponse(error, status_code=400)
        return JSONResponse({"text": self.text(body["tokens"], body.get("skip_special_tokens", True) is not False)})

    async def abort(self, request: Request) -> Response:
        self.aborts.append((await request.json())["rid"])
        return Response(b"", 200)

    def refusal(self, prompt: int, budget: int) -> str | None:
        """SGLang's tokenizer manager's validation message for a request over the context, if it is."""
        if prompt >= self.context:
            return f"The input ({prompt} tokens) is longer than the model's context length ({self.context} tokens)."
        if prompt + budget > self.context:
            return (
                f"Requested token count exceeds the model's maximum context length of {self.context} tokens. "
                f"You requested a total of {prompt + budget} tokens: {prompt} tokens from the input messages and "
                f"{budget} tokens for the completion. Please reduce the number of tokens in the input messages "
                "or the completion to fit within the limit."
            )
        return None

    async def generate(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        s = self.scenario()
        if s.status:
            return JSONResponse({"error": {"message": s.message}}, status_code=s.status)
        sampling, rid = body["sampling_params"], body["rid"]
        refusal = self.refusal(len(body["input_ids"]), sampling.get("max_new_tokens", 128))
        if refusal is not None:
            error = {"message": refusal, "type": "invalid_request_error", "code": 400, "retryable": False}

            async def refuse() -> AsyncIterator[bytes]:
                yield b"data: " + orjson.dumps({"error": error}) + b"\n\n"
                yield b"data: [DONE]\n\n"

            return StreamingResponse(refuse(), media_type="text/event-stream")
        out, finish, matched = self.plan(s, sampling["stop_token_ids"], sampling["max_new_tokens"])
        top = body.get("top_logprobs_num") if body.get("return_logprob") else None
        skip_special = sampling.get("skip_special_tokens", True) is not False
        so_far: list[int] = []
        lps: list[list[Any]] = []
        tops: list[list[list[Any]]] = []

        def encode(k: int, ids: list[int], last: bool) -> dict[str, Any]:
            shown = ids[:-1] if last and matched is not None and not s.include_stop else ids
            so_far.extend(shown)
            new_lps, new_tops = [], []
            for j, token in enumerate(shown):
                value, alts = fake_lp(k + j, token, top or 0)
                new_lps.append([value, token, None])
                new_tops.append([[v, t, None] for t, v in alts])
            lps.extend(new_lps)
            tops.extend(new_tops)
            reason = None
            if last:
                reason = (
                    {"type": "stop", "matched": matched} if finish == "stop" else {"type": "length", "length": len(out)}
                )
            meta: dict[str, Any] = {
                "id": rid,
                "finish_reason": reason,
                "prompt_tokens": len(body["input_ids"]),
                "weight_version": "default",
                "reasoning_tokens": 0,
                "completion_tokens": len(so_far),
                "cached_tokens": s.cached,
                "cached_tokens_details": {"device": s.cached, "host": 0} if s.cached else None,
            }
            if top is not None:
                meta["output_token_logprobs"] = new_lps if self.incremental else list(lps)
                meta["output_top_logprobs"] = new_tops if self.incremental else list(tops)
            output = shown if self.incremental else list(so_far)
            if self.skip_tokenizer_init:
                return {"output_ids": output, "meta_info": meta}
            return {"text": self.text(output, skip_special), "output_ids": output, "meta_info": meta}

        return StreamingResponse(self.play(request, s, rid, out, encode, list), media_type="text/event-stream")


# The special tokens a gpt-oss GGUF's llama.cpp vocabulary renders as text (it marks them user-defined).
_SHOWN_SPECIALS = {200003: b"<|constrain|>", 200005: b"<|channel|>", 200006: b"<|start|>", 200008: b"<|message|>"}


def _ends_inside_character(text: bytes) -> bool:
    # llama-server's validate_utf8: a lead byte among the last four bytes that lacks its continuation.
    for i in range(1, min(4, len(text)) + 1):
        c = text[-i]
        if (c & 0xE0) == 0xC0 and i < 2 or (c & 0xF0) == 0xE0 and i < 3 or (c & 0xF8) == 0xF0 and i < 4:
            return True
    return False


class LlamaCppFake(Fake):
    """llama.cpp's llama-server (as the real one answered, tests/real_engines/llamacpp): /completion with a
    token prompt; stops on its EOG set; with ``router`` a ``--models-dir`` router.

    What the real server does and this fake copies: one id per chunk with its text in ``content`` and the
    running ``tokens_predicted``; a chunk whose text ends inside a UTF-8 character is never sent, the one
    completing the character carries all their text but only its own id; the EOG id is sent (text "");
    the last object (``stop: true``, ``tokens: []``) carries ``stop_type``, ``truncated``,
    ``tokens_cached`` and ``timings`` with ``cache_n``/``prompt_n``; no ``[DONE]`` line. Errors are
    ``{"error": {code, message, type}}``; a prompt over ``n_ctx`` is HTTP 400
    ``exceed_context_size_error``. ``/health`` answers 503 "Loading model" for ``loading`` seconds. A
    router's ``/props`` says ``role: "router"`` and its ``/detokenize`` and ``/props?model=`` need the model.
    """

    def __init__(
        self,
        *scenarios: Scenario,
        end_is_eog: bool = False,
        done_line: bool = False,
        router: bool = False,
        models: tuple[str, ...] = ("/models/gpt-oss-20b-mxfp4.gguf",),
        n_ctx: int = 131072,
        loading: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*scenarios, **kwargs)
        self.eog = (RETURN, CALL, END) if end_is_eog else (RETURN, CALL)
        self.done_line = done_line
        self.router = router
        self.models = models
        self.model = models[0]
        self.n_ctx = n_ctx
        self.ready_at = time.monotonic() + loading
        self.checks: list[tuple[str, Any]] = []  # start-up calls: (path, model named)

    def routes(self) -> list[Route]:
        return [
            Route("/health", self.health),
            Route("/props", self.props),
            Route("/v1/models", self.list_models),
            Route("/detokenize", self.detokenize, methods=["POST"]),
            Route("/completion", self.completion, methods=["POST"]),
        ]

    @staticmethod
    def _error(code: int, message: str, kind: str, **extra: Any) -> Response:
        return JSONResponse({"error": {"code": code, "message": message, "type": kind, **extra}}, status_code=code)

    async def health(self, request: Request) -> Response:
        if time.monotonic() < self.ready_at:
            return self._error(503, "Loading model", "unavailable_error")
        return JSONResponse({"status": "ok"})

    async def props(self, request: Request) -> Response:
        model = request.query_params.get("model")
        self.checks.append(("/props", model))
        if self.router and model is None:
            return JSONResponse({"role": "router", "default_generation_settings": {"params": None, "n_ctx": 0}})
        if self.router and model not in self.models:
            return self._error(400, "model not found", "invalid_request_error")
        return JSONResponse({"default_generation_settings": {"n_ctx": self.n_ctx}, "total_slots": 1})

    async def list_models(self, request: Request) -> Response:
        data = [{"id": m, "aliases": [], "object": "model", "owned_by": "llamacpp"} for m in self.models]
        return JSONResponse({"object": "list", "data": data})

    async def detokenize(self, request: Request) -> Response:
        body = await request.json()
        self.checks.append(("/detokenize", body.get("model")))
        if self.router and "model" not in body:
            return self._error(400, "model name is missing from the request", "invalid_request_error")
        return JSONResponse({"content": self.detok(body["tokens"])})

    async def completion(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        s = self.scenario()
        if s.status:
            return self._error(s.status, s.message, "invalid_request_error")
        assert isinstance(body["prompt"], list) and body["return_tokens"]
        prompt, rid = body["prompt"], f"slot-{len(self.requests)}"
        if len(prompt) >= self.n_ctx:
            return self._error(
                400,
                f"request ({len(prompt)} tokens) exceeds the available context size ({self.n_ctx} tokens), "
                "try increasing it",
                "exceed_context_size_error",
                n_prompt_tokens=len(prompt),
                n_ctx=self.n_ctx,
            )
        budget = body["n_predict"] if body["n_predict"] >= 0 else self.n_ctx
        out, finish, matched = self.plan(s, list(self.eog), min(budget, self.n_ctx - 1 - len(prompt)))
        top = body.get("n_probs")
        encoding = load_encoding()
        held: list[int] = []  # ids whose text ends inside a character: not sent

        table = load_vocabulary().token_bytes

        def text_of(ids: list[int]) -> bytes:
            # Special tokens llama.cpp marks user-defined (<|channel|>, <|message|>…) show as text, the rest as "".
            return b"".join(
                table[t] if t < 199998 else (_SHOWN_SPECIALS[t] if t in _SHOWN_SPECIALS else b"") for t in ids
            )

        def encode(k: int, ids: list[int], last: bool) -> dict[str, Any] | None:
            shown = ids[:-1] if last and matched is not None and not s.include_stop else ids
            if not shown:
                return None
            if _ends_inside_character(text_of(out[: k + len(ids)])):
                held.extend(shown)
                return None
            content = text_of(held + shown).decode(errors="replace")  # as llama.cpp's JSON does
            held.clear()
            obj: dict[str, Any] = {
                "index": 0,
                "content": content,
                "tokens": shown,
                "stop": False,
                "id_slot": -1,
                "tokens_predicted": k + len(ids),
                "tokens_evaluated": len(prompt),
            }
            if top:
                entries = []
                for j, token in enumerate(shown):
                    value, alts = fake_lp(k + j, token, top)
                    piece = content if j == len(shown) - 1 else ""
                    entries.append(
                        {
                            "id": token,
                            "token": piece,
                            "bytes": list(piece.encode()),
                            "logprob": value,
                            "top_logprobs": [{"id": t, "token": "", "bytes": [], "logprob": v} for t, v in alts],
                        }
                    )
                obj["completion_probabilities"] = entries
            return obj

        def final() -> list[dict[str, Any]]:
            truncated = finish == "length" and len(prompt) + len(out) + 1 >= self.n_ctx
            return [
                {
                    "index": 0,
                    "content": "",
                    "tokens": [],
                    "id_slot": 0,
                    "stop": True,
                    "model": self.model,
                    "tokens_predicted": len(out),
                    "tokens_evaluated": len(prompt),
                    "prompt": encoding.decode(prompt),
                    "has_new_line": False,
                    "truncated": truncated,
                    "stop_type": "eos" if finish == "stop" else "limit",
                    "stopping_word": "",
                    "tokens_cached": len(prompt) + len(out) - 1,
                    "timings": {
                        "cache_n": s.cached,
                        "prompt_n": len(prompt) - s.cached,
                        "predicted_n": len(out),
                    },
                }
            ]

        play = self.play(request, s, rid, out, encode, final, done=self.done_line)
        return StreamingResponse(play, media_type="text/event-stream")


class TRTLLMFake(Fake):
    """TensorRT-LLM's trtllm-serve: /v1/completions with token ids and ``detokenize: false``."""

    def routes(self) -> list[Route]:
        return [
            Route("/health", lambda r: Response(b"", 200)),
            Route("/v1/models", self.models),
            Route("/v1/completions", self.completions, methods=["POST"]),
        ]

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def completions(self, request: Request) -> Response:
        body = await request.json()
        assert isinstance(body["prompt"], list)
        prompt = body["prompt"]
        if not body.get("stream"):  # the start-up probe
            if any(t >= 201088 for t in prompt) or not self.detokenize_ok:
                return JSONResponse({"object": "error", "message": "token id out of range"}, status_code=400)
            choice = {"index": 0, "text": "", "token_ids": [12194], "finish_reason": "length", "stop_reason": None}
            return JSONResponse({"id": "cmpl-probe", "object": "text_completion", "choices": [choice]})
        self.requests.append(body)
        s = self.scenario()
        if s.status:
            return self.error(s)
        rid = f"cmpl-{len(self.requests)}"
        out, finish, matched = self.plan(s, body["stop_token_ids"], body["max_tokens"])
        top = body.get("logprobs")

        def encode(k: int, ids: list[int], last: bool) -> dict[str, Any]:
            shown = ids[:-1] if last and matched is not None and not s.include_stop else ids
            choice: dict[str, Any] = {
                "index": 0,
                "text": "",
                "token_ids": shown,
                "logprobs": _lp_maps(k, shown, top) if top is not None else None,
                "finish_reason": finish if last else None,
            }
            if s.stop_reason:
                choice["stop_reason"] = matched if last else None
            obj: dict[str, Any] = {"id": rid, "object": "text_completion", "model": self.model, "choices": [choice]}
            if k == 0:
                obj["prompt_token_ids"] = prompt
            return obj

        def final() -> list[dict[str, Any]]:
            usage = {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(out),
                "total_tokens": len(prompt) + len(out),
            }
            return [{"id": rid, "object": "text_completion", "model": self.model, "choices": [], "usage": usage}]

        return StreamingResponse(self.play(request, s, rid, out, encode, final), media_type="text/event-stream")


FAKES: dict[str, type[Fake]] = {"vllm": VLLMFake, "sglang": SGLangFake, "llamacpp": LlamaCppFake, "trtllm": TRTLLMFake}


def bound_socket(sndbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if sndbuf is not None:
        # Inherited by accepted connections: a small send buffer makes backpressure show early.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.contextmanager
def run_app(app: Any, sndbuf: int | None = None, http: Any = "auto") -> Iterator[str]:
    """Serve an ASGI app on 127.0.0.1 in a thread; yields its root URL. ``http``: the connection's protocol
    (uvicorn's own by default; the server's is ``api_http_protocol()``)."""
    sock = bound_socket(sndbuf)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, http=http, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive():
            raise AssertionError("uvicorn exited during startup (see the log above)")
        assert time.monotonic() < deadline, "uvicorn did not start in time"
        time.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextlib.contextmanager
def run_fake(fake: Fake) -> Iterator[Fake]:
    with run_app(fake.app()) as url:
        fake.url = url
        yield fake
