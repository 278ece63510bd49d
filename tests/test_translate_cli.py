"""``harmony-responses translate``, run as a user runs it: the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXE = shutil.which("harmony-responses", path=str(Path(sys.executable).parent))

ANSWER = "<|channel|>analysis<|message|>Add them.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>"


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    assert EXE is not None, "the console script is not installed next to this Python"
    return subprocess.run([EXE, "translate", *args], input=stdin, capture_output=True, text=True, timeout=60)


def jsonl(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_sse_output_is_the_servers_framing() -> None:
    result = run(stdin=ANSWER + "\n")
    assert result.returncode == 0, result.stderr
    blocks = result.stdout.split("\n\n")
    assert blocks[-1] == ""  # ends with a blank line
    events = []
    for block in blocks[:-1]:
        event_line, data_line = block.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {data['type']}"
        events.append(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    assert [i["type"] for i in events[-1]["response"]["output"]] == ["reasoning", "message"]
    assert events[-1]["response"]["output"][1]["content"][0]["text"] == "4"
    assert "\r" not in result.stdout and "id:" not in result.stdout


def test_jsonl_from_a_file_with_stable_ids(tmp_path: Path) -> None:
    path = tmp_path / "completion.txt"
    path.write_text(ANSWER)
    first = run(str(path), "--format", "jsonl", "--stable-ids")
    second = run(str(path), "--format", "jsonl", "--stable-ids", "--chunk", "7")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout  # chunking never changes the events
    events = jsonl(first.stdout)
    assert events[-1]["response"]["output"][0]["id"] == "rs_2"


def test_summaries_stream_the_reasoning_as_its_summary() -> None:
    result = run("--format", "jsonl", "--stable-ids", "--summaries", stdin=ANSWER)
    assert result.returncode == 0, result.stderr
    events = jsonl(result.stdout)
    reasoning = events[-1]["response"]["output"][0]
    assert reasoning["summary"] == [{"type": "summary_text", "text": reasoning["content"][0]["text"]}]
    assert "response.reasoning_summary_text.delta" in [e["type"] for e in events]


def test_tokens_input_and_a_length_cut() -> None:
    # <|channel|>final<|message|>Hello — no <|return|>: ends as a length cut.
    result = run("--tokens", "--format", "jsonl", stdin="[200005, 17196, 200008, 13225]")
    assert result.returncode == 0, result.stderr
    events = jsonl(result.stdout)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert events[-1]["response"]["output"][0]["status"] == "incomplete"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hello"


def test_finish_error_ends_failed() -> None:
    result = run("--format", "jsonl", "--finish", "error", "--error-message", "GPU fell over", stdin="<|channel|>final")
    events = jsonl(result.stdout)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert "GPU fell over" in events[-1]["response"]["error"]["message"]


def test_tools_map_builtin_recipients_and_say_the_tool_did_not_run() -> None:
    completion = "<|channel|>analysis to=python code<|message|>print(1+1)<|call|>"
    result = run("--format", "jsonl", "--tools", '[{"type": "code_interpreter"}]', stdin=completion)
    assert result.returncode == 0, result.stderr
    events = jsonl(result.stdout)
    types = [e["type"] for e in events]
    assert "response.code_interpreter_call_code.delta" in types
    assert types.index("response.code_interpreter_call.interpreting") > types.index(
        "response.code_interpreter_call_code.done"
    )
    call = events[-1]["response"]["output"][0]
    assert call["type"] == "code_interpreter_call" and call["code"] == "print(1+1)"
    assert "does not run tools" in result.stderr
    # Without the declaration the same recipient is surfaced as a function call named as written.
    undeclared = jsonl(run("--format", "jsonl", stdin=completion).stdout)
    assert undeclared[-1]["response"]["output"][0] | {"id": None, "call_id": None} == {
        "id": None,
        "call_id": None,
        "type": "function_call",
        "status": "completed",
        "name": "python",
        "arguments": "print(1+1)",
    }


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["--tokens"], "[1, 2", "--tokens expects a JSON array of token ids"),
        (["--tokens"], '["a"]', "JSON array of integers"),
        (["--tokens"], "[999999999]", "outside the Harmony vocabulary"),
        (["--tools", "{not json"], ANSWER, "--tools expects a JSON array"),
        (["--tools", "[1]"], ANSWER, "array of tool objects"),
        (["/nonexistent/completion.txt"], "", "cannot read /nonexistent/completion.txt"),
        (["--chunk", "0"], ANSWER, "--chunk must be at least 1"),
    ],
)
def test_bad_input_gets_one_line_and_exit_status_2(args: list[str], stdin: str, message: str) -> None:
    result = run(*args, stdin=stdin)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
