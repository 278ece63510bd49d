"""The replay engine: script files, played streams, endings, budgets, cancellation and concurrency."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

from harmony_responses.engine import GenerateRequest, ReplayEngine, engine_from_spec, load_script
from harmony_responses.tokens import EngineEnd, TokenChunk, TokenLogprob

PROMPT = [200006, 1428, 200008, 12194, 200007, 200006, 173781]  # <|start|>user<|message|>Hi<|end|><|start|>assistant
HI_FINAL = [200005, 17196, 200008, 12194, 200002]  # <|channel|>final<|message|>Hi<|return|>


def script(tmp_path: Path, *lines: object) -> Path:
    """A script file; dicts become JSON lines, strings are written as they are."""
    path = tmp_path / "script.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def request(**kwargs: object) -> GenerateRequest:
    return GenerateRequest(prompt_ids=PROMPT, **kwargs)  # type: ignore[arg-type]


async def drain(engine: ReplayEngine, req: GenerateRequest) -> tuple[list[TokenChunk], EngineEnd]:
    items = [item async for item in engine.generate(req)]
    *chunks, end = items
    assert all(isinstance(c, TokenChunk) for c in chunks)
    assert isinstance(end, EngineEnd)
    return chunks, end  # type: ignore[return-value]


def run(engine: ReplayEngine, req: GenerateRequest | None = None) -> tuple[list[list[int]], EngineEnd]:
    chunks, end = asyncio.run(drain(engine, req or request()))
    return [c.token_ids for c in chunks], end


def flat(chunks: list[list[int]]) -> list[int]:
    return [t for c in chunks for t in c]


# --- playing lines -----------------------------------------------------------------------------------


def test_ReplayEngine_harmony_line_is_encoded_with_special_tokens(tmp_path: Path) -> None:
    engine = ReplayEngine(script(tmp_path, {"harmony": "<|channel|>final<|message|>Hi<|return|>"}))
    chunks, end = run(engine)
    assert chunks == [[200005], [17196], [200008], [12194], [200002]]
    assert end == EngineEnd(reason="stop", message=None, prompt_tokens=len(PROMPT), cached_tokens=0)


def test_ReplayEngine_tokens_line_in_chunks(tmp_path: Path) -> None:
    engine = ReplayEngine(script(tmp_path, {"tokens": HI_FINAL, "chunk": 2}))
    chunks, end = run(engine)
    assert chunks == [[200005, 17196], [200008, 12194], [200002]]
    assert end.reason == "stop"


def test_ReplayEngine_plays_a_recorded_lines_ids_not_its_text(tmp_path: Path) -> None:
    # --record writes the decoded text beside the ids; edited or not, the ids are what plays.
    engine = ReplayEngine(script(tmp_path, {"text": "<|channel|>final<|message|>Bye<|return|>", "tokens": HI_FINAL}))
    assert flat(run(engine)[0]) == HI_FINAL


def test_ReplayEngine_chunk_larger_than_output(tmp_path: Path) -> None:
    engine = ReplayEngine(script(tmp_path, {"tokens": HI_FINAL, "chunk": 100}))
    assert run(engine)[0] == [HI_FINAL]


def test_ReplayEngine_wraps_round(tmp_path: Path) -> None:
    engine = ReplayEngine(script(tmp_path, {"tokens": [1, 200002]}, {"tokens": [2, 200002]}))
    firsts = [run(engine)[0][0][0] for _ in range(5)]
    assert firsts == [1, 2, 1, 2, 1]
    assert engine.served == 5


def test_ReplayEngine_counter_is_per_instance(tmp_path: Path) -> None:
    path = script(tmp_path, {"tokens": [1]}, {"tokens": [2]})
    a, b = ReplayEngine(path), ReplayEngine(path)
    assert run(a)[0] == [[1]]
    assert run(b)[0] == [[1]]
    assert run(a)[0] == [[2]]


def test_ReplayEngine_ignores_comments_and_empty_lines(tmp_path: Path) -> None:
    path = script(tmp_path, "// first call", "", "   # indented comment", {"tokens": [7]}, "", {"tokens": [8]})
    engine = ReplayEngine(path)
    assert [c.line for c in engine.calls] == [4, 6]
    assert run(engine)[0] == [[7]]
    assert run(engine)[0] == [[8]]


def test_ReplayEngine_line_separator_inside_json_string(tmp_path: Path) -> None:
    # U+2028 is a line break to str.splitlines() but an ordinary character inside JSON text.
    path = tmp_path / "s.jsonl"
    path.write_text('{"harmony": "<|channel|>final<|message|>a\u2028b<|return|>"}\n', encoding="utf-8")
    (call,) = load_script(path)
    assert call.tokens[-1] == 200002 and call.finish == "stop"


# --- endings -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "reason", "message"),
    [
        ({"tokens": HI_FINAL}, "stop", None),
        ({"harmony": "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"}, "stop", None),
        ({"harmony": "<|channel|>final<|message|>Hi"}, "length", None),
        ({"tokens": []}, "length", None),
        ({"tokens": [1, 2], "finish": "stop"}, "stop", None),
        ({"tokens": HI_FINAL, "finish": "length"}, "length", None),
        ({"tokens": [1, 2], "error": "GPU on fire"}, "error", "GPU on fire"),
        ({"error": "refused"}, "error", "refused"),
        ({"finish": "error"}, "error", None),
        ({"tokens": HI_FINAL, "error": "late", "finish": "stop"}, "stop", "late"),
        ({"tokens": HI_FINAL, "error": "after the end"}, "error", "after the end"),
    ],
)
def test_ReplayEngine_finish_reasons(tmp_path: Path, line: dict[str, object], reason: str, message: str | None) -> None:
    chunks, end = run(ReplayEngine(script(tmp_path, line)))
    assert (end.reason, end.message) == (reason, message)
    assert end.prompt_tokens == len(PROMPT) and end.cached_tokens == 0


def test_ReplayEngine_error_line_yields_its_tokens_first(tmp_path: Path) -> None:
    chunks, end = run(ReplayEngine(script(tmp_path, {"tokens": [200005, 35644, 200008, 12194], "error": "boom"})))
    assert chunks == [[200005], [35644], [200008], [12194]]
    assert end.reason == "error" and end.message == "boom"


def test_ReplayEngine_error_only_line_has_no_chunks(tmp_path: Path) -> None:
    chunks, end = run(ReplayEngine(script(tmp_path, {"error": "refused"})))
    assert chunks == []
    assert end == EngineEnd(reason="error", message="refused", prompt_tokens=len(PROMPT))


# --- budgets and stop ids ----------------------------------------------------------------------------


def test_ReplayEngine_max_tokens_cuts_with_length(tmp_path: Path) -> None:
    engine = ReplayEngine(script(tmp_path, {"tokens": HI_FINAL, "chunk": 2}))
    chunks, end = run(engine, request(max_tokens=3))
    assert chunks == [[200005, 17196], [200008]]
    assert end.reason == "length"


def test_ReplayEngine_max_tokens_equal_to_output_keeps_stop(tmp_path: Path) -> None:
    chunks, end = run(ReplayEngine(script(tmp_path, {"tokens": HI_FINAL})), request(max_tokens=5))
    assert flat(chunks) == HI_FINAL and end.reason == "stop"


def test_ReplayEngine_max_tokens_zero(tmp_path: Path) -> None:
    chunks, end = run(ReplayEngine(script(tmp_path, {"tokens": HI_FINAL})), request(max_tokens=0))
    assert chunks == [] and end.reason == "length"


def test_ReplayEngine_max_tokens_cut_drops_scripted_error(tmp_path: Path) -> None:
    # A real engine runs out of budget before reaching the failure scripted at the end.
    chunks, end = run(ReplayEngine(script(tmp_path, {"tokens": [1, 2, 3], "error": "boom"})), request(max_tokens=2))
    assert flat(chunks) == [1, 2]
    assert (end.reason, end.message) == ("length", None)


def test_ReplayEngine_stops_at_first_stop_token(tmp_path: Path) -> None:
    line = {"harmony": "<|channel|>final<|message|>Hi<|return|>Hi<|return|>", "finish": "length"}
    chunks, end = run(ReplayEngine(script(tmp_path, line)))
    assert flat(chunks) == HI_FINAL and end.reason == "stop"


def test_ReplayEngine_stop_ids_come_from_the_request(tmp_path: Path) -> None:
    line = {"tokens": [1, 200012, 2, 200002]}
    chunks, end = run(ReplayEngine(script(tmp_path, line)), request(stop_token_ids=(200002,)))
    assert flat(chunks) == [1, 200012, 2, 200002] and end.reason == "stop"
    chunks, end = run(ReplayEngine(script(tmp_path, line)), request(stop_token_ids=(200012,)))
    assert flat(chunks) == [1, 200012] and end.reason == "stop"


# --- logprobs ----------------------------------------------------------------------------------------


def test_ReplayEngine_fake_logprobs(tmp_path: Path) -> None:
    engine = ReplayEngine(script(tmp_path, {"tokens": [10, 20, 30], "chunk": 2, "logprobs": True}))
    chunks, _ = asyncio.run(drain(engine, request(top_logprobs=2)))
    assert [c.logprobs for c in chunks] == [
        [TokenLogprob(-0.1, ((10, -0.1), (11, -1.1))), TokenLogprob(-0.2, ((20, -0.2), (21, -1.2)))],
        [TokenLogprob(-0.3, ((30, -0.3), (31, -1.3)))],
    ]


def test_ReplayEngine_fake_logprobs_without_alternatives(tmp_path: Path) -> None:
    engine = ReplayEngine(script(tmp_path, {"tokens": [10, 20], "logprobs": True}))
    chunks, _ = asyncio.run(drain(engine, request(top_logprobs=0)))
    assert [c.logprobs for c in chunks] == [[TokenLogprob(-0.1)], [TokenLogprob(-0.2)]]


def test_ReplayEngine_fake_logprob_alternatives_are_ordinary_tokens(tmp_path: Path) -> None:
    engine = ReplayEngine(script(tmp_path, {"tokens": [200002], "logprobs": True}))
    chunks, _ = asyncio.run(drain(engine, request(top_logprobs=3)))
    assert chunks[0].logprobs == [TokenLogprob(-0.1, ((200002, -0.1), (5, -1.1), (6, -2.1)))]


def test_ReplayEngine_logprobs_only_when_asked_and_scripted(tmp_path: Path) -> None:
    path = script(tmp_path, {"tokens": [10], "logprobs": True}, {"tokens": [10]})
    engine = ReplayEngine(path)
    not_asked, _ = asyncio.run(drain(engine, request()))
    not_scripted, _ = asyncio.run(drain(engine, request(top_logprobs=5)))
    assert not_asked[0].logprobs is None and not_scripted[0].logprobs is None


# --- validation --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("{not json", "not valid JSON (Expecting property name enclosed in double quotes at column 2)"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('"text"', "expected a JSON object, got str"),
        (
            {"tokens": [1], "delay": 5},
            "unknown field 'delay'; valid fields: "
            '"harmony", "tokens", "chunk", "chunks", "delay_ms", "finish", "error", "logprobs", '
            '"token_logprobs", "prompt_tokens", "cached_tokens", "refused", "text"',
        ),
        # A recording's text beside its ids is never played: alone it would be mistaken for the output.
        (
            {"text": "<|channel|>final<|message|>Hi<|return|>"},
            '"text" is a string a recording writes beside "tokens" and is never played; script text as "harmony"',
        ),
        (
            {"harmony": "Hi", "text": "Hi"},
            '"text" is a string a recording writes beside "tokens" and is never played; script text as "harmony"',
        ),
        ({}, 'needs "harmony" (text) or "tokens" (ids); only a line that ends in an error may omit both'),
        ({"harmony": "a", "tokens": [1]}, 'give either "harmony" or "tokens", not both'),
        ({"harmony": 5}, '"harmony" must be a string of Harmony text'),
        ({"tokens": "1 2"}, '"tokens" must be a list of token ids'),
        ({"tokens": [1, -1]}, '"tokens"[1] is -1, not a token id (0..201087)'),
        ({"tokens": [201088]}, '"tokens"[0] is 201088, not a token id (0..201087)'),
        ({"tokens": [1.5]}, '"tokens"[0] is 1.5, not a token id (0..201087)'),
        ({"tokens": [True]}, '"tokens"[0] is True, not a token id (0..201087)'),
        ({"tokens": [1], "chunk": 0}, '"chunk" must be a whole number of tokens >= 1, got 0'),
        ({"tokens": [1], "chunk": 2.0}, '"chunk" must be a whole number of tokens >= 1, got 2.0'),
        ({"tokens": [1], "delay_ms": -1}, '"delay_ms" must be a number of milliseconds >= 0, got -1'),
        ({"tokens": [1], "delay_ms": "5"}, "\"delay_ms\" must be a number of milliseconds >= 0, got '5'"),
        ('{"tokens": [1], "delay_ms": NaN}', '"delay_ms" must be a number of milliseconds >= 0, got nan'),
        ({"tokens": [1], "finish": "abort"}, '"finish" must be one of "stop", "length", "error", got \'abort\''),
        ({"tokens": [1], "error": 500}, '"error" must be a string (the error message)'),
        ({"tokens": [1], "logprobs": 1}, '"logprobs" must be true or false, got 1'),
    ],
)
def test_load_script_rejects_bad_lines(tmp_path: Path, line: object, what: str) -> None:
    path = script(tmp_path, "// a good line, then a bad one", {"tokens": [1]}, line)
    with pytest.raises(ValueError) as info:
        ReplayEngine(path)
    assert str(info.value) == f"replay script {path}, line 3: {what}"


def test_load_script_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.jsonl"
    with pytest.raises(ValueError, match=r"replay script .*nope\.jsonl: cannot read it \(No such file or directory\)"):
        ReplayEngine(path)


def test_load_script_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"harmony": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"latin1\.jsonl: not UTF-8 text \(invalid continuation byte at byte 16\)"):
        ReplayEngine(path)


def test_load_script_without_calls(tmp_path: Path) -> None:
    path = script(tmp_path, "// only a comment", "")
    with pytest.raises(ValueError) as info:
        ReplayEngine(path)
    assert str(info.value) == f"replay script {path} has no engine calls (every line is empty or a comment)"


def test_load_script_reads_crlf_and_bom(tmp_path: Path) -> None:
    path = tmp_path / "windows.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"tokens": [1]}\r\n{"tokens": [2], "delay_ms": 1.5}\r\n')
    calls = load_script(path)
    assert [(c.line, c.tokens, c.delay) for c in calls] == [(1, (1,), 0.0), (2, (2,), 0.0015)]


def test_engine_from_spec_replay(tmp_path: Path) -> None:
    path = script(tmp_path, {"tokens": HI_FINAL})
    engine = engine_from_spec(f"replay:{path}")
    assert isinstance(engine, ReplayEngine) and engine.path == path
    assert engine.describe() == f"replay: 1 scripted engine call from {path}, served in order"


def test_engine_from_spec_replay_reports_bad_script(tmp_path: Path) -> None:
    path = script(tmp_path, {"tokens": "x"})
    with pytest.raises(ValueError, match=r", line 1: \"tokens\" must be a list of token ids"):
        engine_from_spec(f"replay:{path}")


# --- cancellation ------------------------------------------------------------------------------------


def test_ReplayEngine_aclose_mid_stream_is_prompt(tmp_path: Path) -> None:
    engine = ReplayEngine(script(tmp_path, {"tokens": [1, 2, 3], "delay_ms": 10_000}))

    async def main() -> float:
        stream = engine.generate(request())
        first = await anext(stream)
        assert first == TokenChunk(token_ids=[1])
        started = time.monotonic()
        await stream.aclose()
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
        return time.monotonic() - started

    assert asyncio.run(main()) < 5  # not the 10 s delay (a loaded machine may take a while, not that)


def test_ReplayEngine_task_cancel_during_delay_is_prompt(tmp_path: Path) -> None:
    engine = ReplayEngine(script(tmp_path, {"tokens": [1, 2, 3], "delay_ms": 10_000}))

    async def main() -> tuple[list[object], float]:
        received: list[object] = []
        got_first = asyncio.Event()

        async def consume() -> None:
            async for item in engine.generate(request()):
                received.append(item)
                got_first.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(got_first.wait(), 1)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return received, time.monotonic() - started

    received, elapsed = asyncio.run(main())
    assert received == [TokenChunk(token_ids=[1])]
    assert elapsed < 5  # not the 10 s delay


def test_ReplayEngine_delay_between_chunks(tmp_path: Path) -> None:
    engine = ReplayEngine(script(tmp_path, {"tokens": [1, 2, 3], "chunk": 1, "delay_ms": 40}))

    async def main() -> list[float]:
        started = time.monotonic()
        return [time.monotonic() - started async for _ in engine.generate(request())]

    at = asyncio.run(main())
    assert at[0] < 0.03  # the first chunk is not delayed
    assert 0.07 <= at[2] < 1  # two delays before the third
    assert at[3] - at[2] < 0.03  # nor is the end


# --- concurrency -------------------------------------------------------------------------------------


def test_ReplayEngine_concurrent_calls_take_successive_lines(tmp_path: Path) -> None:
    engine = ReplayEngine(script(tmp_path, *({"tokens": [n, n], "delay_ms": 5} for n in range(6))))

    async def main() -> list[list[int]]:
        results = await asyncio.gather(*(drain(engine, request()) for _ in range(6)))
        return [[t for c in chunks for t in c.token_ids] for chunks, _ in results]

    assert asyncio.run(main()) == [[n, n] for n in range(6)]


def test_ReplayEngine_counter_is_thread_safe(tmp_path: Path) -> None:
    engine = ReplayEngine(script(tmp_path, *({"tokens": [n]} for n in range(4))))
    seen: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        async def calls() -> list[int]:
            return [(await drain(engine, request()))[0][0].token_ids[0] for _ in range(25)]

        got = asyncio.run(calls())
        with lock:
            seen.extend(got)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == sorted(list(range(4)) * 50)
    assert engine.served == 200
