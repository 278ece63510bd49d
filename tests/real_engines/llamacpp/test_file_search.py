"""The file_search tool (issue 27 item 4) on a real llama-server: the call is generated, held by the grammar
the server sends (declared recipients, ``file_search.msearch``'s ``{"queries": [...]}``), run over a vector
store of the gateway, and the answer the model writes after reading the results cites one.

The scripted model (its own here) writes ``SEARCH`` after ``<|start|>assistant`` by default, and ``ANSWER``
once `` zebra`` is in the prompt: it is in the uploaded document only, so the model answers after it read
the search's results (numbered 1: the conversation sent has an earlier search). Under
``--constrain-recipients declared`` (the grammar from ``to=`` on, holding ``{"queries": [...]}``) and ``off``
(none) the call and the answer are the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..gateway import EngineProcess, Gateway, start_engine, start_gateway
from ..tiny_model import Chain, scripted_checkpoint, to_gguf
from .conftest import llama_server_argv

MODEL = "gpt-oss-20b"
SEARCH = '<|channel|>analysis to=file_search.msearch code<|message|>{"queries":["otters"]}<|call|>'
# Search 1: the conversation had one before (a chain may not repeat a token with two successors: 【0:0† can't).
ANSWER = "<|channel|>final<|message|>They hold hands【1:0†otters.md】<|return|>"
EARLIER = [
    {"role": "user", "content": "What did the notes say?"},
    {"type": "file_search_call", "id": "fs_earlier", "status": "completed", "queries": ["notes"], "results": None},
    {"role": "assistant", "content": "Nothing yet."},
]
DOC = b"Sea otters hold hands while they sleep, as a zebra does not."


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    gguf: Path = to_gguf(scripted_checkpoint([Chain(SEARCH), Chain(ANSWER, marker=" zebra")]))
    engine = start_engine(
        llama_server_argv(gguf, ctx=1024), timeout=120, log_dir=tmp_path_factory.mktemp("llama"), name="llama-server"
    )
    yield engine
    engine.stop()


@pytest.mark.parametrize("mode", ["declared", "off"])
def test_a_generated_search_runs_and_its_result_is_cited(
    llama: EngineProcess, tmp_path_factory: pytest.TempPathFactory, mode: str
) -> None:
    gateway: Gateway = start_gateway(
        f"llamacpp:{llama.url}", args=["--constrain-recipients", mode], log_dir=tmp_path_factory.mktemp("serve")
    )
    try:
        client = gateway.client()
        store = client.vector_stores.create(name="notes")
        done = client.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=("otters.md", DOC), poll_interval_ms=50
        )
        assert done.status == "completed", done.last_error
        response = client.responses.create(
            model=MODEL,
            input=[*EARLIER, {"role": "user", "content": "Why do otters hold hands?"}],
            tools=[{"type": "file_search", "vector_store_ids": [store.id]}],
            include=["file_search_call.results"],
            max_output_tokens=200,
        )
    finally:
        gateway.stop()
    assert response.status == "completed", response.error
    call, message = response.output
    assert call.type == "file_search_call" and call.status == "completed" and call.queries == ["otters"]
    assert call.results is not None and [r.file_id for r in call.results] == [done.id]
    part = message.content[0]
    assert part.text == "They hold hands"
    assert [(a.type, a.file_id, a.filename, a.index) for a in part.annotations] == [
        ("file_citation", done.id, "otters.md", len("They hold hands"))
    ]
