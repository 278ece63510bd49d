"""Codex benchmark (issue 13): ``codex exec`` through Codex's built-in provider vs a custom provider, one server.

Run: ``python bench/codex_bench.py`` (after ``scripts/install``, which installs Codex from package.json). One
server (replay engine, a one-word answer per call) serves both; Codex runs ``ROUNDS`` times with each
configuration, alternated, each in a fresh ``CODEX_HOME``:

- built-in provider: ``openai_base_url`` pointed at the server (WebSocket mode first, as Codex does);
- custom provider: ``model_providers.harmony`` with ``wire_api = "responses"`` (HTTP and SSE).

Figures: the wall time of each ``codex exec`` (process start to exit), min and median per configuration,
and their ratio. Before WebSocket mode the built-in provider spent seven refused upgrades (7.45 s) first.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from engine_bench import spawn

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MODEL = "gpt-oss-20b"
ROUNDS = 5
ANSWER = (
    "<|channel|>analysis<|message|>The user wants one word.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>ready<|return|>"
)
BUILTIN = 'model = "{model}"\nopenai_base_url = "{url}/v1"\n'
CUSTOM = """\
model = "{model}"
model_provider = "harmony"

[model_providers.harmony]
name = "harmony-responses"
base_url = "{url}/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def codex_exec(home: Path, work: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEX_", "OPENAI_", "RUST_LOG"))}
    env |= {"CODEX_HOME": str(home), "OPENAI_API_KEY": "bench-key", "NO_COLOR": "1"}
    argv = [str(ROOT / "node_modules" / ".bin" / "codex"), "exec", "--skip-git-repo-check", "--ephemeral"]
    started = time.perf_counter()
    done = subprocess.run(
        [*argv, "Reply with the single word: ready"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        timeout=120,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or done.stdout.strip().splitlines()[-1:] != ["ready"]:
        raise RuntimeError(f"codex exec failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return elapsed


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        script = work / "script.jsonl"
        # Each codex exec makes one engine call; a spare answer per run for safety.
        script.write_text("".join(json.dumps({"harmony": ANSWER}) + "\n" for _ in range(4 * ROUNDS)))
        port = free_port()
        env = {**os.environ, "XDG_DATA_HOME": str(work / "data")}
        server = spawn(
            [str(BIN / "harmony-responses"), "serve", "--port", str(port), "--model", MODEL]
            + ["--engine", f"replay:{script}", "--log-level", "warning"],
            stdout=subprocess.DEVNULL,
            env=env,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url + "/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise RuntimeError("the server did not start") from None
                    time.sleep(0.1)
            times: dict[str, list[float]] = {"built-in provider": [], "custom provider": []}
            for n in range(ROUNDS):
                for name, config in (("built-in provider", BUILTIN), ("custom provider", CUSTOM)):
                    home = work / f"home-{name[:6]}-{n}"
                    home.mkdir()
                    (home / "config.toml").write_text(config.format(model=MODEL, url=url))
                    (work / "cwd").mkdir(exist_ok=True)
                    times[name].append(codex_exec(home, work / "cwd"))
        finally:
            server.terminate()
            server.wait(timeout=30)
    for name, values in times.items():
        print(f"{name:<18} codex exec: min {min(values):.2f} s, median {statistics.median(values):.2f} s")
    ratio = statistics.median(times["built-in provider"]) / statistics.median(times["custom provider"])
    print(f"built-in / custom (medians): {ratio:.2f}")


if __name__ == "__main__":
    main()
