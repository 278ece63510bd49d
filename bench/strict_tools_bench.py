"""Grammar cost of strict tools (issue 26): building the grammars per request, and llama.cpp's cost of them.

Run: ``python bench/strict_tools_bench.py`` (the llama.cpp part runs when ``LLAMACPP_SERVER`` and
``LLAMACPP_CONVERT`` are set, as ``scripts/engines/llamacpp`` prints them). For 1, 10 and 50 strict
function tools of Codex's size (a dozen properties each: strings, enums, integers, arrays, a nested object):

1. ours: the time to build the structural tag (vLLM, SGLang) and the lazy GBNF grammar (llama.cpp) for a
   request, cold (grammar caches cleared) and warm (the same tools again, as clients resend them), against
   the floor of serialising the same tools with orjson (the least a request with them costs), same run;
2. llama.cpp: the wall time of a real ``llama-server`` (the scripted tiny model of tests/real_engines)
   writing the same 30-token call, with the tools' lazy grammar and without, medians of alternating runs;
   the difference is llama.cpp's parsing of the grammar plus its masking of the constrained tokens.

3. vLLM (when ``VLLM_PYTHON`` and ``VLLM_MODEL`` are set, as ``scripts/engines/vllm`` prints them): vLLM's
   own server with the tier's scripted executor (no model runs: a step costs microseconds), one
   ``/v1/completions`` request of 30 tokens with the tools' structural tag, the first time a tag is seen
   (xgrammar compiles it in vLLM's process) and again (vLLM's compiled-grammar cache), against the same
   request unconstrained. The difference is xgrammar's compile plus its masking in vLLM's scheduler.
4. SGLang (when ``SGLANG_PYTHON`` and ``SGLANG_MODEL`` are set): SGLang's own server and grammar backend
   compiling each tool list's structural tag, timed in the tier's scripted scheduler (which stands in for
   SGLang's, so SGLang's compiled-grammar cache is not in the path: every compile is a first one).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from harmony_responses.engine import GenerateRequest, ToolGrammar, _constrain
from harmony_responses.grammar import _schema as _schema_grammar

ROOT = Path(__file__).resolve().parents[1]

SIZES = (1, 10, 50)
ROUNDS = int(os.environ.get("STRICT_ROUNDS", "7"))


def codex_sized(i: int) -> dict[str, Any]:
    props: dict[str, Any] = {
        "path": {"type": "string", "description": "A file path."},
        "mode": {"type": "string", "enum": ["read", "write", f"append_{i}"]},  # every tool's schema differs
        "line": {"type": "integer"},
        "count": {"type": ["integer", "null"]},
        "dry_run": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "when": {"type": "string", "format": "date-time"},
        "owner": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "email": {"type": "string", "format": "email"}},
            "required": ["name", "email"],
            "additionalProperties": False,
        },
        "ticket": {"type": "string", "pattern": "^[A-Z]{2,4}-[0-9]+$"},
        "reason": {"type": "string"},
        "priority": {"type": "string", "enum": ["low", "normal", "high"]},
        "timeout_ms": {"type": "number"},
    }
    schema = {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    name = "get_weather" if i == 0 else f"tool_{i}"
    if i == 0:
        schema = {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        }
    return {"type": "function", "name": name, "description": "A tool.", "parameters": schema, "strict": True}


def request_for(tools: list[dict[str, Any]], prompt: list[int]) -> GenerateRequest:
    grammars = tuple(
        ToolGrammar(name=t["name"], syntax="json_schema", definition=orjson.dumps(t["parameters"]).decode())
        for t in tools
    )
    return GenerateRequest(prompt_ids=prompt, tool_grammars=grammars)


def clear() -> None:
    _schema_grammar._cached.cache_clear()
    _schema_grammar._regex_body.cache_clear()


def ours() -> None:
    print("1. building the grammars per request (CPU ms, medians; ratio to orjson-serialising the tools)")
    for n in SIZES:
        tools = [codex_sized(i) for i in range(n)]
        request = request_for(tools, [200006, 173781])
        cold_tag, cold_gbnf, warm_tag, floor = [], [], [], []
        for _ in range(ROUNDS):
            t0 = time.process_time()
            orjson.dumps(tools)
            floor.append(time.process_time() - t0)
            clear()
            t0 = time.process_time()
            _constrain.structural_tag(request)
            cold_tag.append(time.process_time() - t0)
            clear()
            t0 = time.process_time()
            _constrain.lazy_grammar(request)
            cold_gbnf.append(time.process_time() - t0)
            t0 = time.process_time()
            _constrain.structural_tag(request)
            warm_tag.append(time.process_time() - t0)
        f = max(statistics.median(floor), 1e-6)
        tag, gbnf, warm = (statistics.median(x) for x in (cold_tag, cold_gbnf, warm_tag))
        size = len(orjson.dumps(_constrain.structural_tag(request)))
        print(
            f"   {n:>2} tools: tag cold {tag * 1e3:7.2f} ms ({tag / f:6.0f}x), warm {warm * 1e3:6.2f} ms "
            f"({warm / f:5.0f}x); GBNF cold {gbnf * 1e3:7.2f} ms; tag {size / 1024:.0f} KiB; floor {f * 1e3:.3f} ms"
        )


def llamacpp() -> None:
    if not os.environ.get("LLAMACPP_SERVER") or not os.environ.get("LLAMACPP_CONVERT"):
        print("2. llama.cpp: skipped (run `export $(scripts/engines/llamacpp | xargs)` first)")
        return
    import httpx

    sys.path.insert(0, str(ROOT / "tests"))  # the real-engine tier's model builder and engine starter
    from real_engines.gateway import start_engine
    from real_engines.llamacpp.conftest import CHAINS, llama_server_argv
    from real_engines.tiny_model import harmony_ids, scripted_checkpoint, to_gguf

    gguf = to_gguf(scripted_checkpoint(CHAINS))
    engine = start_engine(llama_server_argv(gguf), timeout=120, name="llama-server")
    prompt = harmony_ids("<|start|>user<|message|>What is the weather in Paris?<|end|><|start|>assistant")
    print("2. llama.cpp: one 30-token call, wall ms (medians), with the tools' lazy grammar vs without")
    try:
        with httpx.Client(base_url=engine.url, timeout=120) as client:

            def run(fields: dict[str, Any]) -> float:
                body = {"prompt": prompt, "n_predict": 30, "cache_prompt": False, "temperature": 0, **fields}
                t0 = time.perf_counter()
                client.post("/completion", json=body).raise_for_status()
                return time.perf_counter() - t0

            for n in SIZES:
                fields = _constrain.lazy_grammar(request_for([codex_sized(i) for i in range(n)], prompt)) or {}
                bare, constrained = [], []
                for _ in range(ROUNDS):
                    bare.append(run({}))
                    constrained.append(run(fields))
                b, c = statistics.median(bare), statistics.median(constrained)
                print(f"   {n:>2} tools: {c * 1e3:7.1f} ms vs {b * 1e3:6.1f} ms unconstrained ({c / b:4.2f}x)")
    finally:
        engine.stop()


def vllm() -> None:
    if not os.environ.get("VLLM_PYTHON") or not os.environ.get("VLLM_MODEL"):
        print("3. vLLM: skipped (run `export $(scripts/engines/vllm | xargs)` first)")
        return
    import tempfile

    import httpx

    sys.path.insert(0, str(ROOT / "tests"))
    from real_engines.tiny_model import harmony_ids
    from real_engines.vllm.conftest import SERVED_MODEL, VLLM

    server = VLLM("bench", [], Path(tempfile.mkdtemp(prefix="strict-bench-")))
    server.start()
    prompt = harmony_ids("<|start|>user<|message|>What is the weather in Paris?<|end|><|start|>assistant")
    print("3. vLLM: one 30-token completion, wall ms (medians), the tools' structural tag first seen / again vs none")
    try:
        server.wait_ready()
        with httpx.Client(base_url=server.url, timeout=300) as client:

            def run(tag: dict[str, Any] | None) -> float:
                body: dict[str, Any] = {"model": SERVED_MODEL, "prompt": prompt, "max_tokens": 30, "temperature": 0}
                body["ignore_eos"] = True
                if tag is not None:
                    body["structured_outputs"] = {"structural_tag": orjson.dumps(tag).decode()}
                t0 = time.perf_counter()
                client.post("/v1/completions", json=body).raise_for_status()
                return time.perf_counter() - t0

            run(None)  # vLLM's first request warms what is not grammar
            for n in SIZES:
                bare, first, again = [], [], []
                for r in range(ROUNDS):
                    # Every round's last tool gains its own enum property: a tag vLLM has not compiled yet.
                    tools = [codex_sized(i) for i in range(n)]
                    params = tools[-1]["parameters"]
                    params["properties"]["round"] = {"type": "string", "enum": [f"r{r}-{n}"]}
                    params["required"] = [*params["required"], "round"]
                    tag = _constrain.structural_tag(request_for(tools, prompt))
                    bare.append(run(None))
                    first.append(run(tag))
                    again.append(run(tag))
                b, f, a = (statistics.median(x) for x in (bare, first, again))
                print(
                    f"   {n:>2} tools: first {f * 1e3:7.1f} ms ({f / b:5.2f}x), again {a * 1e3:7.1f} ms "
                    f"({a / b:4.2f}x), unconstrained {b * 1e3:6.1f} ms"
                )
    finally:
        server.stop()


def sglang() -> None:
    if not os.environ.get("SGLANG_PYTHON") or not os.environ.get("SGLANG_MODEL"):
        print("4. SGLang: skipped (run `export $(scripts/engines/sglang | xargs)` first)")
        return
    import tempfile

    import httpx

    sys.path.insert(0, str(ROOT / "tests"))
    from real_engines.gateway import wait_http
    from real_engines.sglang.conftest import _start_sglang
    from real_engines.tiny_model import harmony_ids

    server = _start_sglang(Path(tempfile.mkdtemp(prefix="strict-bench-sglang-")))
    assert server.process is not None
    prompt = harmony_ids("<|start|>user<|message|>What is the weather in Paris?<|end|><|start|>assistant")
    print("4. SGLang: xgrammar's compile of the tools' structural tag by SGLang's grammar backend, ms (medians)")
    try:
        wait_http(server.url + "/health", timeout=600, process=server.process.process)
        with httpx.Client(base_url=server.url, timeout=300) as client:
            for n in SIZES:
                times = []
                for r in range(ROUNDS):
                    tools = [codex_sized(i) for i in range(n)]
                    params = tools[-1]["parameters"]
                    params["properties"]["round"] = {"type": "string", "enum": [f"r{r}-{n}"]}
                    params["required"] = [*params["required"], "round"]
                    tag = orjson.dumps(_constrain.structural_tag(request_for(tools, prompt))).decode()
                    sampling = {"max_new_tokens": 4, "structural_tag": tag}
                    client.post("/generate", json={"input_ids": prompt, "sampling_params": sampling}).raise_for_status()
                    logged = server.events("request")[-1]["grammar"]
                    times.append(logged["compile_ms"])
                print(f"   {n:>2} tools: compile {statistics.median(times):7.1f} ms")
    finally:
        server.process.stop(timeout=5.0)


if __name__ == "__main__":
    ours()
    llamacpp()
    vllm()
    sglang()
