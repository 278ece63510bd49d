"""Codex CLI (``@openai/codex``, pinned in package.json) driving the real server with a scripted model.

Each test gives Codex a fresh ``CODEX_HOME`` whose ``config.toml`` points a custom provider
(``wire_api = "responses"``) at the server, with retries off so that a server error shows at once, and runs
``codex exec`` non-interactively (stdin from /dev/null) in an empty temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.fakes import Scenario, VLLMFake, harmony, run_fake
from guide import page
from harmony_responses.render._compaction import SUMMARY_INSTRUCTION, SUMMARY_PREFIX
from harmony_responses.vocab import load_encoding

from .conftest import MODEL, RecordingProxy

CODEX_TIMEOUT = 90  # seconds for one `codex exec`; each of these runs takes 1-3 s

CONFIG_TOML = """\
model = "{model}"
model_provider = "harmony"

[model_providers.harmony]
name = "harmony-responses"
base_url = "{base_url}/v1"
env_key = "HARMONY_TEST_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 20000
"""

ANSWER = {"harmony": "<|channel|>analysis<|message|>The user wants one word.<|end|>"
          "<|start|>assistant<|channel|>final<|message|>ready<|return|>"}  # fmt: skip


@dataclass
class CodexRun:
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"exit {self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"


# Codex's built-in provider pointed at the server, as most users set it up: it speaks WebSocket mode
# (OpenAI-Beta: responses_websockets=…) first, warming the connection up with a `generate: false` request.
BUILTIN_CONFIG_TOML = """\
model = "{model}"
openai_base_url = "{base_url}/v1"
"""


# The model catalog the guide points Codex at (`model_catalog_json`), so that Codex does not fall back to generic
# metadata: every test that sets it runs the shipped file. Codex >= 0.131 requires such an entry to declare
# apply_patch as a freeform (custom) tool.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODEL_CATALOG = json.loads((EXAMPLES / "codex-models.json").read_text())
CATALOG_LINE = 'model_catalog_json = "{home}/catalog.json"\n'


def _clean_env(home: Path) -> dict[str, str]:
    """The environment less the developer's own Codex, OpenAI and harmony settings, with ``home`` as CODEX_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEX_", "OPENAI_", "HARMONY_", "RUST_LOG"))}
    return env | {"CODEX_HOME": str(home), "NO_COLOR": "1"}


@pytest.fixture
def run_codex(codex: Path, tmp_path: Path) -> Callable[..., CodexRun]:
    """``run_codex(base_url, prompt, config=CONFIG_TOML, *options, keys=None)``: one ``codex exec`` against the
    server at ``base_url``; ``keys``: the API key variables Codex gets (default: a test key in each it may read)."""

    def _run(
        base_url: str, prompt: str, config: str = CONFIG_TOML, *options: str, keys: dict[str, str] | None = None
    ) -> CodexRun:
        home = tmp_path / "codex-home"
        home.mkdir(exist_ok=True)
        (home / "config.toml").write_text(config.format(model=MODEL, base_url=base_url, home=home))
        (home / "catalog.json").write_text(json.dumps(MODEL_CATALOG))
        workdir = tmp_path / "work"
        workdir.mkdir(exist_ok=True)
        # Nothing from the developer's own Codex or OpenAI setup leaks in.
        env = _clean_env(home)
        env |= {"HARMONY_TEST_KEY": "test-key", "OPENAI_API_KEY": "test-key"} if keys is None else keys
        # Codex prefers a bwrap on PATH to the one it ships; Debian's (0.8, installed for our code interpreter)
        # is too old for it ("execvp codex-linux-sandbox"). Put Codex's own first, as on a machine without one.
        modules = Path(__file__).resolve().parents[2] / "node_modules" / "@openai"
        bundled = next(modules.glob("codex-linux-*/vendor/*/codex-resources"), None)
        if bundled is not None:
            env["PATH"] = f"{bundled}{os.pathsep}{env.get('PATH', '')}"
        proc = subprocess.run(
            [
                str(codex),
                "exec",
                "--skip-git-repo-check",
                "--ephemeral",
                "--strict-config",
                "--color",
                "never",
                *options,
                prompt,
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            cwd=workdir,
            env=env,
            timeout=CODEX_TIMEOUT,
        )
        return CodexRun(proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))

    return _run


def test_codex_direct_answer(serve, replay_script, recording_proxy, run_codex) -> None:
    server = serve(replay_script([ANSWER]))
    proxy: RecordingProxy = recording_proxy(server)

    run = run_codex(proxy.base_url, "Reply with the single word: ready")

    assert run.returncode == 0, run
    assert run.stdout.strip().splitlines()[-1] == "ready", run
    [body] = proxy.bodies()
    assert body["model"] == MODEL
    assert body["stream"] is True
    assert body["input"][-1]["content"][-1]["text"] == "Reply with the single word: ready"
    # The server accepted all the tool types Codex declares.
    assert {tool["type"] for tool in body["tools"]} >= {"function", "namespace", "web_search"}


def test_codex_runs_shell_tool_then_answers(serve, replay_script, recording_proxy, run_codex) -> None:
    script = replay_script(
        [
            {
                "harmony": "<|channel|>analysis<|message|>I should run echo.<|end|>"
                "<|start|>assistant<|channel|>commentary to=functions.exec_command <|constrain|>json"
                '<|message|>{"cmd": "echo hi-from-tool"}<|call|>',
                "chunk": 3,
            },
            {
                "harmony": "<|channel|>analysis<|message|>The command printed hi-from-tool.<|end|>"
                "<|start|>assistant<|channel|>final<|message|>The tool said hi-from-tool.<|return|>",
                "chunk": 2,
            },
        ]
    )
    proxy: RecordingProxy = recording_proxy(serve(script))

    run = run_codex(proxy.base_url, "Run `echo hi-from-tool` and tell me what it printed.")

    assert run.returncode == 0, run
    assert run.stdout.strip().splitlines()[-1] == "The tool said hi-from-tool.", run

    # Codex really ran the command and sent its output back on the second turn, after replaying our
    # reasoning and function call with the ids we streamed.
    first, second = proxy.bodies()
    assert "exec_command" in json.dumps(first["tools"])
    new_items = second["input"][len(first["input"]) :]
    by_type = {item["type"]: item for item in new_items}
    assert set(by_type) >= {"reasoning", "function_call", "function_call_output"}, new_items
    call, output = by_type["function_call"], by_type["function_call_output"]
    assert call["name"] == "exec_command"
    assert json.loads(call["arguments"]) == {"cmd": "echo hi-from-tool"}
    assert output["call_id"] == call["call_id"]
    text = output["output"] if isinstance(output["output"], str) else json.dumps(output["output"])
    assert "hi-from-tool" in text and "exited with code 0" in text, output
    reasoning = by_type["reasoning"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "I should run echo."}]
    # Codex asks for include=["reasoning.encrypted_content"]: the sealed blob made the round trip.
    assert isinstance(reasoning["encrypted_content"], str) and reasoning["encrypted_content"], reasoning


# --- the guide's setup, as written ------------------------------------------------------------------------

GUIDE_BASE_URL = "http://127.0.0.1:8400/v1"
GUIDE_CATALOG = "/path/to/harmony-responses/examples/codex-models.json"
SHELL_OUTPUT = "hello from the shell tool"  # what examples/codex-shell.jsonl has Codex's shell print


def _guide_codex() -> tuple[dict[str, str], list[list[str]]]:
    """The guide's Codex page (docs/clients/codex.md): its config.toml blocks by provider, and the commands of
    its bash blocks."""
    section = page("clients/codex.md")
    builtin, custom = re.findall(r"```toml\n(.*?)```", section, re.S)
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    commands = [shlex.split(line) for block in blocks for line in block.splitlines() if line.strip()]
    return {"builtin": builtin, "custom": custom}, commands


def _guide_config(provider: str, base_url: str) -> str:
    """The guide's config.toml for ``provider``, pointed at ``base_url`` and at the shipped catalog."""
    config = _guide_codex()[0][provider]
    assert config.count(GUIDE_BASE_URL) == 1 and config.count(GUIDE_CATALOG) == 1, config
    catalog = EXAMPLES / "codex-models.json"
    return config.replace(GUIDE_BASE_URL, f"{base_url}/v1").replace(GUIDE_CATALOG, str(catalog))


def _ran_the_shell_command(run: CodexRun) -> bool:
    # Codex prints the command's output, a line of its own, before the model's answer quotes it.
    return SHELL_OUTPUT in (run.stdout + run.stderr).splitlines()


@pytest.mark.parametrize("provider", ["builtin", "custom"])
def test_codex_runs_the_example_shell_script_with_the_guide_config_and_no_key(
    provider: str, serve, recording_proxy, run_codex
) -> None:
    _, commands = _guide_codex()
    assert ["npm", "i", "-g", f"@openai/codex@{_pinned_codex()}"] in commands
    [serve_line] = [words for words in commands if words[0] == "scripts/serve"]
    [exec_line] = [words for words in commands if words[:2] == ["codex", "exec"]]
    engine = serve_line[serve_line.index("--engine") + 1]
    assert engine == "replay:examples/codex-shell.jsonl"
    server = serve(f"replay:{EXAMPLES / 'codex-shell.jsonl'}")
    proxy: RecordingProxy = recording_proxy(server)
    # The custom provider through the recording proxy (HTTP); the built-in one speaks WebSocket, straight.
    base_url = proxy.base_url if provider == "custom" else server

    run = run_codex(base_url, exec_line[2], _guide_config(provider, base_url), keys={})

    assert run.returncode == 0, run
    assert run.stdout.strip().splitlines()[-1] == f"The command printed: {SHELL_OUTPUT}", run
    assert _ran_the_shell_command(run), run
    assert "unsupported call" not in run.stdout + run.stderr, run
    if provider == "custom":
        first, second = proxy.bodies()
        assert first["model"] == "gpt-oss-20b"
        outputs = [item for item in second["input"] if item["type"] == "function_call_output"]
        assert SHELL_OUTPUT in json.dumps(outputs), second["input"]


def _pinned_codex() -> str:
    package = json.loads((Path(__file__).resolve().parents[2] / "package.json").read_text())
    return package["devDependencies"]["@openai/codex"]


def test_codex_builtin_provider_sends_the_key_codex_login_saved(codex: Path, serve, run_codex, tmp_path: Path) -> None:
    server = serve(f"replay:{EXAMPLES / 'codex-shell.jsonl'}", "--api-key", "sekrit")
    config = _guide_config("builtin", server)
    # OPENAI_API_KEY is not what this provider sends: without the login the server refuses it.
    refused = run_codex(server, "Run the greeting command.", config, keys={"OPENAI_API_KEY": "sekrit"})
    assert refused.returncode != 0 and "401 Unauthorized" in refused.stdout + refused.stderr, refused
    home = tmp_path / "codex-home"
    login = subprocess.run(
        [str(codex), "login", "--with-api-key"], input=b"sekrit", env=_clean_env(home), capture_output=True, timeout=60
    )
    assert login.returncode == 0, login

    run = run_codex(server, "Run the greeting command.", config, keys={})

    assert run.returncode == 0, run
    assert run.stdout.strip().splitlines()[-1] == f"The command printed: {SHELL_OUTPUT}", run


def test_codex_custom_provider_sends_the_env_key_variable(serve, run_codex) -> None:
    server = serve(f"replay:{EXAMPLES / 'codex-shell.jsonl'}", "--api-key", "sekrit")
    # The guide's custom provider, with the line it says to add for a server that has --api-key.
    config = _guide_config("custom", server).rstrip("\n") + '\nenv_key = "HARMONY_API_KEY"\n'
    missing = run_codex(server, "Run the greeting command.", config, keys={})
    assert missing.returncode != 0, missing
    assert "Missing environment variable: `HARMONY_API_KEY`" in missing.stdout + missing.stderr, missing

    run = run_codex(server, "Run the greeting command.", config, keys={"HARMONY_API_KEY": "sekrit"})

    assert run.returncode == 0, run
    assert run.stdout.strip().splitlines()[-1] == f"The command printed: {SHELL_OUTPUT}", run


def test_codex_catalog_names_both_models_the_server_answers_to() -> None:
    assert [entry["slug"] for entry in MODEL_CATALOG["models"]] == ["gpt-oss-120b", "gpt-oss-20b"]
    assert all(entry["apply_patch_tool_type"] == "freeform" for entry in MODEL_CATALOG["models"])


def test_codex_reports_length_cut(serve, replay_script, run_codex) -> None:
    cut = {"harmony": "<|channel|>analysis<|message|>Let me think about this at", "finish": "length"}
    server = serve(replay_script([cut]))

    run = run_codex(server, "Reply with the single word: ready")

    assert run.returncode != 0, run
    assert "Incomplete response returned, reason: max_output_tokens" in run.stdout + run.stderr, run


def _server_log(tmp_path: Path) -> str:
    return "".join(path.read_text(errors="replace") for path in sorted(tmp_path.glob("server-*.log")))


def test_codex_builtin_provider_speaks_websocket(serve, replay_script, run_codex, tmp_path: Path) -> None:
    server = serve(replay_script([ANSWER]))

    run = run_codex(server, "Reply with the single word: ready", BUILTIN_CONFIG_TOML)

    assert run.returncode == 0, run
    assert run.stdout.strip().splitlines()[-1] == "ready", run
    log = _server_log(tmp_path)
    # The answer came over the WebSocket, at the first try (the issue: 7 refused upgrades, then HTTP).
    assert log.count('"WebSocket /v1/responses" [accepted]') == 1, log
    # A refused upgrade's access line ends '"WebSocket /v1/responses" 403' (log lines also carry hex request ids).
    assert "POST /v1/responses" not in log and '" 403' not in log, log


TOOL_CALL = (
    "<|channel|>analysis<|message|>I should run echo.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.exec_command <|constrain|>json"
    '<|message|>{"cmd": "echo hi-from-tool"}<|call|>'
)
TOOL_ANSWER = (
    "<|channel|>analysis<|message|>The command printed hi-from-tool.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>The tool said hi-from-tool.<|return|>"
)


def test_codex_builtin_provider_tool_turn_over_websocket(serve, replay_script, run_codex, tmp_path: Path) -> None:
    calls = [{"harmony": TOOL_CALL, "chunk": 3}, {"harmony": TOOL_ANSWER, "chunk": 2}]
    record = tmp_path / "calls.jsonl"
    server = serve(replay_script(calls), "--record", str(record))

    run = run_codex(server, "Run `echo hi-from-tool` and tell me what it printed.", BUILTIN_CONFIG_TOML)

    assert run.returncode == 0, run
    assert run.stdout.strip().splitlines()[-1] == "The tool said hi-from-tool.", run
    log = _server_log(tmp_path)
    assert "POST /v1/responses" not in log, log
    # Codex continues with previous_response_id and only the new items (store: false): the connection
    # remembers the turn, so the model's second prompt holds the first one and the tool's output.
    first, second = (json.loads(line) for line in record.read_text().splitlines())
    assert second["prompt_tokens"] > first["prompt_tokens"] + 20, (first["prompt_tokens"], second["prompt_tokens"])


PATCH = "*** Begin Patch\n*** Update File: notes.txt\n@@\n-old line\n+new line\n*** End Patch\n"


@pytest.mark.parametrize("provider", ["custom", "builtin"])
def test_codex_edits_a_file_with_the_custom_apply_patch_tool(
    provider: str, serve, replay_script, recording_proxy, run_codex, tmp_path: Path
) -> None:
    calls = [
        {
            "harmony": "<|channel|>analysis<|message|>I will patch notes.txt.<|end|>"
            "<|start|>assistant<|channel|>commentary to=functions.apply_patch <|constrain|>json<|message|>"
            + json.dumps({"input": PATCH})
            + "<|call|>",
            "chunk": 4,
        },
        {"harmony": "<|channel|>analysis<|message|>Done.<|end|><|start|>assistant<|channel|>final<|message|>"
         "notes.txt now says new line.<|return|>", "chunk": 3},
    ]  # fmt: skip
    record = tmp_path / "calls.jsonl"
    server = serve(replay_script(calls), "--record", str(record))
    (tmp_path / "work").mkdir()
    notes = tmp_path / "work" / "notes.txt"
    notes.write_text("first line\nold line\n")
    if provider == "custom":
        proxy: RecordingProxy = recording_proxy(server)
        config, base_url = CATALOG_LINE + CONFIG_TOML, proxy.base_url
    else:
        config, base_url = CATALOG_LINE + BUILTIN_CONFIG_TOML, server

    run = run_codex(
        # Codex's own sandbox is not under test, and from a checkout under /tmp (as CI may clone) it refuses
        # its helpers and every write fails: the patch is applied without it, in a scratch folder.
        base_url,
        "In notes.txt, replace 'old line' with 'new line'.",
        config,
        "--sandbox",
        "danger-full-access",
    )

    assert run.returncode == 0, run
    assert run.stdout.strip().splitlines()[-1] == "notes.txt now says new line.", run
    assert notes.read_text() == "first line\nnew line\n", run  # Codex really applied the patch
    assert len(record.read_text().splitlines()) == 2  # the call, then the answer after its output
    if provider == "custom":
        first, second = proxy.bodies()
        # The catalog entry makes Codex declare apply_patch as a custom tool with its lark grammar.
        [tool] = [t for t in first["tools"] if t.get("name") == "apply_patch"]
        assert tool["type"] == "custom" and tool["format"]["syntax"] == "lark", tool
        new_items = second["input"][len(first["input"]) :]
        by_type = {item["type"]: item for item in new_items}
        assert by_type["custom_tool_call"]["input"] == PATCH, new_items
        output = by_type["custom_tool_call_output"]
        assert output["call_id"] == by_type["custom_tool_call"]["call_id"]
        assert "notes.txt" in json.dumps(output["output"]), output
    else:
        log = _server_log(tmp_path)
        assert "POST /v1/responses" not in log and '"WebSocket /v1/responses" [accepted]' in log, log


MCP_SERVER = Path(__file__).resolve().parents[1] / "tools" / "mcp_server.py"
MCP_CONFIG = f"""
[mcp_servers.testtools]
command = "{sys.executable}"
args = ["{MCP_SERVER}", "stdio"]
required = true
"""


def test_codex_searches_its_deferred_mcp_tools_then_calls_one(
    serve, replay_script, recording_proxy, run_codex, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a catalog entry saying the model supports tool search, Codex defers its MCP servers' tools: it sends
    # a client-executed `tool_search` instead of them, runs the search itself (BM25) when the model calls it,
    # and sends the loaded namespace back in a `tool_search_output` item.
    catalog = json.loads(json.dumps(MODEL_CATALOG))
    [entry] = [entry for entry in catalog["models"] if entry["slug"] == MODEL]
    entry["supports_search_tool"] = True
    monkeypatch.setitem(globals(), "MODEL_CATALOG", catalog)
    calls = [
        {"harmony": "<|channel|>analysis<|message|>Is there a weather tool?<|end|><|start|>assistant"
         '<|channel|>commentary to=functions.tool_search <|constrain|>json<|message|>{"query": "weather"}<|call|>',
         "chunk": 3},
        {"harmony": "<|channel|>commentary to=mcp__testtools.weather <|constrain|>json"
         '<|message|>{"city": "Oslo"}<|call|>', "chunk": 3},
        {"harmony": "<|channel|>final<|message|>It is sunny in Oslo.<|return|>", "chunk": 2},
    ]  # fmt: skip
    proxy: RecordingProxy = recording_proxy(serve(replay_script(calls)))

    run = run_codex(proxy.base_url, "What is the weather in Oslo?", CATALOG_LINE + CONFIG_TOML + MCP_CONFIG)

    assert run.returncode == 0, run
    assert run.stdout.strip().splitlines()[-1] == "It is sunny in Oslo.", run
    first, second, third = proxy.bodies()
    [search] = [tool for tool in first["tools"] if tool["type"] == "tool_search"]
    assert search["execution"] == "client" and "weather" not in json.dumps(first["tools"]), first["tools"]
    # Codex answered the search itself, with the tool_search_call we streamed and the namespace it loaded.
    new_items = {item["type"]: item for item in second["input"][len(first["input"]) :]}
    call, output = new_items["tool_search_call"], new_items["tool_search_output"]
    assert (call["type"], call["execution"], call["arguments"]) == ("tool_search_call", "client", {"query": "weather"})
    assert output["type"] == "tool_search_output" and output["call_id"] == call["call_id"]
    [namespace] = output["tools"]
    assert namespace["name"] == "mcp__testtools" and "weather" in [t["name"] for t in namespace["tools"]]
    # The model's call to the loaded tool reached Codex as that namespace's function, and Codex ran it.
    by_type = {item["type"]: item for item in third["input"][len(second["input"]) :]}
    function_call = by_type["function_call"]
    assert (function_call["namespace"], function_call["name"]) == ("mcp__testtools", "weather"), function_call
    assert "Sunny in Oslo" in json.dumps(by_type["function_call_output"]["output"], ensure_ascii=False)


COMPACT_SUMMARY = "SUMMARY: the user asked to run echo hi-from-tool; it ran and printed hi-from-tool. Next: report it."


def test_codex_builtin_provider_auto_compacts_mid_turn(serve, run_codex, tmp_path: Path) -> None:
    # The model behind a fake vLLM, so that the test sees every prompt the model got: the tool call, then the
    # compaction (Codex's token limit is passed after the tool's output), then the answer from the summary.
    scenarios = [
        Scenario(tokens=harmony(TOOL_CALL), chunk=3),
        Scenario(tokens=harmony(COMPACT_SUMMARY + "<|return|>"), chunk=4),
        Scenario(tokens=harmony(TOOL_ANSWER), chunk=2),
    ]
    config = BUILTIN_CONFIG_TOML + "model_auto_compact_token_limit = 300\n"
    with run_fake(VLLMFake(*scenarios)) as fake:
        server = serve("vllm", "--engine-url", fake.url)

        run = run_codex(server, "Run `echo hi-from-tool` and tell me what it printed.", config)

    assert run.returncode == 0, run
    assert run.stdout.strip().splitlines()[-1] == "The tool said hi-from-tool.", run
    assert "context compacted" in run.stdout + run.stderr, run
    log = _server_log(tmp_path)
    assert "POST /v1/responses" not in log and '"WebSocket /v1/responses" [accepted]' in log, log
    encoding = load_encoding()
    first, summarizing, answering = (encoding.decode(body["prompt"]) for body in fake.requests)
    # Codex sent the tool's output with a compaction_trigger: the model was asked for the summary, with the
    # conversation so far (the output included) and the final channel prefilled.
    assert "hi-from-tool" in summarizing and "exited with code 0" in summarizing
    assert summarizing.endswith(f"{SUMMARY_INSTRUCTION}<|end|><|start|>assistant<|channel|>final<|message|>")
    # Codex then resent its developer and user messages with the compaction item: the model answered from the
    # summary, in place of the call and its output.
    assert answering.endswith(f"<|start|>user<|message|>{SUMMARY_PREFIX}{COMPACT_SUMMARY}<|end|><|start|>assistant")
    assert "Run `echo hi-from-tool` and tell me what it printed." in answering
    assert "exited with code 0" not in answering and "exec_command" in first


def test_codex_custom_provider_auto_compacts_mid_turn(serve, run_codex, tmp_path: Path) -> None:
    # A custom provider gets no compaction_trigger: Codex compacts by itself, asking the model for a summary in
    # an ordinary turn (its own prompt), then goes on from the summary it was given. The scripted model writes
    # the tool call, then the summary, then the answer.
    scenarios = [
        Scenario(tokens=harmony(TOOL_CALL), chunk=3),
        Scenario(tokens=harmony("<|channel|>final<|message|>" + COMPACT_SUMMARY + "<|return|>"), chunk=4),
        Scenario(tokens=harmony(TOOL_ANSWER), chunk=2),
    ]
    config = "model_auto_compact_token_limit = 300\n" + CONFIG_TOML  # a top-level key: before the tables
    with run_fake(VLLMFake(*scenarios)) as fake:
        server = serve("vllm", "--engine-url", fake.url)

        run = run_codex(server, "Run `echo hi-from-tool` and tell me what it printed.", config)

    assert run.returncode == 0, run
    assert run.stdout.strip().splitlines()[-1] == "The tool said hi-from-tool.", run
    assert "context compacted" in run.stdout + run.stderr, run
    encoding = load_encoding()
    first, summarizing, answering = (encoding.decode(body["prompt"]) for body in fake.requests)
    assert "exec_command" in first
    # Codex asked for the summary itself, with the tool's output in the conversation; our own summary
    # instruction is not used on this path (no compaction_trigger, no compaction item).
    assert "hi-from-tool" in summarizing and "exited with code 0" in summarizing
    assert SUMMARY_INSTRUCTION not in summarizing
    # The answer was written from Codex's summary message, without the call and its output.
    assert COMPACT_SUMMARY in answering and "exited with code 0" not in answering
