"""The file_search tool end to end: files uploaded and ingested with the openai client, a response whose
scripted model calls ``file_search.msearch`` and cites a result, through the real server on 127.0.0.1.

Checked: the ``file_search_call`` item (queries, status, results only when included), its events in order
(and through the SDK's stream accumulator), the ``file_citation`` annotation, what the model was declared
and read back (the prompts a recording engine received), the tool's ``max_num_results`` and ``filters``,
4xx for bad tools and for vector stores the caller does not have, a resent output rendering the call
and its results as the model wrote and read them, and the Agents SDK's ``FileSearchTool``.
The search itself and another key's stores run on both stores (SQLite and a real PostgreSQL).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import agents
import httpx
import openai
import pytest
from agents import Agent, FileSearchTool, OpenAIResponsesModel, Runner

from api.helpers import MODEL, Live, async_openai_client, openai_client, sse_events, start_live
from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine
from harmony_responses.render import RenderError, render_request
from harmony_responses.serve import Config, create_app
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.vocab import load_encoding
from state import conftest as state_stores
from translate.invariants import check_stream

DOCS = {
    "otters.md": (b"# Otters\n\nSea otters hold hands while they sleep so that they do not drift apart.", "animal"),
    "volcano.txt": (b"Mount Etna is an active stratovolcano on the east coast of Sicily.", "place"),
    "bees.txt": (b"Honey bees dance to tell the hive where the flowers are; otters do not dance.", "animal"),
}
CALL = '<|channel|>analysis to=file_search.msearch code<|message|>{"queries": ["why do otters hold hands"]}<|call|>'
SEARCH = "<|channel|>analysis<|message|>Search the files.<|end|><|start|>assistant" + CALL
SAID = "Otters hold hands so that they do not drift apart"
ANSWER = f"<|channel|>final<|message|>{SAID}【0:0†otters.md】, and Etna is in Sicily【0:7†volcano.txt】.<|return|>"
KEYS = ("key-one-1234567890", "key-two-1234567890")
# The state tests' store fixtures: a fresh SQLite file, or a schema of a real PostgreSQL.
store_spec = state_stores.store_spec
postgres_url = state_stores.postgres_url
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


class Recorder:
    """A scripted engine that keeps every prompt it was given."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = list(lines)
        self.prompts: list[str] = []
        self.requests: list[GenerateRequest] = []
        self.engine = MockEngine(self._handle)

    async def _handle(self, request: GenerateRequest) -> EngineStream:
        encoding = load_encoding()
        self.prompts.append(encoding.decode(request.prompt_ids))
        self.requests.append(request)
        yield TokenChunk(token_ids=encoding.encode(self.lines.pop(0), allowed_special="all"))
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Live]]:
    started: list[Live] = []

    def _serve(recorder: Recorder, **config: Any) -> Live:
        config.setdefault("data_dir", str(tmp_path / "data"))
        app = create_app(Config(models=(MODEL,), current_date="2025-06-01", **config), engine=recorder.engine)
        live = start_live(app)
        started.append(live)
        return live

    yield _serve
    for live in started:
        live.stop()


def _store(client: openai.OpenAI) -> tuple[str, dict[str, str]]:
    store = client.vector_stores.create(name="facts")
    ids = {}
    for name, (data, kind) in DOCS.items():
        uploaded = client.files.create(file=(name, data), purpose="assistants")
        done = client.vector_stores.files.create_and_poll(
            vector_store_id=store.id, file_id=uploaded.id, attributes={"kind": kind}, poll_interval_ms=20
        )
        assert done.status == "completed", (name, done.last_error)
        ids[name] = uploaded.id
    return store.id, ids


def test_a_response_searches_the_files_and_cites_a_result(serve: Callable[..., Live], store_spec: str) -> None:
    recorder = Recorder([SEARCH, ANSWER])
    client = openai_client(serve(recorder, store=store_spec, constrain_recipients="declared"))
    store_id, ids = _store(client)
    response = client.responses.create(
        model=MODEL,
        input="Why do otters hold hands?",
        tools=[{"type": "file_search", "vector_store_ids": [store_id]}],
        include=["file_search_call.results"],
    )
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["reasoning", "file_search_call", "message"]
    call = response.output[1]
    assert call.id.startswith("fs_") and call.status == "completed"
    assert call.queries == ["why do otters hold hands"]
    assert call.results is not None and call.results[0].file_id == ids["otters.md"]
    assert call.results[0].filename == "otters.md" and "hold hands" in (call.results[0].text or "")
    assert call.results[0].attributes == {"kind": "animal"} and 0 < (call.results[0].score or 0) <= 1
    assert {r.file_id for r in call.results} == {ids["otters.md"], ids["bees.txt"]}  # both mention otters
    # The resolved citation becomes a file_citation where the marker stood; one that names no result
    # (there is no result 7) stays as the model wrote it.
    part = response.output[2].content[0]
    assert part.text == f"{SAID}, and Etna is in Sicily【0:7†volcano.txt】."
    assert [a.model_dump() for a in part.annotations] == [
        {"type": "file_citation", "file_id": ids["otters.md"], "filename": "otters.md", "index": len(SAID)}
    ]
    # What the model was declared, and what it read back after the call.
    first, second = recorder.prompts
    assert "## file_search\n\n" in first and "namespace file_search {" in first
    assert "type msearch = (_: {" in first and "queries: string[]," in first
    results = second[second.index(CALL) + len(CALL) :]
    assert results.startswith(
        "<|start|>file_search.msearch to=assistant<|channel|>analysis<|message|>"
        '[0] 2 results for "why do otters hold hands".\n\n【0:0†otters.md】 file_id: ' + ids["otters.md"]
    )
    assert "Sea otters hold hands while they sleep" in results and "\n\n【0:1†bees.txt】 file_id: " in results
    assert results.endswith("<|end|><|start|>assistant")
    # Engines that constrain calls hold the header to file_search.msearch and its arguments to {"queries": [...]}.
    request = recorder.requests[0]
    assert request.recipients == ("file_search.msearch",)
    (grammar,) = request.tool_grammars
    assert (grammar.namespace, grammar.name, grammar.syntax) == ("file_search", "msearch", "json_schema_optional")
    assert json.loads(grammar.definition)["properties"]["queries"]["items"] == {"type": "string"}


def test_results_only_when_included_and_the_events_in_order(serve: Callable[..., Live]) -> None:
    recorder = Recorder([SEARCH, ANSWER, SEARCH, ANSWER])
    live = serve(recorder)
    client = openai_client(live)
    store_id, ids = _store(client)
    body = {"model": MODEL, "input": "Why?", "tools": [{"type": "file_search", "vector_store_ids": [store_id]}]}
    raw = httpx.post(f"{live.base_url}/responses", json={**body, "stream": True}, timeout=20)
    assert raw.status_code == 200, raw.text
    events = sse_events(raw.content)
    check_stream(events)
    output = events[-1]["response"]["output"]
    call = output[1]
    assert call == {
        "id": call["id"],
        "type": "file_search_call",
        "status": "completed",
        "queries": ["why do otters hold hands"],
        "results": None,
    }
    kinds = [e["type"] for e in events if e.get("item_id") == call["id"] or e.get("item", {}).get("id") == call["id"]]
    assert kinds == [
        "response.output_item.added",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.output_item.done",
    ]
    added = next(e for e in events if e["type"] == "response.output_item.added" and e["item"]["id"] == call["id"])
    assert added["item"]["status"] == "in_progress" and added["item"]["queries"] == []
    annotation = next(e for e in events if e["type"] == "response.output_text.annotation.added")
    assert annotation["annotation"]["file_id"] == ids["otters.md"]
    # The SDK's accumulator builds the same response.
    with client.responses.stream(**body) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.output[1].type == "file_search_call" and final.output[1].results is None
    assert final.output[2].content[0].annotations[0].type == "file_citation"


def test_max_num_results_and_filters_of_the_tool_apply(serve: Callable[..., Live]) -> None:
    recorder = Recorder([SEARCH, ANSWER, SEARCH, ANSWER])
    client = openai_client(serve(recorder))
    store_id, ids = _store(client)
    include = ["file_search_call.results"]
    one = client.responses.create(
        model=MODEL,
        input="Why?",
        tools=[{"type": "file_search", "vector_store_ids": [store_id], "max_num_results": 1}],
        include=include,
    )
    assert [r.file_id for r in one.output[1].results or ()] == [ids["otters.md"]]
    places = client.responses.create(
        model=MODEL,
        input="Why?",
        tools=[
            {
                "type": "file_search",
                "vector_store_ids": [store_id],
                "filters": {"type": "eq", "key": "kind", "value": "place"},
            }
        ],
        include=include,
    )
    assert places.output[1].results == []  # no place mentions otters
    assert '[0] No results for "why do otters hold hands".' in recorder.prompts[3]
    # Nothing to cite: the marker stays as written.
    assert places.output[2].content[0].annotations == []


def test_bad_tools_and_other_keys_stores_are_refused(serve: Callable[..., Live], store_spec: str) -> None:
    live = serve(Recorder([]), api_keys=KEYS, store=store_spec)
    mine, theirs = openai_client(live, api_key=KEYS[0]), openai_client(live, api_key=KEYS[1])
    store_id, _ = _store(mine)

    def refused(tool: dict[str, Any], client: openai.OpenAI = mine) -> openai.APIStatusError:
        with pytest.raises(openai.APIStatusError) as caught:
            client.responses.create(model=MODEL, input="Hi", tools=[{"type": "function", "name": "f"}, tool])
        return caught.value

    for tool, param in [
        ({"type": "file_search"}, "tools[1].vector_store_ids"),
        ({"type": "file_search", "vector_store_ids": []}, "tools[1].vector_store_ids"),
        ({"type": "file_search", "vector_store_ids": "vs_1"}, "tools[1].vector_store_ids"),
        ({"type": "file_search", "vector_store_ids": [store_id], "max_num_results": 0}, "tools[1].max_num_results"),
        ({"type": "file_search", "vector_store_ids": [store_id], "max_num_results": 51}, "tools[1].max_num_results"),
        ({"type": "file_search", "vector_store_ids": [store_id], "filters": {"type": "near"}}, "tools[1].filters"),
        (
            {"type": "file_search", "vector_store_ids": [store_id], "ranking_options": {"ranker": "best"}},
            "tools[1].ranking_options.ranker",
        ),
    ]:
        error = refused(tool)
        assert error.status_code == 400, (tool, error)
        assert error.body["param"].startswith(param), (tool, error.body)  # type: ignore[index]
    for client, store in [(mine, "vs_missing"), (theirs, store_id)]:
        error = refused({"type": "file_search", "vector_store_ids": [store]}, client)
        assert error.status_code == 404
        assert error.body["param"] == "tools[1].vector_store_ids", error.body  # type: ignore[index]
        assert store in error.message


def test_a_resent_output_renders_the_call_and_results_the_model_wrote_and_read(serve: Callable[..., Live]) -> None:
    recorder = Recorder([SEARCH, ANSWER, "<|channel|>final<|message|>You are welcome.<|return|>"])
    client = openai_client(serve(recorder))
    store_id, _ = _store(client)
    tools = [{"type": "file_search", "vector_store_ids": [store_id]}]
    first = client.responses.create(
        model=MODEL, input="Why?", tools=tools, include=["file_search_call.results"], store=False
    )
    resent = [
        {"role": "user", "content": "Why?"},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"role": "user", "content": "Thanks"},
    ]
    for item in resent:
        if item.get("type") == "file_search_call":
            item.setdefault("results", None)
    client.responses.create(model=MODEL, input=resent, tools=tools, store=False)
    read = recorder.prompts[1]
    seen = read[read.index(CALL) : read.rindex("<|end|>") + len("<|end|>")]  # the call and the results it read
    assert seen.startswith(CALL + "<|start|>file_search.msearch to=assistant")
    # The same call (harmony writes the recipient before the channel when it renders a message, as it does
    # for browser calls: the model accepts both orders) and, token for token, the results it read.
    results = seen[seen.index("<|start|>file_search.msearch") :]
    call = '<|start|>assistant to=file_search.msearch<|channel|>analysis code<|message|>{"queries": ["why do otters'
    assert call + ' hold hands"]}<|call|>' + results + "<|start|>assistant<|channel|>final" in recorder.prompts[2]


def test_the_agents_sdk_file_search_tool(serve: Callable[..., Live]) -> None:
    agents.set_tracing_disabled(True)  # else the SDK uploads traces to OpenAI
    recorder = Recorder([SEARCH, ANSWER, SEARCH, ANSWER])
    live = serve(recorder)
    store_id, ids = _store(openai_client(live))

    async def main() -> tuple[Any, Any, list[str]]:
        async with async_openai_client(live) as client:
            agent = Agent(
                name="librarian",
                instructions="Answer from the files.",
                tools=[FileSearchTool(vector_store_ids=[store_id], max_num_results=3, include_search_results=True)],
                model=OpenAIResponsesModel(model=MODEL, openai_client=client),
            )
            plain = await Runner.run(agent, "Why do otters hold hands?")
            streamed = Runner.run_streamed(agent, "Why do otters hold hands?")
            kinds = [event.type async for event in streamed.stream_events()]
            return plain, streamed, kinds

    plain, streamed, kinds = asyncio.run(main())
    for result in (plain, streamed):
        assert result.final_output == f"{SAID}, and Etna is in Sicily【0:7†volcano.txt】."
        calls = [item.raw_item for item in result.new_items if item.type == "tool_call_item"]
        assert [(c.type, c.status, c.queries) for c in calls] == [
            ("file_search_call", "completed", ["why do otters hold hands"])
        ]
        assert calls[0].results is not None and calls[0].results[0].file_id == ids["otters.md"]
        (message,) = [item.raw_item for item in result.new_items if item.type == "message_output_item"]
        assert message.content[0].annotations[0].file_id == ids["otters.md"]
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds


# ---------------------------------------------------------------------------------------------- rendering

FILE_SEARCH = {"type": "file_search", "vector_store_ids": ["vs_1"]}


def _prompt(request: dict[str, Any]) -> str:
    rendered = render_request(request, current_date="2025-06-01")
    return load_encoding().decode(rendered.token_ids)


def test_the_name_is_reserved_and_tool_choice_can_force_a_search() -> None:
    for tool, param in [
        ({"type": "mcp", "server_label": "file_search", "server_url": "https://x.example"}, "tools[1].server_label"),
        ({"type": "namespace", "name": "file_search", "tools": [{"name": "f"}]}, "tools[1].name"),
    ]:
        with pytest.raises(RenderError) as caught:
            render_request({"input": "x", "tools": [FILE_SEARCH, tool]}, current_date="2025-06-01")
        assert caught.value.param == param
    forced = _prompt({"input": "x", "tools": [FILE_SEARCH], "tool_choice": {"type": "file_search"}})
    assert forced.endswith("<|start|>assistant<|channel|>analysis to=file_search.msearch")
    allowed = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "file_search"}]}
    assert "## file_search" in _prompt({"input": "x", "tools": [FILE_SEARCH, WEATHER], "tool_choice": allowed})
    assert "## file_search" not in _prompt({"input": "x", "tools": [FILE_SEARCH], "tool_choice": "none"})
    with pytest.raises(RenderError):
        render_request({"input": "x", "tool_choice": {"type": "file_search"}}, current_date="2025-06-01")


def test_resent_items_number_their_results_in_order_and_without_results_render_the_call_only() -> None:
    result = {"file_id": "file_1", "filename": "a.md", "score": 0.5, "text": "Alpha.", "attributes": {}}
    call = {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["alpha"]}
    prompt = _prompt(
        {
            "input": [
                {"role": "user", "content": "q"},
                {**call, "results": None},
                {**call, "id": "fs_2", "results": [result]},
                {"role": "assistant", "content": "Alpha."},
            ],
            "tools": [FILE_SEARCH],
        }
    )
    msearch = '<|start|>assistant to=file_search.msearch<|channel|>analysis code<|message|>{"queries": ["alpha"]}'
    assert prompt.count(msearch + "<|call|>") == 2
    # The first search's results were not kept: the second is still search [1], as when the model read it.
    assert prompt.count("<|start|>file_search.msearch to=assistant") == 1
    assert '[1] 1 result for "alpha".\n\n【1:0†a.md】 file_id: file_1, score: 0.5000\nAlpha.<|end|>' in prompt
    with pytest.raises(RenderError) as caught:
        _prompt({"input": [{"role": "user", "content": "q"}, {**call, "queries": "alpha"}]})
    assert caught.value.param == "input[1].queries"


def test_a_chained_response_numbers_its_searches_after_the_earlier_ones(serve: Callable[..., Live]) -> None:
    again = CALL.replace("why do otters hold hands", "where is Etna")
    later = "<|channel|>final<|message|>In Sicily【1:0†volcano.txt】, not【0:0†otters.md】.<|return|>"
    recorder = Recorder([SEARCH, ANSWER, again, later])
    client = openai_client(serve(recorder))
    store_id, ids = _store(client)
    tools: Any = [{"type": "file_search", "vector_store_ids": [store_id]}]
    first = client.responses.create(model=MODEL, input="Why?", tools=tools)
    second = client.responses.create(model=MODEL, input="Where?", tools=tools, previous_response_id=first.id)
    assert '<|message|>[1] 2 results for "where is Etna".\n\n【1:0†volcano.txt】' in recorder.prompts[3]
    # This response's search resolves; the earlier response's result is not this response's to cite.
    part = second.output[-1].content[0]
    assert part.text == "In Sicily, not【0:0†otters.md】."
    assert [(a.file_id, a.index) for a in part.annotations] == [(ids["volcano.txt"], len("In Sicily"))]


def test_the_guides_file_search_page_is_what_runs(serve: Callable[..., Live]) -> None:
    from guide import blocks, printed_pattern

    page = blocks("tools/file-search.md")
    [response_block] = [text for _, text, mark in page if mark == "file_search_response"]
    [declared] = [text for _, text, mark in page if mark == "file_search_declared"]
    [tool_message] = [text for _, text, mark in page if mark == "file_search_results"]
    recorder = Recorder([SEARCH, ANSWER])
    live = serve(recorder)
    client = openai_client(live)
    store_id, _ = _store(client)
    # The page's request, as written, against this server and the test's vector store.
    scope: dict[str, Any] = {"client": client, "store": client.vector_stores.retrieve(store_id)}
    exec(response_block, scope)
    response = scope["response"]
    assert [item.type for item in response.output] == ["reasoning", "file_search_call", "message"]
    assert response.output[1].results, response.output[1]
    # What the page says the model is declared and reads is what the engine received.
    assert printed_pattern(declared).search(recorder.prompts[0]), recorder.prompts[0]
    assert printed_pattern(tool_message).search(recorder.prompts[1]), recorder.prompts[1]
