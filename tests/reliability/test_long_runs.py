"""A long run of one character in a request keeps the server answering (text_tokens.py).

harmony tokenizes a run of one letter, space or punctuation character in time growing with the square of its
length, holding the GIL: one request of 300 kB of ``a`` kept every other request of the process waiting 30 s
(``/health`` included), and a megabyte of ``é`` would have taken minutes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from .server_process import ServerProcess, server_process

MODEL = "gpt-oss-120b"
# Minutes for harmony alone (60,000 took 3.9 s, growing with the square); seconds at most here.
PATIENCE = 120


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with server_process(["--model", MODEL]) as process:
        yield process


def test_a_megabyte_run_is_answered_and_the_server_answers_others_meanwhile(server: ServerProcess) -> None:
    answers: list[httpx.Response] = []

    def long_request() -> None:
        body = {"model": MODEL, "input": "é" * 500_000}
        answers.append(httpx.post(f"{server.root}/v1/responses", json=body, timeout=PATIENCE))

    sender = threading.Thread(target=long_request)
    sender.start()
    health = 0
    while sender.is_alive():  # the server keeps answering while it tokenizes the long request
        assert httpx.get(f"{server.root}/health", timeout=PATIENCE).status_code == 200
        health += 1
    sender.join()
    assert health >= 1
    # 500,000 tokens: more than the model's context, which the server could only tell by tokenizing it.
    assert answers[0].status_code == 400, answers[0].text
    assert answers[0].json()["error"]["code"] == "context_length_exceeded"


def test_a_long_run_reaches_the_model_whole(server: ServerProcess) -> None:
    text = "Here: " + "=" * 30_000 + " and " + "a" * 50_000 + " done."
    body = {"model": MODEL, "input": text}
    answer = httpx.post(f"{server.root}/v1/responses", json=body, timeout=PATIENCE)
    assert answer.status_code == 200, answer.text
    # The echo engine answers with the user message's tokens as it received them.
    assert answer.json()["output"][-1]["content"][0]["text"] == f"You said: {text}"
