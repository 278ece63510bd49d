"""A traced response's trace, end to end: a real server, the openai client, a scripted or fake HTTP engine.

What a user debugging a response relies on: the trace lists exactly the events the client was sent, each
under the token that caused it; its prompt tokens are the ones the engine was given; the tool call and the
recovered malformed header are in it; and it is the caller's alone.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
from websockets.sync.client import connect

from api.helpers import MODEL, openai_client, post, sse_events
from engine.fakes import Scenario, VLLMFake, harmony
from engine.helpers import stack

from .helpers import ANSWER, MALFORMED_SEARCH, WEB_SEARCH, Servers, trace_json

BODY = {"model": MODEL, "input": "How tall is Etna?", "tools": [WEB_SEARCH], "stream": True}


def test_the_trace_holds_exactly_the_events_the_client_received(servers: Servers, docs: Path) -> None:
    live = servers.start([MALFORMED_SEARCH, ANSWER], trace=True, search_dir=str(docs))
    client = openai_client(live)
    stream = client.responses.create(
        model=MODEL,
        input="How tall is Etna?",
        tools=[WEB_SEARCH],
        stream=True,  # type: ignore[list-item]
    )
    received = [event.model_dump(mode="json", exclude_unset=True, warnings=False) for event in stream]
    response_id = received[-1]["response"]["id"]
    answer = trace_json(live, response_id)
    assert answer.status_code == 200, answer.text
    trace = answer.json()
    traced = [entry["event"] for entry in trace["events"]]
    assert [(e["type"], e["sequence_number"]) for e in traced] == [(e["type"], e["sequence_number"]) for e in received]
    assert traced == received  # the same events, field for field, as the openai client parsed them
    assert not trace["truncated"]


def test_each_event_is_under_the_token_that_caused_it(servers: Servers, docs: Path) -> None:
    live = servers.start([MALFORMED_SEARCH, ANSWER], trace=True, search_dir=str(docs))
    sent = sse_events(post(live, BODY).content)
    trace = trace_json(live, sent[-1]["response"]["id"]).json()
    assert [entry["event"] for entry in trace["events"]] == sent  # byte for byte as JSON, too
    tokens = {token["i"]: token for token in trace["tokens"]}
    by_seq = {entry["seq"]: entry for entry in trace["events"]}
    deltas = [e for e in sent if e["type"] == "response.output_text.delta"]
    assert "".join(d["delta"] for d in deltas) == "Etna is about 3,357 m tall."
    for delta in deltas:
        token = tokens[by_seq[delta["sequence_number"]]["token"]]
        assert token["text"] == delta["delta"]  # one text token, one delta
        assert delta["sequence_number"] in token["events"]
        assert (token["channel"], token["item"], token["call"]) == ("final", delta["item_id"], 1)
    # The header's tokens caused no event until <|message|> opened the item; the state shows the header read.
    opened = next(e for e in sent if e["type"] == "response.output_item.added" and e["item"]["type"] == "message")
    opener = tokens[by_seq[opened["sequence_number"]]["token"]]
    assert opener["text"] == "<|message|>"
    before = tokens[opener["i"] - 1]
    assert (before["state"], before["header"], before["events"]) == ("HEADER", "<|channel|>final", [])
    # Lifecycle events belong to no token.
    assert by_seq[0]["token"] is None and by_seq[len(sent) - 1]["token"] is None


def test_the_recovery_tool_call_and_engine_calls_are_traced(servers: Servers, docs: Path) -> None:
    live = servers.start([MALFORMED_SEARCH, ANSWER], trace=True, search_dir=str(docs))
    sent = sse_events(post(live, BODY).content)
    trace = trace_json(live, sent[-1]["response"]["id"]).json()
    [recovery] = trace["recoveries"]
    assert recovery["rule"] == "text_before_channel"
    covered = "".join(trace["tokens"][i]["text"] for i in recovery["tokens"])
    assert covered == "I should search first<|channel|>"  # the tokens the rule was applied to
    [tool] = trace["tools"]
    search = next(
        e["item"] for e in sent if e["type"] == "response.output_item.done" and e["item"]["type"] == "web_search_call"
    )
    assert (tool["item"], tool["name"], tool["input"]) == (search["id"], "search", '{"query": "Etna volcano height"}')
    assert "Etna stands about 3,357 metres tall" in tool["output"] and tool["error"] is None
    assert tool["duration"] >= 0
    first, second = trace["engine_calls"]
    assert first["ended"] <= tool["started"] <= tool["ended"] <= second["sent"]
    assert [first["finish"], second["finish"]] == ["stop", "stop"]
    assert sum(call["tokens"] for call in trace["engine_calls"]) == len(trace["tokens"])
    assert len(trace["tokens"]) == sent[-1]["response"]["usage"]["output_tokens"]


def test_prompt_tokens_and_request_body_are_the_engines() -> None:
    answer = harmony("<|channel|>final<|message|>Hi there<|return|>")
    with stack("vllm", VLLMFake(Scenario(tokens=answer, chunk=3)), trace=True) as s:
        body = {"model": MODEL, "input": "Hello", "stream": True, "include": ["message.output_text.logprobs"]}
        sent = sse_events(httpx.post(f"{s.base_url}/responses", json=body, timeout=30).content)
        trace = httpx.get(f"{s.base_url}/responses/{sent[-1]['response']['id']}/trace?format=json").json()
        [engine_request] = s.fake.requests
    prompt = engine_request["prompt"]
    assert [token for token, _ in trace["prompt"]["tokens"]] == prompt
    assert "".join(text for _, text in trace["prompt"]["tokens"]).startswith("<|start|>system<|message|>")
    assert trace["prompt"]["messages"][-1]["content"][0]["text"] == "Hello"
    [call] = trace["engine_calls"]
    assert call["body"] == {**engine_request, "prompt": {"tokens": len(prompt)}}
    assert call["request"]["prompt_tokens"] == len(prompt) == call["prompt_tokens"]
    assert call["sent"] <= call["admitted"] <= call["first_token"] <= call["ended"]
    # The chunks as the adapter delivered them (what the socket held at once): in order, one arrival time each.
    chunks = [t["chunk"] for t in trace["tokens"]]
    assert chunks == sorted(chunks) and chunks[0] == 0 and len(trace["tokens"]) == len(answer)
    assert all(len({t["t"] for t in trace["tokens"] if t["chunk"] == c}) == 1 for c in set(chunks))
    assert all(isinstance(t["logprob"], float) for t in trace["tokens"])


def test_a_trace_is_its_owners_alone(servers: Servers, docs: Path) -> None:
    live = servers.start([MALFORMED_SEARCH, ANSWER], trace=True, search_dir=str(docs), api_keys=("key-a", "key-b"))
    sent = sse_events(post(live, BODY, headers={"authorization": "Bearer key-a"}).content)
    response_id = sent[-1]["response"]["id"]
    assert trace_json(live, response_id, authorization="Bearer key-a").status_code == 200
    other = trace_json(live, response_id, authorization="Bearer key-b")
    assert other.status_code == 404
    assert other.json()["error"]["message"] == f"Response with id '{response_id}' not found."
    assert trace_json(live, response_id).status_code == 401


def test_off_by_default_and_the_header_only_where_the_operator_allows_it(servers: Servers) -> None:
    lines = [ANSWER] * 4
    plain = servers.start(lines)
    sent = sse_events(post(plain, {**BODY, "tools": []}, headers={"x-harmony-trace": "1"}).content)
    untraced = trace_json(plain, sent[-1]["response"]["id"])
    assert untraced.status_code == 404 and untraced.json()["error"]["code"] == "trace_not_found"
    assert "it was not traced (serve --trace" in untraced.json()["error"]["message"]

    allowing = servers.start(lines, trace_header=True)
    asked = sse_events(post(allowing, {**BODY, "tools": []}, headers={"x-harmony-trace": "1"}).content)
    assert trace_json(allowing, asked[-1]["response"]["id"]).status_code == 200
    not_asked = sse_events(post(allowing, {**BODY, "tools": []}).content)
    assert trace_json(allowing, not_asked[-1]["response"]["id"]).status_code == 404
    # A response that is not stored has nowhere to keep a trace: it is not traced.
    unstored = post(allowing, {**BODY, "tools": [], "stream": False, "store": False}, headers={"x-harmony-trace": "1"})
    gone = trace_json(allowing, unstored.json()["id"])
    assert gone.status_code == 404 and gone.json()["error"]["message"].endswith("not found.")


def test_a_trace_is_bounded(servers: Servers, docs: Path) -> None:
    live = servers.start([MALFORMED_SEARCH, ANSWER], trace=True, search_dir=str(docs), trace_max_bytes=20_000)
    sent = sse_events(post(live, BODY).content)
    answer = trace_json(live, sent[-1]["response"]["id"])
    trace = answer.json()
    assert trace["truncated"] and sum(trace["dropped"].values()) > 0
    assert len(orjson.dumps(trace)) < 3 * 20_000
    assert sent[-1]["type"] == "response.completed"  # the response itself is untouched


def test_the_page_or_the_json_as_asked(servers: Servers) -> None:
    live = servers.start([ANSWER], trace=True)
    sent = sse_events(post(live, {**BODY, "tools": []}).content)
    url = f"{live.base_url}/responses/{sent[-1]['response']['id']}/trace"
    as_json = httpx.get(url, params={"format": "json"}).json()
    page = httpx.get(url)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    # The page may load nothing from anywhere (its CSS and script are inline): the browser is told so.
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src" not in policy
    marker = '<script id="trace-data" type="application/json">'
    assert orjson.loads(page.text.split(marker, 1)[1].split("</script>", 1)[0]) == as_json
    assert httpx.get(url, headers={"accept": "application/json"}).json() == as_json
    assert (
        httpx.get(url, headers={"accept": "text/html,application/json"}).headers["content-type"].startswith("text/html")
    )
    bad = httpx.get(url, params={"format": "xml"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "format"


def test_a_response_failed_on_bad_harmony_is_traced_with_the_failure(servers: Servers) -> None:
    # Words after the channel and <|end|> with nothing after: the header is dropped, then the output ends.
    live = servers.start([{"harmony": "<|channel|>final Hello there<|end|>", "finish": "stop"}], trace=True)
    sent = sse_events(post(live, {"model": MODEL, "input": "Hi", "stream": True}).content)
    assert sent[-1]["response"]["status"] == "failed"
    trace = trace_json(live, sent[-1]["response"]["id"]).json()
    assert [e["event"] for e in trace["events"]] == sent
    assert [r["rule"] for r in trace["recoveries"]] == ["words_in_header", "not_recovered"]
    dropped = trace["recoveries"][0]
    assert "".join(trace["tokens"][i]["text"] for i in dropped["tokens"]) == "<|channel|>final Hello there<|end|>"
    assert [e["event"]["type"] for e in trace["events"]][-2:] == ["error", "response.failed"]
    [call] = trace["engine_calls"]
    assert call["finish"] == "stop" and call["ended"] is not None


def test_a_json_answer_is_traced_as_a_stream_is(servers: Servers, docs: Path) -> None:
    live = servers.start([MALFORMED_SEARCH, ANSWER], trace=True, search_dir=str(docs))
    answer = post(live, {**BODY, "stream": False})
    assert answer.status_code == 200, answer.text
    trace = trace_json(live, answer.json()["id"]).json()
    assert trace["events"][-1]["event"]["response"] == answer.json()  # the end of what it would have streamed
    assert [r["rule"] for r in trace["recoveries"]] == ["text_before_channel"] and len(trace["tools"]) == 1


def test_websocket_mode_asks_for_traces_with_the_handshake_header(servers: Servers) -> None:
    live = servers.start([ANSWER, ANSWER], trace_header=True)
    url = live.base_url.replace("http://", "ws://") + "/responses"

    def one(headers: dict[str, str]) -> list[dict]:
        with connect(url, additional_headers=headers) as socket:
            socket.send(orjson.dumps({"type": "response.create", "model": MODEL, "input": "Hi"}).decode())
            events = []
            while not events or events[-1]["type"] != "response.completed":
                events.append(orjson.loads(socket.recv(timeout=20)))
        return events

    asked = one({"x-harmony-trace": "1"})
    trace = trace_json(live, asked[-1]["response"]["id"])
    assert trace.status_code == 200 and [e["event"] for e in trace.json()["events"]] == asked
    assert trace_json(live, one({})[-1]["response"]["id"]).status_code == 404


def test_a_forced_calls_prefilled_header_is_traced_token_by_token(servers: Servers) -> None:
    live = servers.start(['{"city": "Paris"}<|call|>'], trace=True)
    weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    body = {**BODY, "tools": [weather], "tool_choice": {"type": "function", "name": "get_weather"}}
    sent = sse_events(post(live, body).content)
    trace = trace_json(live, sent[-1]["response"]["id"]).json()
    assert [e["event"] for e in trace["events"]] == sent
    prefilled = [t for t in trace["tokens"] if t.get("prefill")]
    assert [[t["id"], t["text"]] for t in prefilled] == trace["prompt"]["prefill"]
    assert (
        "".join(t["text"] for t in prefilled)
        == "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    )
    added = next(e for e in trace["events"] if e["event"]["type"] == "response.output_item.added")
    assert added["token"] == prefilled[-1]["i"]  # the prompt's <|message|> opened the call's item
    generated = [t for t in trace["tokens"] if not t.get("prefill")]
    assert len(generated) == sent[-1]["response"]["usage"]["output_tokens"] == trace["engine_calls"][0]["tokens"]


def test_a_compactions_summary_call_is_an_engine_call_of_its_own(servers: Servers) -> None:
    summary = "The user asked how tall Etna is."
    answer = "<|channel|>final<|message|>About 3,357 m.<|return|>"
    live = servers.start([summary + "<|return|>", answer], trace=True)
    conversation = [
        {"role": "user", "content": "How tall is Etna?"},
        {"role": "assistant", "content": "Let me think about Etna's height."},
        {"role": "user", "content": "In metres, please."},
    ]
    stream = openai_client(live).responses.create(
        model=MODEL,
        input=conversation,  # type: ignore[arg-type]
        context_management=[{"type": "compaction", "compact_threshold": 20}],
        stream=True,
    )
    received = [event.model_dump(mode="json", exclude_unset=True, warnings=False) for event in stream]
    final = received[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["compaction", "message"]
    trace = trace_json(live, final["id"]).json()
    assert [entry["event"] for entry in trace["events"]] == received
    compaction, answered = trace["engine_calls"]
    assert (compaction["purpose"], answered["purpose"]) == ("compaction", "response")
    # The summary's own prompt (the conversation and the request for a summary), timing and generated tokens.
    assert compaction["prompt"]["count"] == compaction["request"]["prompt_tokens"] == compaction["prompt_tokens"]
    assert "".join(text for _, text in compaction["prompt"]["tokens"]).count("How tall is Etna?") == 1
    generated = [t for t in compaction["generated"] if not t.get("prefill")]
    assert "".join(t["text"] for t in generated) == summary + "<|return|>"
    assert compaction["tokens"] == len(generated) and compaction["finish"] == "stop"
    assert compaction["sent"] <= compaction["first_token"] <= compaction["ended"] <= answered["sent"]
    # The answer's timeline holds only the answer's tokens, from the compacted prompt it was given.
    assert "".join(t["text"] for t in trace["tokens"]) == answer and {t["call"] for t in trace["tokens"]} == {1}
    assert trace["prompt"]["count"] == answered["request"]["prompt_tokens"]
    usage = final["usage"]
    assert usage["input_tokens"] == compaction["prompt_tokens"] + answered["prompt_tokens"]
    assert usage["output_tokens"] == compaction["tokens"] + answered["tokens"]


def test_a_response_the_engine_failed_mid_stream_keeps_its_tokens_and_the_error() -> None:
    answer = harmony("<|channel|>final<|message|>Etna is about 3,357 m tall.<|return|>")
    # The engine's connection is cut after 5 tokens: the response fails there, in-band.
    with stack("vllm", VLLMFake(Scenario(tokens=answer, chunk=1, drop_after=5)), trace=True) as s:
        body = {"model": MODEL, "input": "How tall is Etna?", "stream": True}
        sent = sse_events(httpx.post(f"{s.base_url}/responses", json=body, timeout=30).content)
        assert sent[-1]["type"] == "response.failed"
        answer_ = httpx.get(f"{s.base_url}/responses/{sent[-1]['response']['id']}/trace?format=json")
    assert answer_.status_code == 200, answer_.text
    trace = answer_.json()
    assert [e["event"] for e in trace["events"]] == sent
    assert [t["id"] for t in trace["tokens"]] == answer[:5]  # the tokens up to the failure
    [call] = trace["engine_calls"]
    assert call["finish"] == "error" and call["ended"] is not None and call["tokens"] == 5
    failed = trace["events"][-1]["event"]["response"]
    assert failed["status"] == "failed" and failed["error"]["message"]


def test_a_compaction_trigger_response_is_traced_with_its_summary_call(servers: Servers) -> None:
    summary = "The user asked how tall Etna is."
    live = servers.start([summary + "<|return|>"], trace=True)
    body = {"model": MODEL, "input": [{"role": "user", "content": "How tall is Etna?"}, {"type": "compaction_trigger"}]}
    sent = sse_events(post(live, {**body, "stream": True}).content)
    assert [item["type"] for item in sent[-1]["response"]["output"]] == ["compaction"]
    trace = trace_json(live, sent[-1]["response"]["id"]).json()
    assert [e["event"] for e in trace["events"]] == sent
    [call] = trace["engine_calls"]  # the response makes no engine call but the summary's
    assert call["purpose"] == "compaction" and call["prompt"]["count"] == call["prompt_tokens"] > 0
    assert "".join(t["text"] for t in call["generated"] if not t.get("prefill")) == summary + "<|return|>"
    assert trace["tokens"] == [] and trace["prompt"]["count"] == 0
