"""Quotas across processes: the counters live in the store's database, so a key's limits hold across
``--workers`` and across gateways sharing one store (SQLite on one host, PostgreSQL anywhere), through the
openai SDK: the burst past the limit is refused wherever it lands, and the SDK's retries end in success."""

from __future__ import annotations

import contextlib
import math
import secrets
import time
from pathlib import Path

import httpx
import openai

from api.helpers import MODEL, write_script
from reliability.server_process import server_process

RPM = 30  # a request back every 2 s: the SDK's wait for it stays short


def _config(tmp_path: Path, **limits: int) -> str:
    path = tmp_path / "serve.toml"
    fields = "".join(f"{name} = {value}\n" for name, value in limits.items())
    path.write_text(f'[[keys]]\nkey_env = "QUOTA_TEST_KEY"\nname = "burst"\n{fields}')
    return str(path)


def _burst(roots: list[str], key: str, count: int) -> tuple[list[int], float]:
    """``count`` requests, each on a new connection, taking turns over ``roots``: their statuses, and how long."""
    started = time.monotonic()
    statuses = []
    for n in range(count):
        with openai.OpenAI(base_url=f"{roots[n % len(roots)]}/v1", api_key=key, max_retries=0) as client:
            try:
                client.responses.create(model=MODEL, input="hi")
                statuses.append(200)
            except openai.RateLimitError as exc:
                assert exc.response.headers["x-ratelimit-remaining-requests"] == "0"
                statuses.append(429)
    return statuses, time.monotonic() - started


def _check(statuses: list[int], elapsed: float) -> None:
    # Exact admissions: the limit, plus what refilled while the burst ran (RPM/60 a second), never more;
    # per-process counters would have let every process take the whole limit.
    admitted = statuses.count(200)
    assert RPM <= admitted <= RPM + math.ceil(elapsed * RPM / 60), (admitted, elapsed)
    assert 429 in statuses


def _drain(root: str, key: str) -> float:
    """Spend what refilled since the burst until a refusal says the next request is at least a second away
    (the bucket refills continuously, so the burst's last 429 may have been a moment from the next token):
    when the refusal came."""
    with openai.OpenAI(base_url=f"{root}/v1", api_key=key, max_retries=0) as client:
        while True:
            try:
                client.responses.create(model=MODEL, input="hi")
            except openai.RateLimitError as exc:
                if int(exc.response.headers["retry-after-ms"]) >= 1000:
                    return time.monotonic()


def _sdk_retries_to_success(root: str, key: str) -> None:
    # The SDK's first attempt is refused and its retry, after the wait the 429 named, succeeds. Should the
    # machine stall past that wait before the first attempt lands, the bucket has rightly refilled: try again.
    for _ in range(5):
        attempts: list[int] = []
        http = httpx.Client(event_hooks={"response": [lambda r, seen=attempts: seen.append(r.status_code)]})
        refused_at = _drain(root, key)
        with openai.OpenAI(base_url=f"{root}/v1", api_key=key, max_retries=4, http_client=http) as client:
            assert client.responses.create(model=MODEL, input="hi").status == "completed"
        assert attempts[-1] == 200, attempts
        if attempts[0] == 429:
            return
        assert time.monotonic() - refused_at >= 1.0, attempts  # admitted at once only once a token was back
    raise AssertionError("the SDK's first attempt was never refused")


def test_two_gateways_on_one_store_share_a_keys_limit(store_spec: str, tmp_path: Path) -> None:
    key = f"sk-{secrets.token_hex(8)}"
    engine = write_script(tmp_path / "script.jsonl", ["<|channel|>final<|message|>Hi<|return|>"])
    config = _config(tmp_path, requests_per_minute=RPM)
    args = ["--model", MODEL, "--engine", engine, "--store", store_spec, "--config", config]
    env = {"QUOTA_TEST_KEY": key}
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(server_process(args, env=env))
        b = stack.enter_context(server_process(args, env=env))
        statuses, elapsed = _burst([a.root, b.root], key, RPM + 10)  # alternating: each gets half
        _check(statuses, elapsed)
        _sdk_retries_to_success(b.root, key)


def test_workers_share_a_keys_limit(tmp_path: Path) -> None:
    key = f"sk-{secrets.token_hex(8)}"
    engine = write_script(tmp_path / "script.jsonl", ["<|channel|>final<|message|>Hi<|return|>"])
    store = f"sqlite:{tmp_path / 'responses.sqlite3'}"
    config = _config(tmp_path, requests_per_minute=RPM)
    args = ["--model", MODEL, "--engine", engine, "--store", store, "--config", config, "--workers", "2"]
    with server_process(args, env={"QUOTA_TEST_KEY": key}) as server:
        statuses, elapsed = _burst([server.root], key, RPM + 10)
        _check(statuses, elapsed)
        _sdk_retries_to_success(server.root, key)
