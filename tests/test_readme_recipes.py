"""The guide's "Against a real engine" recipes (docs/engines/KIND.md, one page per HTTP engine): each engine
command and ours agree, and use only what the real-engine tier's servers were run with.

A recipe is a ```bash block of two lines, the engine's command then ``scripts/serve --engine KIND:URL``. Ours
must parse as ``serve`` parses it and reach the engine on the port the engine command gives, which is also
the engine's default port in its adapter. Every flag of an engine command must appear in that engine's tier
fixtures (tests/real_engines/ENGINE/conftest.py), apart from the few a GPU machine needs and a CPU-only tier
cannot run (``ONLY_ON_A_GPU_MACHINE``): a flag copied from elsewhere that the adapter was never run against
fails here.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from guide import DOCS, section
from harmony_responses.engine import engine_from_spec
from harmony_responses.serve.cli import add_serve_arguments, config_from_args

ROOT = Path(__file__).resolve().parent.parent
TIERS = ROOT / "tests" / "real_engines"
# What the engine command names that the tier cannot: a download by name (the tier makes its tiny models).
ONLY_ON_A_GPU_MACHINE = {"llamacpp": {"-hf"}}


def recipes() -> dict[str, tuple[list[str], list[str]]]:
    """engine kind → (its command's words, ours after ``scripts/serve``), from every engine page that has a
    recipe; the page is named by the kind its recipe serves."""
    found = {}
    for path in sorted((DOCS / "engines").glob("*.md")):
        if "\n## Against a real engine\n" not in path.read_text() or path.name == "index.md":
            continue
        for block in re.findall(r"```bash\n(.*?)```", section(f"engines/{path.name}", "Against a real engine"), re.S):
            engine_line, ours_line = block.strip().splitlines()
            ours = shlex.split(ours_line)
            assert ours[0] == "scripts/serve", ours_line
            kind = ours[ours.index("--engine") + 1].partition(":")[0]
            assert path.stem == kind, f"docs/engines/{path.name} has the recipe of {kind}"
            found[kind] = (shlex.split(engine_line), ours[1:])
    return found


def _flags(command: list[str]) -> set[str]:
    if command[:2] == ["python", "-m"]:
        command = command[3:]  # python -m MODULE: the module's own flags follow
    return {word for word in command if word.startswith("-")}


def test_guide_has_a_recipe_per_http_engine() -> None:
    assert set(recipes()) == {"vllm", "sglang", "llamacpp", "trtllm"}


@pytest.mark.parametrize("kind", ["vllm", "sglang", "llamacpp", "trtllm"])
def test_recipe_points_ours_at_the_port_the_engine_listens_on(kind: str) -> None:
    engine, ours = recipes()[kind]
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    config = config_from_args(parser.parse_args(ours))
    url = urlsplit(engine_from_spec(config.engine or "", config.engine_options).url)
    port = int(engine[engine.index("--port") + 1])
    assert (url.hostname, url.port) == ("127.0.0.1", port)
    # The port the engine listens on by default, so that the command works without --port as well.
    assert urlsplit(engine_from_spec(kind).url).port == port
    assert port != config_from_args(parser.parse_args([])).port  # ours is elsewhere
    # One model name, the engine's (openai/gpt-oss-20b, ggml-org/gpt-oss-20b-GGUF), for the client to ask for.
    assert config.models == ("gpt-oss-20b",) and any("gpt-oss-20b" in word for word in engine), engine


@pytest.mark.parametrize("kind", ["vllm", "sglang", "llamacpp"])
def test_recipe_uses_only_flags_the_tier_runs_the_engine_with(kind: str) -> None:
    engine, _ = recipes()[kind]
    tier = (TIERS / kind / "conftest.py").read_text()
    ran = {flag for flag in _flags(engine) if f'"{flag}"' in tier or f"'{flag}'" in tier}
    assert _flags(engine) - ran <= ONLY_ON_A_GPU_MACHINE.get(kind, set()), engine


def test_vllm_recipe_asks_for_cached_token_counts() -> None:
    # Without it vLLM leaves prompt_tokens_details out and every response says 0 cached tokens.
    engine, _ = recipes()["vllm"]
    assert "--enable-prompt-tokens-details" in engine
