"""Custom tools' grammars reach the engines that can constrain a call's input, as what those engines enforce.

Through our real server and each adapter's fake: the request body the engine receives is read back (its
grammar as a regex, tests/engine/ebnf.py) and judged on the text the model would write, ``{"input": …}``
after the call's header, so that a test fails when a valid input would be refused or an invalid one let
through. The real engines enforcing them: tests/real_engines/.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
import pytest

from real_engines.grammars import APPLY_PATCH, TICKET

from .ebnf import accepts
from .fakes import LlamaCppFake, Scenario, SGLangFake, VLLMFake, harmony
from .helpers import per_tool_stack, stack

# The regex anchored, with a class escape: both as Python's re reads them.
TICKET = {**TICKET, "format": {"type": "grammar", "syntax": "regex", "definition": r"^[A-Z]{2,4}-\d+$"}}
NOTE = {"type": "custom", "name": "note", "description": "Free text.", "format": {"type": "text"}}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}
TEXT_FORMAT = {"format": {"type": "json_schema", "name": "thing", "schema": SCHEMA, "strict": True}}

PATCH = (
    '*** Begin Patch\n*** Add File: docs/a "b".txt\n+Hello\tworld \\o/\n+\n*** Update File: src/x.py\n'
    "@@ def f():\n-    return 1\n+    return 2\n*** End Patch\n"
)
NOT_A_PATCH = "diff --git a/x b/x\n+oops\n"
HEADER = "<|channel|>commentary to=functions.{} <|constrain|>json<|message|>"
CALL = "<|channel|>analysis<|message|>Patch it.<|end|><|start|>assistant" + HEADER.format("apply_patch")
CALL += json.dumps({"input": PATCH}) + "<|call|>"


def call_json(text: str, **dump: Any) -> str:
    return json.dumps({"input": text}, **dump)


def tag_of(body: dict[str, Any], kind: str) -> dict[str, Any]:
    raw = body["structured_outputs"]["structural_tag"] if kind == "vllm" else body["sampling_params"]["structural_tag"]
    return orjson.loads(raw)  # type: ignore[no-any-return]


def tags_by_begin(tag: dict[str, Any]) -> dict[str, dict[str, Any]]:
    fmt = tag["format"]
    assert fmt["type"] == "triggered_tags"
    tags = {t["begin"]: t for t in fmt["tags"]}
    for trigger in fmt["triggers"]:  # each tag is reached by its own trigger
        assert sum(begin.startswith(trigger) for begin in tags) == 1
    return tags


def tool_grammar(tag: dict[str, Any]) -> str:
    """The grammar a tool's tag holds the input to (after the header, when the tag has one)."""
    content = tag["content"]
    if content["type"] == "sequence":
        header, content = content["elements"]
        assert header == {"type": "tag", "begin": "", "content": {"type": "any_text"}, "end": "<|message|>"}
    assert content["type"] == "grammar" and tag["end"] == ""
    return content["grammar"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_structural_tag_holds_each_grammar_tool_from_its_call_header(kind: str) -> None:
    fake = (VLLMFake if kind == "vllm" else SGLangFake)(Scenario(tokens=harmony(CALL)))
    with per_tool_stack(kind, fake) as s:
        response = s.post({"input": "Fix it", "tools": [APPLY_PATCH, TICKET, NOTE], "text": TEXT_FORMAT}).json()
        assert response["status"] == "completed"
        assert [(i["type"], i.get("input")) for i in response["output"]][-1] == ("custom_tool_call", PATCH)
        tags = tags_by_begin(tag_of(s.fake.requests[0], kind))
    # Every way a header can go on after the recipient, for the two grammar tools; none for the text tool.
    afters = (" ", "<|channel|>", "<|constrain|>", "<|message|>")
    expected = {f"to=functions.{name}{after}" for name in ("apply_patch", "ticket") for after in afters}
    assert set(tags) == expected | {"<|channel|>final<|message|>"}
    assert tags["<|channel|>final<|message|>"]["content"] == {"type": "json_schema", "json_schema": SCHEMA}
    patch = tool_grammar(tags["to=functions.apply_patch "])
    assert tool_grammar(tags["to=functions.apply_patch<|message|>"]) == patch
    assert accepts(patch, call_json(PATCH))
    assert accepts(patch, call_json(PATCH, ensure_ascii=False, separators=(",", ":")))
    assert accepts(patch, call_json(PATCH).replace("\\n", "\\u000a"))  # another way JSON writes a newline
    assert not accepts(patch, call_json(NOT_A_PATCH))
    assert not accepts(patch, call_json(PATCH.replace("*** End Patch\n", "")))
    assert not accepts(patch, '{"input": "*** Begin Patch\n"}')  # a raw newline is no JSON
    assert not accepts(patch, '{"patch": ' + json.dumps(PATCH) + "}")
    ticket = tool_grammar(tags["to=functions.ticket<|channel|>"])
    assert accepts(ticket, call_json("ABC-123")) and accepts(ticket, call_json("XY-7"))
    assert not accepts(ticket, call_json("abc-123")) and not accepts(ticket, call_json("ABCDE-1"))
    assert not accepts(ticket, call_json("AB-12\n"))


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_forced_and_required_tool_choice(kind: str) -> None:
    fake_class = VLLMFake if kind == "vllm" else SGLangFake
    forced = harmony(call_json("OPS-42") + "<|call|>")
    required = harmony("ticket <|constrain|>json<|message|>" + call_json("OPS-42") + "<|call|>")
    with per_tool_stack(kind, fake_class(Scenario(tokens=forced), Scenario(tokens=required))) as s:
        choice = {"type": "custom", "name": "ticket"}
        response = s.post({"input": "Open one", "tools": [APPLY_PATCH, TICKET], "tool_choice": choice}).json()
        assert response["output"][-1]["input"] == "OPS-42"
        response = s.post({"input": "Open one", "tools": [APPLY_PATCH, TICKET], "tool_choice": "required"}).json()
        assert response["output"][-1]["input"] == "OPS-42"
        first, second = (tag_of(body, kind) for body in s.fake.requests)
    # The prompt ends with the call's header: the input is held to the grammar from the first token.
    grammar, rest = first["format"]["elements"]
    assert rest == {"type": "any_text"}
    assert accepts(grammar["grammar"], call_json("OPS-42")) and not accepts(grammar["grammar"], call_json("ops"))
    # The prompt ends with "to=functions.": the tags begin with the name.
    tags = tags_by_begin(second)
    assert "ticket " in tags and "apply_patch<|message|>" in tags
    assert accepts(tool_grammar(tags["ticket "]), call_json("OPS-42"))


def test_llamacpp_lazy_grammar_triggers_at_the_call() -> None:
    with per_tool_stack("llamacpp", LlamaCppFake(Scenario(tokens=harmony(CALL)))) as s:
        response = s.post({"input": "Fix it", "tools": [APPLY_PATCH, TICKET, NOTE]}).json()
        assert response["output"][-1]["input"] == PATCH
        sent = s.fake.requests[0]
    assert sent["grammar_lazy"] is True
    patterns = [t["value"] for t in sent["grammar_triggers"]]
    assert all(t["type"] == 2 for t in sent["grammar_triggers"])  # llama.cpp's PATTERN and len(patterns) == 2
    grammar = sent["grammar"]

    def constrained(generated: str) -> str | None:
        """What llama.cpp holds to the grammar: from the first capture group of the first trigger that matches."""
        for pattern in patterns:
            m = re.search(pattern, generated)
            if m:
                return generated[m.start(1) :]
        return None

    analysis = "<|channel|>analysis<|message|>I will use apply_patch now.<|end|><|start|>assistant"
    patch_call = constrained(analysis + HEADER.format("apply_patch"))
    assert patch_call == "to=functions.apply_patch <|constrain|>json<|message|>"
    assert accepts(grammar, patch_call + call_json(PATCH))
    assert not accepts(grammar, patch_call + call_json(NOT_A_PATCH))
    recipient_first = constrained(analysis + " to=functions.ticket<|channel|>commentary json<|message|>")
    assert recipient_first is not None
    assert accepts(grammar, recipient_first + call_json("AB-1")) and not accepts(grammar, recipient_first + "{}")
    # Free text, another tool, a tool whose name only begins like one: nothing is constrained.
    assert constrained(analysis + "<|channel|>final<|message|>Use apply_patch.") is None
    assert constrained(analysis + HEADER.format("note") + call_json("x")) is None
    assert constrained(analysis + HEADER.format("ticket_v2") + call_json("x")) is None


def test_llamacpp_forced_call_is_constrained_from_the_first_token() -> None:
    forced = harmony(call_json(PATCH) + "<|call|>")
    with stack("llamacpp", LlamaCppFake(Scenario(tokens=forced))) as s:
        choice = {"type": "custom", "name": "apply_patch"}
        response = s.post({"input": "Fix it", "tools": [APPLY_PATCH, TICKET], "tool_choice": choice}).json()
        assert response["output"][-1]["input"] == PATCH
        sent = s.fake.requests[0]
    assert "grammar_lazy" not in sent and "grammar_triggers" not in sent
    assert accepts(sent["grammar"], call_json(PATCH)) and not accepts(sent["grammar"], call_json(NOT_A_PATCH))


UNCONSTRAINED = [
    pytest.param([NOTE], id="text-format"),
    pytest.param(
        [{**TICKET, "format": {"type": "grammar", "syntax": "regex", "definition": r"(a+)\1"}}], id="backreference"
    ),
    pytest.param(
        [{**APPLY_PATCH, "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "a"+\n%ignore " "'}}],
        id="lark-ignore",
    ),
    pytest.param(
        [{**APPLY_PATCH, "format": {"type": "grammar", "syntax": "lark", "definition": "start: ("}}], id="not-lark"
    ),
]


@pytest.mark.parametrize("tools", UNCONSTRAINED)
@pytest.mark.parametrize("kind", ["vllm", "sglang", "llamacpp"])
def test_what_cannot_be_constrained_is_sent_unconstrained(kind: str, tools: list[dict[str, Any]]) -> None:
    fakes = {"vllm": VLLMFake, "sglang": SGLangFake, "llamacpp": LlamaCppFake}
    answer = harmony("<|channel|>final<|message|>Done.<|return|>")
    with per_tool_stack(kind, fakes[kind](Scenario(tokens=answer), Scenario(tokens=answer))) as s:
        assert s.post({"input": "Hi", "tools": tools}).json()["status"] == "completed"
        assert s.post({"input": "Hi", "tools": [APPLY_PATCH], "tool_choice": "none"}).json()["status"] == "completed"
        for sent in s.fake.requests:
            sampling = sent.get("sampling_params", sent)
            assert "structured_outputs" not in sampling and "structural_tag" not in sampling and "grammar" not in sent


@pytest.mark.parametrize("kind", ["vllm", "sglang", "llamacpp"])
def test_an_engine_refusing_the_grammars_keeps_the_schema(kind: str) -> None:
    # An older engine that does not take the tools' structural tag (the newer format) still gets the schema's.
    fakes = {"vllm": VLLMFake, "sglang": SGLangFake, "llamacpp": LlamaCppFake}
    final = harmony('<|channel|>final<|message|>{"a": 1}<|return|>')
    refusal = Scenario(status=400, message="unknown structural tag format")
    body = {"input": "Hi", "tools": [APPLY_PATCH], "text": TEXT_FORMAT}
    with per_tool_stack(kind, fakes[kind](refusal, Scenario(tokens=final), Scenario(tokens=final))) as s:
        assert s.post(body).json()["status"] == "completed"
        assert s.post(body).json()["status"] == "completed"
        first, retried, later = s.fake.requests
    if kind == "llamacpp":
        assert "grammar" in first and "grammar" not in retried and "grammar" not in later
        return
    assert any(t["begin"].startswith("to=functions.") for t in tag_of(first, kind)["format"]["tags"])
    for sent in (retried, later):  # the schema alone, as before the tools' grammars
        assert tag_of(sent, kind)["structures"][0]["begin"] == "<|channel|>final<|message|>"
