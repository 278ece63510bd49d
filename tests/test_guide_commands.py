"""Every command and block the guide shows is checked by a test: run when it can run here, else read as the
program it is for would read it.

tests/test_docs.py runs the blocks marked ``<!-- test: run -->``; this module runs the others that can run
without a GPU or a network (the `serve` commands on the stand-in and replay engines, the
``harmony-responses translate`` session), reads the ones that cannot (every other `serve` command parses as
``serve`` parses it, the config file as ``--config`` reads it), and checks that no block of the guide is left
out: a new block is marked to run, or has a test here or in the test named for its kind.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tomllib
from pathlib import Path

import httpx
import pytest

from guide import DOCS, ROOT, blocks, commands, pages, printed_pattern
from harmony_responses.serve.cli import add_serve_arguments, config_from_args
from harmony_responses.serve.config import Config


def _all_blocks() -> list[tuple[str, str, str, str | None]]:
    """(page, language, text, mark) for every fenced block of the guide."""
    return [
        (path.relative_to(DOCS).as_posix(), *block)
        for path in pages()
        for block in blocks(path.relative_to(DOCS).as_posix())
    ]


def _serve_arguments(words: list[str]) -> list[str] | None:
    """The options of a `serve` command (``scripts/serve …``, ``harmony-responses serve …``, after any
    ``VAR=value``), or None for another command."""
    while words and "=" in words[0] and not words[0].startswith("-"):
        words = words[1:]
    if words[:1] == ["scripts/serve"]:
        return words[1:]
    if words[:2] == ["harmony-responses", "serve"]:
        return words[2:]
    return None


def _serve_commands() -> list[tuple[str, list[str]]]:
    found = []
    for name, language, text, _ in _all_blocks():
        if language == "bash":
            found += [
                (name, arguments) for words in commands(text) if (arguments := _serve_arguments(words)) is not None
            ]
    return found


def _config(arguments: list[str]) -> Config:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return config_from_args(parser.parse_args(arguments))


def test_every_serve_command_in_the_guide_parses_as_serve_parses_it() -> None:
    found = _serve_commands()
    assert len(found) >= 10, found
    for name, arguments in found:
        try:
            _config(arguments)
        except (SystemExit, ValueError) as error:  # argparse exits on a bad option
            raise AssertionError(f"docs/{name}: `serve {' '.join(arguments)}` is refused: {error!r}") from None


# The guide's `serve` commands that need no GPU, network or key: run as written, from the checkout's folder.
def _offline(arguments: list[str]) -> bool:
    engines = [arguments[i + 1] for i, word in enumerate(arguments) if word == "--engine"] or ["echo"]
    kinds = {spec.rpartition("=")[2].partition(":")[0] for spec in engines}
    return kinds <= {"echo", "replay"} and "--search-backend" not in arguments


def _absolute(arguments: list[str]) -> list[str]:
    """The guide's paths are the checkout's (its commands run from there); the test's server runs elsewhere."""
    out = []
    for word in arguments:
        if word.startswith("replay:"):
            word = f"replay:{ROOT / word.removeprefix('replay:')}"
        elif word.startswith("./"):
            word = str(ROOT / word)
        out.append(word)
    return out


@pytest.mark.parametrize(
    "arguments", [args for _, args in _serve_commands() if _offline(args)], ids=lambda a: " ".join(a) or "no options"
)
def test_the_guide_s_offline_serve_commands_start_and_answer(arguments: list[str], tmp_path: Path) -> None:
    from openai import OpenAI

    from reliability.server_process import server_process

    with server_process([*_absolute(arguments), "--store", f"sqlite:{tmp_path / 'store.sqlite3'}"]) as server:
        assert httpx.get(f"{server.root}/ready", timeout=10).status_code == 200
        client = OpenAI(base_url=f"{server.root}/v1", api_key="unused")
        model = client.models.list().data[0].id
        response = client.responses.create(model=model, input="Say hello.")
        assert response.status == "completed", response


def test_the_config_file_example_is_read_as_serve_reads_it(tmp_path: Path) -> None:
    [example] = [text for name, lang, text, _ in _all_blocks() if lang == "toml" and "serve --config" in text]
    path = tmp_path / "serve.toml"
    path.write_text(example)
    config = _config(["--config", str(path)])
    written = tomllib.loads(example)
    assert config.host == written["host"] and config.workers == written["workers"]
    assert config.models == tuple(written["model"]) and config.api_keys == tuple(written["api-key"])
    assert config.store == written["store"] and config.shutdown_grace == written["shutdown-grace"]


def test_the_translate_session_prints_what_the_guide_shows() -> None:
    [session] = [text for _, lang, text, _ in _all_blocks() if lang == "console"]
    lines = session.splitlines()
    assert lines[0].startswith("$ ")
    command = [lines[0].removeprefix("$ ")]
    while command[-1].endswith("\\"):
        command.append(lines[len(command)])
    expected = "\n".join(lines[len(command) :]) + "\n"
    # From the checkout's folder, where the guide's commands are run.
    done = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", "\n".join(command)], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert printed_pattern(expected).fullmatch(done.stdout), done.stdout


def test_the_readiness_example_is_json_shaped_as_ready_answers() -> None:
    [example] = [text for _, lang, text, _ in _all_blocks() if lang == "json"]
    answer = json.loads(example)
    assert answer["status"] == "unavailable" and {"id", "ready", "engines"} <= set(answer["models"][0])
    assert set(answer["store"]) == {"ready"}


# What checks each kind of block that is not marked to run (a test of this module, or the one named).
_CHECKED_ELSEWHERE = {
    "jsonl": "tests/test_docs.py::test_guide_replay_examples_are_scripts_the_replay_engine_plays",
    "mermaid": "tests/test_docs.py::test_translator_state_diagram_is_current",
}
# Commands a bash block may hold without running here, and the test that reads them.
_COMMANDS_CHECKED_ELSEWHERE = {
    ("vllm", "serve"): "tests/test_readme_recipes.py",
    ("python", "-m", "sglang.launch_server"): "tests/test_readme_recipes.py",
    ("llama-server",): "tests/test_readme_recipes.py",
    ("trtllm-serve",): "tests/test_readme_recipes.py",
    ("npm", "i", "-g"): "tests/clients/test_codex.py",
    ("harmony-responses", "trace"): "tests/tokentrace/test_cli.py",
    ("codex", "exec"): "tests/clients/test_codex.py",
    ("docker",): "tests/test_packaging.py::test_guide_s_docker_section_runs_this_image",
    ("pip", "install"): "tests/test_packaging.py::test_guide_says_how_to_install_without_an_index",
    ("python", "-m", "build"): "tests/test_packaging.py",
    # The test command itself: CI runs it (.ci/run), tests/test_scripts.py checks its stages.
    ("scripts/test",): "tests/test_scripts.py",
}


def _command(words: list[str]) -> list[str]:
    """A command's words after any ``VAR=value`` it starts with (the environment it is given)."""
    while words and "=" in words[0] and not words[0].startswith("-"):
        words = words[1:]
    return words


def test_every_block_of_the_guide_is_run_or_checked() -> None:
    unchecked = []
    for name, language, text, mark in _all_blocks():
        if mark is not None or language in _CHECKED_ELSEWHERE or language in ("console", "json"):
            continue
        if language == "toml":
            if "serve --config" in text or name == "clients/codex.md":  # tests/clients/test_codex.py runs those
                continue
        elif language == "bash":
            rest = [
                words
                for words in commands(text)
                if _serve_arguments(words) is None
                and not any(tuple(_command(words)[: len(prefix)]) == prefix for prefix in _COMMANDS_CHECKED_ELSEWHERE)
                # A benchmark is one command that prints its figures (bench/): it exists, and bench/ runs it.
                and not (
                    words[0] == ".venv/bin/python" and (ROOT / words[1]).is_file() and words[1].startswith("bench/")
                )
            ]
            if not rest:
                continue
        unchecked.append(f"docs/{name}: ```{language}\n{text}```")
    assert not unchecked, (
        "blocks of the guide that no test runs or reads (mark one `<!-- test: run -->` when it can run against"
        " the echo stand-in, or check it in tests/test_guide_commands.py):\n" + "\n".join(unchecked)
    )
