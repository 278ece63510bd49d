"""Per-key quotas through the openai SDK on a live server: 429s in the API's shape, OpenAI's rate-limit headers
on every answer, the SDK's own retries ending in success, concurrency slots, tokens taken as produced,
service tiers (the tier used is echoed; a key restricted to tiers gets 403), WebSocket turns, the metric."""

from __future__ import annotations

import argparse
import json
import secrets
import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from websockets.sync.client import connect

from harmony_responses.quotas import KeyLimits
from harmony_responses.serve.cli import add_serve_arguments, config_from_args, serve

from .conftest import Serve
from .helpers import ANSWER, MODEL, openai_client, post, sse_events

SLOW = {"harmony": "<|channel|>final<|message|>" + "word " * 400 + "<|return|>", "delay_ms": 20}


def _key(**limits: Any) -> KeyLimits:
    # A key of its own per test: the counters file is shared by every server of the test session.
    return KeyLimits(key=f"sk-{secrets.token_hex(8)}", name=f"k{secrets.token_hex(3)}", **limits)


def _auth(key: KeyLimits) -> dict[str, str]:
    return {"Authorization": f"Bearer {key.key}"}


def test_a_burst_past_rpm_gets_429s_and_the_sdk_backs_off_to_success(serve: Serve) -> None:
    key = _key(requests_per_minute=20)
    live = serve([ANSWER] * 40, keys=(key,))
    client = openai_client(live, api_key=key.key)
    remaining = []
    for _ in range(20):
        raw = client.responses.with_raw_response.create(model=MODEL, input="hi")
        assert raw.parse().output_text == "Hello there!"
        assert raw.headers["x-ratelimit-limit-requests"] == "20"
        assert raw.headers["x-ratelimit-reset-requests"].endswith("s")
        remaining.append(int(raw.headers["x-ratelimit-remaining-requests"]))
    # One taken per request (the bucket refills one per 3 s meanwhile: at most one or two back).
    assert remaining[0] == 19 and remaining == sorted(remaining, reverse=True) and remaining[-1] <= 2
    refused = None
    for _ in range(5):  # the bucket is (about) empty: the next ones are refused
        try:
            client.responses.create(model=MODEL, input="hi")
        except openai.RateLimitError as exc:
            refused = exc
            break
    assert refused is not None
    assert refused.status_code == 429
    assert refused.body["type"] == "requests" and refused.body["code"] == "rate_limit_exceeded"  # type: ignore[index]
    assert "requests per min (RPM)" in refused.message and "Limit 20" in refused.message
    headers = refused.response.headers
    assert 0 < int(headers["retry-after-ms"]) <= 3000 and 1 <= int(headers["retry-after"]) <= 3
    assert headers["x-ratelimit-remaining-requests"] == "0"

    # The SDK's own retry logic (retry-after-ms) waits and succeeds: count the attempts it makes.
    attempts: list[int] = []
    http = httpx.Client(event_hooks={"response": [lambda r: attempts.append(r.status_code)]})
    retrying = openai.OpenAI(base_url=live.base_url, api_key=key.key, max_retries=3, http_client=http)
    try:
        assert retrying.responses.create(model=MODEL, input="hi").output_text == "Hello there!"
    finally:
        retrying.close()
    assert attempts[0] == 429 and attempts[-1] == 200, attempts

    metrics = httpx.get(f"{live.root}/metrics", headers=_auth(key)).text
    line = f'harmony_responses_quota_rejections_total{{key="{key.name}",limit="requests_per_minute"}}'
    assert any(m.startswith(line) and float(m.split()[-1]) >= 2 for m in metrics.splitlines()), metrics


def test_every_answer_carries_the_headers_and_unlimited_keys_none(serve: Serve) -> None:
    key = _key(requests_per_minute=100, tokens_per_minute=10_000)
    live = serve([ANSWER], keys=(key,), api_keys=("sk-plain",))
    for response in (
        httpx.get(f"{live.base_url}/models", headers=_auth(key)),
        httpx.get(f"{live.base_url}/responses/resp_missing", headers=_auth(key)),  # a 404 too
        post(live, {"model": MODEL, "input": "hi", "service_tier": "bogus"}, headers=_auth(key)),  # a 400
    ):
        assert response.headers["x-ratelimit-limit-requests"] == "100"
        assert response.headers["x-ratelimit-limit-tokens"] == "10000"
        assert int(response.headers["x-ratelimit-remaining-tokens"]) == 10_000
    assert response.status_code == 400 and response.json()["error"]["param"] == "service_tier"
    plain = httpx.get(f"{live.base_url}/models", headers={"Authorization": "Bearer sk-plain"})
    assert plain.status_code == 200 and not any(h.startswith("x-ratelimit") for h in plain.headers)
    wrong = httpx.get(f"{live.base_url}/models", headers={"Authorization": "Bearer sk-wrong"})
    assert wrong.status_code == 401


def test_tokens_are_taken_as_they_are_produced_and_then_refuse(serve: Serve) -> None:
    key = _key(tokens_per_minute=300)
    live = serve([SLOW, ANSWER], keys=(key,))
    done = threading.Event()
    result: dict[str, Any] = {}

    def stream() -> None:
        with httpx.stream(
            "POST",
            f"{live.base_url}/responses",
            json={"model": MODEL, "input": "hi", "stream": True},
            headers=_auth(key),
            timeout=60,
        ) as response:
            result["headers"] = response.headers
            result["body"] = response.read()
        done.set()

    threading.Thread(target=stream, daemon=True).start()
    # While the 400-word answer streams, the key's tokens go down: they are taken as produced, not at the end.
    seen = 300
    while not done.is_set():
        seen = int(httpx.get(f"{live.base_url}/models", headers=_auth(key)).headers["x-ratelimit-remaining-tokens"])
        if seen < 300 - 64:  # more than a chunk's worth taken, mid-stream
            break
    assert not done.is_set() and seen < 300 - 64
    assert done.wait(60)
    usage = sse_events(result["body"])[-1]["response"]["usage"]
    assert usage["input_tokens"] + usage["output_tokens"] > 300  # it overdrew the minute by its own size
    # Settled to its usage: nothing left (once this process has taken what it holds, TAKE_EVERY at most), so
    # the next response is refused on tokens.
    while httpx.get(f"{live.base_url}/models", headers=_auth(key)).headers["x-ratelimit-remaining-tokens"] != "0":
        pass
    refused = post(live, {"model": MODEL, "input": "hi"}, headers=_auth(key))
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["type"] == "tokens"
    assert refused.headers["x-ratelimit-remaining-tokens"] == "0"
    assert 0 < int(refused.headers["retry-after-ms"])


def test_max_concurrent_holds_a_slot_per_running_response(serve: Serve) -> None:
    key = _key(max_concurrent=1)
    live = serve([SLOW, ANSWER, ANSWER], keys=(key,))
    with httpx.stream(
        "POST",
        f"{live.base_url}/responses",
        json={"model": MODEL, "input": "a", "stream": True},
        headers=_auth(key),
        timeout=60,
    ) as running:
        chunks = running.iter_bytes()  # kept: a generator dropped closes the stream (a disconnect)
        next(chunks)  # it has started: its slot is held
        refused = post(live, {"model": MODEL, "input": "b"}, headers=_auth(key))
        assert refused.status_code == 429
        assert "concurrent responses: Limit 1" in refused.json()["error"]["message"]
        assert refused.headers["retry-after"] == "1"
        assert b"response.completed" in b"".join(chunks)
    assert post(live, {"model": MODEL, "input": "c"}, headers=_auth(key)).status_code == 200


def test_a_background_response_holds_its_background_slot_until_it_ends(serve: Serve) -> None:
    key = _key(max_concurrent_background=1)
    live = serve([SLOW, ANSWER, ANSWER], keys=(key,))
    client = openai_client(live, api_key=key.key)
    first = client.responses.create(model=MODEL, input="a", background=True)
    with pytest.raises(openai.RateLimitError) as refused:
        client.responses.create(model=MODEL, input="b", background=True)
    assert "concurrent background responses: Limit 1" in refused.value.message
    assert client.responses.create(model=MODEL, input="c").output_text == "Hello there!"  # not in the background
    client.responses.cancel(first.id)
    while client.responses.retrieve(first.id).status not in ("cancelled", "completed", "failed"):
        pass  # retrieve waits on the store each time: no sleep needed
    for _ in range(200):  # the slot is freed when the run's task ends, just after its terminal event
        try:
            client.responses.create(model=MODEL, input="d", background=True)
            break
        except openai.RateLimitError:
            continue
    else:
        raise AssertionError("the background slot was never freed")


def test_service_tier_is_echoed_as_the_tier_used(serve: Serve) -> None:
    flex_only = _key(service_tiers=["flex"])
    live = serve([ANSWER] * 6, keys=(flex_only,), api_keys=("sk-plain",))
    plain = openai_client(live, api_key="sk-plain")
    assert plain.responses.create(model=MODEL, input="hi").service_tier == "default"
    assert plain.responses.create(model=MODEL, input="hi", service_tier="priority").service_tier == "priority"
    assert plain.responses.create(model=MODEL, input="hi", service_tier="fast").service_tier == "priority"
    limited = openai_client(live, api_key=flex_only.key)
    assert limited.responses.create(model=MODEL, input="hi", service_tier="auto").service_tier == "flex"
    with pytest.raises(openai.PermissionDeniedError) as refused:
        limited.responses.create(model=MODEL, input="hi", service_tier="priority")
    assert refused.value.body["param"] == "service_tier"  # type: ignore[index]
    assert refused.value.body["code"] == "service_tier_not_allowed"  # type: ignore[index]


def test_a_websocket_turn_counts_like_its_http_twin(serve: Serve) -> None:
    key = _key(requests_per_minute=2)
    live = serve([ANSWER] * 4, keys=(key,))
    url = live.base_url.replace("http://", "ws://") + "/responses"
    with connect(url, additional_headers=_auth(key)) as socket:
        kinds = []
        for _ in range(3):
            socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hi"}))
            while True:
                event = json.loads(socket.recv())
                if event["type"] in ("response.completed", "error"):
                    kinds.append(event)
                    break
    assert [e["type"] for e in kinds] == ["response.completed", "response.completed", "error"]
    assert kinds[2]["status"] == 429 and kinds[2]["error"]["code"] == "rate_limit_exceeded"
    # ...and its HTTP twin is refused too: the same bucket.
    assert post(live, {"model": MODEL, "input": "hi"}, headers=_auth(key)).status_code == 429


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[keys]]\nrequests_per_minute = 5", "give exactly one of 'key' and 'key_env'"),
        ('[[keys]]\nkey_env = "QUOTA_UNSET_VARIABLE"', "'QUOTA_UNSET_VARIABLE' (key_env) is not set"),
        ('[[keys]]\nkey = "k"\nrequests_per_minute = 0', "requests_per_minute must be a positive integer"),
        ('[[keys]]\nkey = "k"\nrpm = 5', "unknown field 'rpm'"),
        ('[[keys]]\nkey = "k"\nservice_tiers = ["gold"]', "service_tiers must be a non-empty array"),
        ('[[keys]]\nkey = "k"\n[[keys]]\nkey = "k"', "is given twice"),
        ('keys = "k"', "'keys' must be an array of tables"),
    ],
)
def test_bad_keys_tables_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "serve.toml"
    path.write_text(text)
    assert serve(_parse(["--config", str(path)])) == 2
    err = capsys.readouterr().err
    assert f"config file {path}: " in err and message in err, err


def test_keys_tables_become_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUOTA_TEST_KEY", "sk-from-env")
    path = tmp_path / "serve.toml"
    path.write_text(
        'api-key = "sk-plain"\n[[keys]]\nkey_env = "QUOTA_TEST_KEY"\nname = "team"\nrequests_per_minute = 600\n'
        'tokens_per_minute = 2_000_000\nmax_concurrent = 32\nservice_tiers = ["default", "flex"]\n'
    )
    config = config_from_args(_parse(["--config", str(path)]))
    assert config.api_keys == ("sk-plain",)
    (limits,) = config.keys
    assert (limits.key, limits.name, limits.requests_per_minute, limits.tokens_per_minute) == (
        "sk-from-env",
        "team",
        600,
        2_000_000,
    )
    assert limits.max_concurrent == 32 and limits.max_concurrent_background is None
    assert limits.service_tiers == ("default", "flex")
    assert "sk-from-env" not in repr(config)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return parser.parse_args(argv)


def test_the_guides_keys_example_is_read_as_serve_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from guide import blocks

    [example] = [text for _, text, mark in blocks("production/operating.md") if mark == "quotas"]
    monkeypatch.setenv("TEAM_A_KEY", "sk-team-a")
    path = tmp_path / "serve.toml"
    path.write_text(example)
    (limits,) = config_from_args(_parse(["--config", str(path)])).keys
    assert (limits.key, limits.name, limits.requests_per_minute, limits.tokens_per_minute) == (
        "sk-team-a",
        "team-a",
        600,
        2_000_000,
    )
    assert (limits.max_concurrent, limits.max_concurrent_background) == (32, 8)
    assert limits.service_tiers == ("default", "flex")
