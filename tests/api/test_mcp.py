"""Remote MCP end to end: replay-scripted models call a real MCP server through our server and the openai client.

The MCP server is built in the tests with the ``mcp`` SDK (``tests/tools/mcp_server.py``) and runs as its own
process over streamable HTTP (and SSE, and stdio when configured by name). Every stream passes
``check_stream`` (protocol invariants, openai validation and its accumulator). What the model reads (the tool
declarations and the tool messages spliced into the next prompt) is checked on the prompts a recording engine
receives.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import Any

import agents
import httpx
import openai
import pytest
from agents import Agent, HostedMCPTool, OpenAIResponsesModel, Runner

from harmony_responses.engine import EngineStream, GenerateRequest, MockEngine
from harmony_responses.tokens import EngineEnd, TokenChunk
from harmony_responses.tools.mcp import McpOptions, StdioServer, _guard
from harmony_responses.tools.mcp._connection import UNIFORM_FAILURE
from harmony_responses.vocab import load_encoding
from tools.mcp_server import HERE as MCP_SERVER_SCRIPT
from tools.mcp_server import InternalService, McpServerProcess
from translate.invariants import check_stream

from .conftest import Serve
from .helpers import MODEL, async_openai_client, openai_client, post, sse_events

THINK = "<|channel|>analysis<|message|>I should use the tool.<|end|><|start|>assistant"
ADD = THINK + '<|channel|>commentary to=calc.add <|constrain|>json<|message|>{"a": 2, "b": 3}<|call|>'
FAIL = THINK + '<|channel|>analysis to=calc.fail code<|message|>{"reason": "disk full"}<|call|>'
NOTE = (
    THINK + '<|channel|>commentary to=calc.save_note <|constrain|>json<|message|>{"name": "n1", "text": "hi"}<|call|>'
)
ANSWER = "<|channel|>final<|message|>Done: 5.<|return|>"


LOOPBACK_HOSTS = ("127.0.0.1",)  # where the test MCP servers run: listed, as an operator would list theirs


@pytest.fixture
def serve(serve: Serve) -> Serve:
    """conftest's ``serve``, with the test servers' host allowed (by default internal hosts are refused)."""

    def _serve(source: Any, **config: Any) -> Any:
        config.setdefault("mcp", McpOptions(allowed_hosts=LOOPBACK_HOSTS))
        return serve(source, **config)

    return _serve


def calc(url: str, **fields: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "calc", "server_url": url, "require_approval": "never", **fields}


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpServerProcess]:
    server = McpServerProcess()
    yield server
    server.stop()


class Recorder:
    """A scripted engine that keeps every prompt it was given (decoded)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = list(lines)
        self.prompts: list[str] = []
        self.engine = MockEngine(self._handle)

    async def _handle(self, request: GenerateRequest) -> EngineStream:
        encoding = load_encoding()
        self.prompts.append(encoding.decode(request.prompt_ids))
        yield TokenChunk(token_ids=encoding.encode(self.lines.pop(0), allowed_special="all"))
        yield EngineEnd(reason="stop", prompt_tokens=len(request.prompt_ids))


def stream(live: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = post(live, {"model": MODEL, "stream": True, **body})
    assert response.status_code == 200, response.text
    events = sse_events(response.content)
    check_stream(events)
    assert events[-1]["type"] == "response.completed", events[-1]
    return events


def output(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return events[-1]["response"]["output"]


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [item["type"] for item in output(events)]


def tool_message(prompt: str, author: str) -> str:
    """The content of the tool message ``author`` wrote into ``prompt``."""
    head = f"<|start|>{author} to=assistant<|channel|>"
    start = prompt.index(head) + len(head)
    start = prompt.index("<|message|>", start) + len("<|message|>")
    return prompt[start : prompt.index("<|end|>", start)]


# ---------------------------------------------------------------------------------------------- list and call


@pytest.mark.parametrize("streamed", [True, False])
def test_a_call_the_engine_stops_right_after_without_its_call_token_is_run(
    serve: Serve, mcp_server: McpServerProcess, streamed: bool
) -> None:
    # llama.cpp under a lazy grammar stopped once the arguments' JSON was complete, with no <|call|>: the server
    # answered a JSON request with a 500 ("no final") and ended a stream with no terminal event, the call never run.
    recorder = Recorder([ADD.removesuffix("<|call|>"), ANSWER])
    live = serve(recorder.engine)
    body = {"input": "What is 2 + 3?", "tools": [calc(mcp_server.url)]}
    if streamed:
        final = stream(live, body)[-1]["response"]
    else:
        response = post(live, {"model": MODEL, **body})
        assert response.status_code == 200, response.text
        final = response.json()
    assert final["status"] == "completed"
    call = next(item for item in final["output"] if item["type"] == "mcp_call")
    assert call["status"] == "completed" and call["output"] == "5"
    assert final["output"][-1]["content"][0]["text"] == "Done: 5."
    assert len(recorder.prompts) == 2  # the tool's result went back to the model


def test_list_tools_then_a_call_with_output(serve: Serve, mcp_server: McpServerProcess) -> None:
    recorder = Recorder([ADD, ANSWER])
    live = serve(recorder.engine)
    events = stream(live, {"input": "What is 2 + 3?", "tools": [calc(mcp_server.url)]})
    assert kinds(events) == ["mcp_list_tools", "reasoning", "mcp_call", "message"]
    listing, _, call, _ = output(events)
    # Every tool Harmony can address (not "bad.name"), with its schema, description and annotations.
    assert [t["name"] for t in listing["tools"]] == ["add", "weather", "save_note", "fail", "slow"]
    add = listing["tools"][0]
    assert add["description"] == "Add two integers." and add["annotations"] == {"readOnlyHint": True}
    assert add["input_schema"]["properties"]["a"]["type"] == "integer"
    assert listing["id"].startswith("mcpl_") and "error" not in listing
    assert call["status"] == "completed" and call["output"] == "5" and call["server_label"] == "calc"
    assert (call["name"], json.loads(call["arguments"])) == ("add", {"a": 2, "b": 3})
    # The listing comes before anything the model wrote, with its own events.
    types = [e["type"] for e in events]
    assert types[2:6] == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
    ]
    assert types.index("response.mcp_call.completed") > types.index("response.mcp_call_arguments.done")

    first, second = recorder.prompts
    # The server is a system namespace named by its label, its tools declared as TypeScript.
    assert "## calc\n\nArithmetic, weather and notes for the tests." not in first  # no server_description given
    assert "namespace calc {" in first and "type add = (_: {" in first and "bad.name" not in first
    # The call as the model wrote it, the result as the tool message on the call's channel, the assistant's turn.
    call_text = '<|channel|>commentary to=calc.add <|constrain|>json<|message|>{"a": 2, "b": 3}<|call|>'
    assert second.endswith(
        call_text + "<|start|>calc.add to=assistant<|channel|>commentary<|message|>5<|end|><|start|>assistant"
    )


def test_the_openai_client_reads_the_items(serve: Serve, mcp_server: McpServerProcess) -> None:
    live = serve([ADD, ANSWER])
    client = openai_client(live)
    response = client.responses.create(model=MODEL, input="2 + 3?", tools=[calc(mcp_server.url)])  # type: ignore[list-item]
    listing, _, call, message = response.output
    assert listing.type == "mcp_list_tools" and [t.name for t in listing.tools][:2] == ["add", "weather"]
    assert call.type == "mcp_call" and call.output == "5" and call.error is None
    assert message.type == "message" and response.output_text == "Done: 5."
    with client.responses.stream(model=MODEL, input="2 + 3?", tools=[calc(mcp_server.url)]) as s:  # type: ignore[list-item]
        kinds_seen = {event.type for event in s}
        final = s.get_final_response()
    assert {"response.mcp_list_tools.completed", "response.mcp_call_arguments.delta"} <= kinds_seen
    assert final.output[2].type == "mcp_call" and final.output[2].output == "5"  # type: ignore[union-attr]


def test_a_tool_that_fails_ends_its_call_failed_and_the_model_is_told(
    serve: Serve, mcp_server: McpServerProcess
) -> None:
    recorder = Recorder([FAIL, ANSWER])
    live = serve(recorder.engine)
    events = stream(live, {"input": "Try it.", "tools": [calc(mcp_server.url)]})
    call = output(events)[2]
    assert call["status"] == "failed" and "output" not in call
    assert call["error"] == {
        "type": "mcp_tool_execution_error",
        "content": [{"type": "text", "text": "Error executing tool fail"}],
    }
    assert "response.mcp_call.failed" in [e["type"] for e in events]
    told = json.loads(tool_message(recorder.prompts[1], "calc.fail"))
    assert told == {"error": call["error"]}  # what render writes for this mcp_call when it comes back as history


def test_a_call_past_the_timeout_fails_and_the_response_goes_on(serve: Serve, mcp_server: McpServerProcess) -> None:
    slow = THINK + '<|channel|>analysis to=calc.slow code<|message|>{"seconds": 5}<|call|>'
    live = serve([slow, ANSWER], mcp=McpOptions(allowed_hosts=LOOPBACK_HOSTS, timeout=0.5))
    events = stream(live, {"input": "Wait.", "tools": [calc(mcp_server.url)]})
    call = output(events)[2]
    assert call["status"] == "failed" and call["error"]["type"] == "mcp_protocol_error"
    assert call["error"]["code"] == -32001 and "timed out" in call["error"]["message"]
    assert kinds(events)[-1] == "message"


def test_bad_arguments_are_refused_without_reaching_the_server(serve: Serve, mcp_server: McpServerProcess) -> None:
    bad = THINK + "<|channel|>commentary to=calc.add <|constrain|>json<|message|>{not json<|call|>"
    events = stream(serve([bad, ANSWER]), {"input": "x", "tools": [calc(mcp_server.url)]})
    error = output(events)[2]["error"]
    assert error["type"] == "mcp_protocol_error" and error["code"] == -32602 and "not valid JSON" in error["message"]


def test_tool_choice_forces_an_mcp_tool(serve: Serve, mcp_server: McpServerProcess) -> None:
    recorder = Recorder([' code<|message|>{"a": 2, "b": 3}<|call|>', ANSWER])
    live = serve(recorder.engine)
    choice = {"type": "mcp", "server_label": "calc", "name": "add"}
    events = stream(live, {"input": "2 + 3?", "tools": [calc(mcp_server.url)], "tool_choice": choice})
    assert kinds(events) == ["mcp_list_tools", "mcp_call", "message"]
    assert output(events)[1]["output"] == "5"
    assert recorder.prompts[0].endswith("<|start|>assistant<|channel|>analysis to=calc.add")


# ---------------------------------------------------------------------------------------------- allowed_tools


@pytest.mark.parametrize(
    ("allowed", "names"),
    [
        (["weather", "fail"], ["weather", "fail"]),
        ({"tool_names": ["add", "save_note"]}, ["add", "save_note"]),
        ({"read_only": True}, ["add", "weather"]),
        ({"read_only": False, "tool_names": ["add", "save_note", "fail"]}, ["save_note", "fail"]),
    ],
)
def test_allowed_tools_filters_what_is_listed_declared_and_callable(
    serve: Serve, mcp_server: McpServerProcess, allowed: Any, names: list[str]
) -> None:
    recorder = Recorder([ADD, ANSWER])
    live = serve(recorder.engine)
    events = stream(live, {"input": "2 + 3?", "tools": [calc(mcp_server.url, allowed_tools=allowed)]})
    assert [t["name"] for t in output(events)[0]["tools"]] == names
    declared = recorder.prompts[0]
    for name in ["add", "weather", "save_note", "fail", "slow"]:
        assert (f"type {name} = " in declared) is (name in names)
    call = output(events)[2]
    if "add" in names:
        assert call["status"] == "completed" and call["output"] == "5"
    else:
        # The model guessed a tool it was not given: refused here, the server never sees the call.
        assert call["status"] == "failed" and "not available" in call["error"]["message"]


# ---------------------------------------------------------------------------------------------- approvals


def test_approval_round_trip_approve(serve: Serve, mcp_server: McpServerProcess) -> None:
    recorder = Recorder([NOTE, "<|channel|>final<|message|>Saved.<|return|>"])
    live = serve(recorder.engine)
    tools = [calc(mcp_server.url, require_approval={"never": {"read_only": True}})]
    first = stream(live, {"input": "Save a note.", "tools": tools})
    assert kinds(first) == ["mcp_list_tools", "reasoning", "mcp_approval_request"]
    request = output(first)[-1]
    assert request["id"].startswith("mcpr_") and (request["server_label"], request["name"]) == ("calc", "save_note")
    assert json.loads(request["arguments"]) == {"name": "n1", "text": "hi"}
    assert [e["type"] for e in first if e.get("item", {}).get("type") == "mcp_approval_request"] == [
        "response.output_item.added",
        "response.output_item.done",
    ]
    assert not any(e["type"].startswith("response.mcp_call") for e in first)

    # The client approves, resending the history: no new listing (the one in the history is reused).
    history = [{"role": "user", "content": "Save a note."}, *output(first)]
    approval = {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}
    second = stream(live, {"input": [*history, approval], "tools": tools})
    assert kinds(second) == ["mcp_call", "message"]
    call = output(second)[0]
    assert call["approval_request_id"] == request["id"] and call["status"] == "completed"
    assert call["output"] == "Saved note 'n1' (1 in total)." and call["arguments"] == request["arguments"]
    # The model continued from the call's result: the prompt ends call, result, assistant.
    prompt = recorder.prompts[1]
    assert prompt.endswith(
        '<|start|>assistant to=calc.save_note<|channel|>analysis code<|message|>{"name": "n1", "text": "hi"}<|call|>'
        "<|start|>calc.save_note to=assistant<|channel|>analysis<|message|>Saved note 'n1' (1 in total).<|end|>"
        "<|start|>assistant"
    )
    assert "namespace calc {" in prompt  # declared from the history's listing

    # The conversation goes on: the approved call is history now (rendered once, as its mcp_call).
    recorder.lines.append(ANSWER)
    third = stream(
        live, {"input": [*history, approval, *output(second), {"role": "user", "content": "Thanks"}], "tools": tools}
    )
    assert kinds(third) == ["message"]
    assert recorder.prompts[2].count("to=calc.save_note") == 1


def test_approval_round_trip_deny(serve: Serve, mcp_server: McpServerProcess) -> None:
    declined = "<|channel|>final<|message|>OK, I did not save it.<|return|>"
    recorder = Recorder([NOTE, declined])
    live = serve(recorder.engine)
    tools = [{"type": "mcp", "server_label": "calc", "server_url": mcp_server.url}]  # default: always
    first = stream(live, {"input": "Save a note.", "tools": tools})
    request = output(first)[-1]
    assert request["type"] == "mcp_approval_request"
    history = [{"role": "user", "content": "Save a note."}, *output(first)]
    approval = {
        "type": "mcp_approval_response",
        "approval_request_id": request["id"],
        "approve": False,
        "reason": "Not now.",
    }
    second = stream(live, {"input": [*history, approval], "tools": tools})
    assert kinds(second) == ["message"]
    told = tool_message(recorder.prompts[1], "calc.save_note")
    assert told == "The user declined this call, so it was not run. Reason: Not now."
    assert recorder.prompts[1].endswith(told + "<|end|><|start|>assistant")


def test_approval_continued_with_previous_response_id(serve: Serve, mcp_server: McpServerProcess) -> None:
    recorder = Recorder([NOTE, "<|channel|>final<|message|>Saved.<|return|>"])
    live = serve(recorder.engine)
    client = openai_client(live)
    tools: Any = [calc(mcp_server.url, require_approval="always")]
    first = client.responses.create(model=MODEL, input="Save a note.", tools=tools)
    request = first.output[-1]
    assert request.type == "mcp_approval_request"
    approval = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
    events = stream(live, {"previous_response_id": first.id, "input": [approval], "tools": tools})
    # The stored listing is reused (no new mcp_list_tools item); the approved call runs, then the answer.
    assert kinds(events) == ["mcp_call", "message"]
    call = output(events)[0]
    assert call["approval_request_id"] == request.id and call["output"].startswith("Saved note 'n1'")
    second = client.responses.retrieve(events[-1]["response"]["id"])
    assert second.output[0].type == "mcp_call" and second.previous_response_id == first.id
    assert "namespace calc {" in recorder.prompts[1] and recorder.prompts[1].count("to=calc.save_note") == 1


def test_background_response_lists_after_it_begins(serve: Serve, mcp_server: McpServerProcess) -> None:
    live = serve([ADD, ANSWER])
    client = openai_client(live)
    created = client.responses.create(model=MODEL, input="2 + 3?", tools=[calc(mcp_server.url)], background=True)  # type: ignore[list-item]
    assert created.status == "queued"
    events = sse_events(httpx.get(f"{live.base_url}/responses/{created.id}?stream=true", timeout=30).content)
    check_stream(events)
    assert [e["type"] for e in events[:5]] == [
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
    ]
    assert kinds(events) == ["mcp_list_tools", "reasoning", "mcp_call", "message"]


def test_an_approval_for_an_undeclared_server_is_a_400(serve: Serve, mcp_server: McpServerProcess) -> None:
    live = serve([ANSWER])
    request = {"type": "mcp_approval_request", "id": "mcpr_x", "server_label": "gone", "name": "t", "arguments": "{}"}
    approval = {"type": "mcp_approval_response", "approval_request_id": "mcpr_x", "approve": True}
    response = post(live, {"model": MODEL, "input": [request, approval], "tools": [calc(mcp_server.url)]})
    assert response.status_code == 400
    assert "needs the MCP server 'gone'" in response.json()["error"]["message"]


# ---------------------------------------------------------------------------------------------- listing reuse, failures


def test_a_listing_in_the_input_is_reused_not_repeated(serve: Serve) -> None:
    recorder = Recorder([ANSWER])
    live = serve(recorder.engine)
    listing = {
        "type": "mcp_list_tools",
        "id": "mcpl_old",
        "server_label": "calc",
        "tools": [{"name": "mul", "input_schema": {"type": "object", "properties": {"x": {"type": "number"}}}}],
    }
    # The URL is never contacted: nothing listens there, and the response still completes without a failure.
    events = stream(
        live, {"input": [listing, {"role": "user", "content": "hi"}], "tools": [calc("http://127.0.0.1:9/mcp")]}
    )
    assert kinds(events) == ["message"]
    assert "type mul = (_: {\nx?: number,\n}) => any;" in recorder.prompts[0]


def listing_failed(response: httpx.Response) -> str:
    """The message of a request refused because an MCP server's tools could not be listed (424, as the API)."""
    assert response.status_code == 424, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("external_connector_error", "tools", "http_error")
    assert error["message"].startswith("Error retrieving tool list from MCP server: 'calc'. "), error
    return str(error["message"])


def test_a_server_that_is_down_fails_the_request_with_a_424(serve: Serve) -> None:
    # The API answers so (openai-python, openai-node and .NET users report "424 Error retrieving tool list from
    # MCP server: …"): a client that declared the tools expects them, not an answer written without them.
    recorder = Recorder([ANSWER])
    live = serve(recorder.engine)
    tools = [calc("http://127.0.0.1:9/mcp", server_description="Math.")]
    for streamed in (False, True):
        listing_failed(post(live, {"model": MODEL, "input": "2 + 3?", "tools": tools, "stream": streamed}))
    with pytest.raises(openai.APIStatusError) as raised:
        openai_client(live).responses.create(model=MODEL, input="2 + 3?", tools=tools)  # type: ignore[arg-type]
    assert raised.value.status_code == 424 and "Error retrieving tool list from MCP server: 'calc'." in str(
        raised.value
    )
    assert recorder.prompts == []  # refused before the model ran


def test_headers_reach_the_server(serve: Serve) -> None:
    guarded = McpServerProcess(key="sesame")
    try:
        live = serve([ADD, ANSWER, ANSWER])
        tool = calc(guarded.url, headers={"X-Api-Key": "sesame"}, authorization="token")
        events = stream(live, {"input": "2 + 3?", "tools": [tool]})
        assert output(events)[2]["output"] == "5"
        # Credentials reach the MCP server only: the echoed (and stored) tool has them masked or left out.
        (echoed,) = events[-1]["response"]["tools"]
        assert echoed["headers"] == {"X-Api-Key": "<redacted>"} and "authorization" not in echoed
        assert "sesame" not in json.dumps(events)
        # Without the key the server refuses to list its tools (401): the request fails as the API fails it.
        refused = post(live, {"model": MODEL, "input": "2 + 3?", "tools": [calc(guarded.url)]})
        assert listing_failed(refused) == (
            "Error retrieving tool list from MCP server: 'calc'. Http status code: 401 (Unauthorized)"
        )
    finally:
        guarded.stop()


def test_sse_transport_when_the_url_says_so(serve: Serve) -> None:
    sse = McpServerProcess("sse")
    try:
        assert sse.url.endswith("/sse")
        events = stream(serve([ADD, ANSWER]), {"input": "2 + 3?", "tools": [calc(sse.url)]})
        assert output(events)[2]["output"] == "5"
    finally:
        sse.stop()


# ---------------------------------------------------------------------------------------------- operator settings


def test_stdio_server_configured_by_name(serve: Serve) -> None:
    local = StdioServer(name="local-calc", command=sys.executable, args=(str(MCP_SERVER_SCRIPT), "stdio"))
    recorder = Recorder([ADD, ANSWER])
    live = serve(recorder.engine, mcp=McpOptions(servers=(local,)))  # no allowed hosts: stdio is the operator's
    events = stream(live, {"input": "2 + 3?", "tools": [calc("stdio:local-calc")]})
    assert kinds(events) == ["mcp_list_tools", "reasoning", "mcp_call", "message"]
    assert output(events)[2]["output"] == "5"


@pytest.mark.parametrize(
    ("options", "url", "fragment"),
    [
        (McpOptions(allowed_hosts=("mcp.example.com",)), "http://127.0.0.1:9/mcp", "host '127.0.0.1' is not among"),
        (McpOptions(allowed_hosts=("*.example.com",)), "https://example.com/mcp", "host 'example.com' is not among"),
        (McpOptions(), "stdio:nope", "no MCP server named 'nope' is configured"),
        (McpOptions(), "file:///etc/passwd", "over http or https"),
    ],
)
def test_servers_the_client_may_not_reach_are_a_400(serve: Serve, options: McpOptions, url: str, fragment: str) -> None:
    live = serve([ANSWER], mcp=options)
    response = post(live, {"model": MODEL, "input": "x", "tools": [calc(url)]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "tools[0].server_url" and fragment in error["message"]


def test_allowed_hosts_let_the_named_host_through(serve: Serve, mcp_server: McpServerProcess) -> None:
    live = serve([ADD, ANSWER], mcp=McpOptions(allowed_hosts=(f"127.0.0.1:{mcp_server.port}",)))
    events = stream(live, {"input": "2 + 3?", "tools": [calc(mcp_server.url)]})
    assert output(events)[2]["output"] == "5"


# ---------------------------------------------------------------------------------------------- SSRF


@pytest.fixture
def internal() -> Iterator[InternalService]:
    service = InternalService()
    yield service
    service.stop()


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:{port}",
        "localhost:{port}",
        "[::1]:{port}",
        "[::ffff:127.0.0.1]:{port}",
        "0.0.0.0:{port}",
    ],
)  # loopback only, so that even a regression connects nowhere else (the other ranges: tests/tools/test_mcp.py)
def test_by_default_internal_hosts_are_refused_and_nothing_is_read(
    serve: Serve, internal: InternalService, host: str
) -> None:
    # The report: with no --mcp-allowed-hosts, a tool pointed at an internal HTTP service answered 200 with
    # the service's JSON body inside the mcp_list_tools error.
    live = serve([ANSWER], mcp=McpOptions())
    url = f"http://{host.format(port=internal.port)}/mcp"
    response = post(live, {"model": MODEL, "input": "x", "tools": [calc(url)]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "tools[0].server_url" and "--mcp-allowed-hosts" in error["message"]
    assert InternalService.SECRET not in response.text and internal.requests == []


def test_by_default_a_name_that_resolves_inward_fails_its_listing_uniformly(
    serve: Serve, internal: InternalService, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return {"mcp.attacker.test": ["127.0.0.1"], "mixed.attacker.test": ["93.184.215.14", "10.0.0.1"]}[host]

    monkeypatch.setattr(_guard, "_resolve", resolve)  # the attacker's DNS, answering with inward addresses
    recorder = Recorder([ANSWER, ANSWER])
    live = serve(recorder.engine, mcp=McpOptions())
    for name in ["mcp.attacker.test", "mixed.attacker.test"]:
        response = post(live, {"model": MODEL, "input": "x", "tools": [calc(f"http://{name}:{internal.port}/mcp")]})
        message = listing_failed(response)
        assert message == f"Error retrieving tool list from MCP server: 'calc'. {UNIFORM_FAILURE['message']}"
    assert recorder.prompts == []
    assert internal.requests == []  # never connected: the addresses were checked first


def test_the_clients_host_header_is_not_forwarded(serve: Serve, internal: InternalService) -> None:
    live = serve([ANSWER])
    headers = {"Host": "metadata.google.internal", "X-Probe": "1"}
    listing_failed(
        post(live, {"model": MODEL, "input": "x", "tools": [calc(internal.url, headers=headers)]})
    )  # not MCP
    assert internal.requests, "the listed host was not reached"
    for request in internal.requests:
        assert request["host"] == f"127.0.0.1:{internal.port}" and request["x-probe"] == "1"


APPROVAL = "tools[0].require_approval"


@pytest.mark.parametrize(
    ("tool", "param", "code"),
    [
        ({"type": "mcp", "server_url": "http://x"}, "tools[0].server_label", "missing_required_parameter"),
        ({"type": "mcp", "server_label": "a b", "server_url": "http://x"}, "tools[0].server_label", "invalid_value"),
        ({"type": "mcp", "server_label": "a", "connector_id": "gmail"}, "tools[0].connector_id", "invalid_value"),
        ({"type": "mcp", "server_label": "a", "server_url": 3}, "tools[0].server_url", "invalid_type"),
        (calc("http://x", headers={"k": 1}), "tools[0].headers.k", "invalid_type"),
        (calc("http://x", allowed_tools="add"), "tools[0].allowed_tools", "invalid_type"),
        (calc("http://x", allowed_tools={"read_only": "yes"}), "tools[0].allowed_tools.read_only", "invalid_type"),
        (calc("http://x", require_approval="sometimes"), "tools[0].require_approval", "invalid_value"),
        (calc("x", require_approval={"never": {"tool_names": "x"}}), f"{APPROVAL}.never.tool_names", "invalid_type"),
    ],
)  # fmt: skip
def test_mcp_tool_validation(shared_server: Any, tool: dict[str, Any], param: str, code: str) -> None:
    response = post(shared_server, {"model": MODEL, "input": "x", "tools": [tool]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["code"]) == (param, code)


# ---------------------------------------------------------------------------------------------- Agents SDK


@pytest.mark.parametrize("approve", [True, False])
def test_agents_sdk_hosted_mcp_tool_with_approvals(serve: Serve, mcp_server: McpServerProcess, approve: bool) -> None:
    agents.set_tracing_disabled(True)  # otherwise the SDK uploads traces to OpenAI
    answer = "Saved." if approve else "Not saved."
    recorder = Recorder([NOTE, f"<|channel|>final<|message|>{answer}<|return|>"])
    live = serve(recorder.engine)
    asked: list[Any] = []

    def on_approval(request: Any) -> Any:
        asked.append(request.data)
        return {"approve": approve, "reason": None if approve else "No."}

    async def main() -> Any:
        async with async_openai_client(live) as client:
            tool = HostedMCPTool(
                tool_config={"type": "mcp", "server_label": "calc", "server_url": mcp_server.url},
                on_approval_request=on_approval,
            )
            agent = Agent(name="notes", tools=[tool], model=OpenAIResponsesModel(model=MODEL, openai_client=client))
            return await Runner.run(agent, "Save a note.")

    result = asyncio.run(main())
    assert [(r.name, r.server_label) for r in asked] == [("save_note", "calc")]
    assert result.final_output == answer
    last = recorder.prompts[-1]
    if approve:
        assert "Saved note 'n1'" in tool_message(last, "calc.save_note")
    else:
        assert tool_message(last, "calc.save_note").startswith("The user declined this call")
