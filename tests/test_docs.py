"""The user guide (docs/, a MkDocs site) and the README landing page: generated parts stay in step with the
code they are generated from, every runnable block runs and prints what it says, and the site builds with no
warnings."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from guide import page, pages, printed_pattern

ROOT = Path(__file__).resolve().parent.parent


def test_translator_state_diagram_is_current() -> None:
    spec = importlib.util.spec_from_file_location("state_diagram", ROOT / "scripts" / "state-diagram.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    current = (ROOT / "docs" / "translator-states.md").read_text()
    assert current == module.render(), "run: .venv/bin/python scripts/state-diagram.py"


def test_guide_options_table_is_the_declared_one() -> None:
    from harmony_responses.serve.options import TABLE_PAGE, generated_region, markdown_table

    assert TABLE_PAGE == ROOT / "docs" / "reference" / "options.md"
    text = TABLE_PAGE.read_text()
    start, end = generated_region(text)
    assert text[start:end] == markdown_table(), "run: .venv/bin/python -m harmony_responses.serve.options --write"


def test_help_shows_every_declared_option_and_its_environment_twin() -> None:
    import argparse

    from harmony_responses.serve.cli import add_serve_arguments
    from harmony_responses.serve.options import OPTIONS

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    text = " ".join(parser.format_help().split())
    for option in OPTIONS:
        assert option.flag in text
        if option.env_name is not None:
            assert option.env_name in text


def _help_sections() -> dict[str, dict[str, str]]:
    """``harmony-responses serve --help`` as the user sees it: heading → flag → the flag's whole entry."""
    import os
    import subprocess
    import sys

    binary = Path(sys.executable).parent / "harmony-responses"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARMONY_RESPONSES_")} | {"COLUMNS": "100"}
    text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, env=env, check=True).stdout
    sections: dict[str, dict[str, str]] = {}
    heading = flag = ""
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            heading, flag = line[:-1], ""
            sections[heading] = {}
        elif line.startswith("  --"):
            flag = line.split()[0]
            sections[heading][flag] = line.strip()
        elif line.startswith("   ") and flag:
            sections[heading][flag] += " " + line.strip()
        else:
            flag = ""
    return sections


def test_help_lists_each_option_under_its_group_with_its_default_and_a_named_value() -> None:
    from harmony_responses.serve.options import GROUPS, OPTIONS

    sections = _help_sections()
    assert [name for name in sections if name != "options"] == [group.name for group in GROUPS]
    for option in OPTIONS:
        entry = sections[option.group].get(option.flag)
        assert entry is not None, f"{option.flag} is not under {option.group}:"
        if option.default is not None:
            assert f"(default: {option.default};" in entry, entry
        if not option.switch:
            value = entry.split()[1]
            # argparse's own placeholder is the dest in capitals (--context-window CONTEXT_WINDOW).
            assert value not in (option.name.upper(), option.key.replace("-", "_").upper()), entry
            assert value == option.metavar or value.startswith("{"), entry


def test_guide_replay_examples_are_scripts_the_replay_engine_plays(tmp_path: Path) -> None:
    import re

    import orjson

    from harmony_responses.engine import load_script
    from harmony_responses.vocab import load_encoding

    blocks = re.findall(r"^```jsonl\n(.*?)^```$", page("engines/replay.md"), re.S | re.M)
    assert len(blocks) >= 2, "the guide's replay format section shows a script and a recorded line"
    for i, block in enumerate(blocks):
        path = tmp_path / f"block{i}.jsonl"
        path.write_text(block)
        assert load_script(path)
        for line in block.splitlines():
            if line.startswith("{") and "text" in (obj := orjson.loads(line)):
                assert obj["text"] == load_encoding().decode(obj["tokens"])


# A guide block that a test runs is marked by the comment before it; the block it prints, likewise (without
# one, the block need only succeed). Comments, so that neither GitHub nor MkDocs shows the marks.
_RUN = re.compile(r"^<!-- test: (run|prints) -->\n```(\w+)\n(.*?)^```$", re.S | re.M)


def _guide_examples() -> list[tuple[str, str, str | None]]:
    """The guide's runnable blocks in the order of its pages: (language, code, what it prints or None)."""
    examples: list[tuple[str, str, str | None]] = []
    for mark in _RUN.finditer("\n".join(path.read_text() for path in pages())):
        kind, language, text = mark.groups()
        if kind == "run":
            examples.append((language, text, None))
        else:
            assert examples and examples[-1][2] is None, "a 'prints' block follows the block that prints it"
            examples[-1] = (*examples[-1][:2], text)
    return examples


def test_guide_examples_run_against_a_real_server_and_print_what_it_says(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from harmony_responses.serve.options import BY_NAME
    from reliability.server_process import server_process

    examples = _guide_examples()
    code = "\n".join(text for _, text, _ in examples)
    for api in ("responses.create(", "responses.stream(", "curl -sN", "Runner.run_sync(", "set_default_openai_client("):
        assert api in code, f"the guide's examples no longer show {api}"
    # The guide says the default port; the test's server listens on a free one.
    address = f"127.0.0.1:{BY_NAME['port'].default}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "HARMONY_RESPONSES_"))}
    # As a newcomer's shell has it: the venv's commands are not on PATH (the guide says where they are).
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    with server_process(["--engine", "echo", "--store", f"sqlite:{tmp_path / 'store.sqlite3'}"]) as server:
        for i, (language, text, expected) in enumerate(examples):
            assert language in ("python", "bash"), (language, text)
            if "127.0.0.1:" in text:
                assert address in text, f"guide example {i + 1} does not use the default address {address}"
            script = tmp_path / f"example{i}.{'py' if language == 'python' else 'sh'}"
            script.write_text(text.replace(address, f"127.0.0.1:{server.port}"))
            command = [sys.executable, script] if language == "python" else ["bash", "-eo", "pipefail", script]
            # From the checkout's folder, where the guide's commands are run.
            done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
            assert done.returncode == 0, f"guide example {i + 1} exited {done.returncode}: {done.stderr}"
            if expected is not None:
                assert printed_pattern(expected).fullmatch(done.stdout), (
                    f"guide example {i + 1} printed:\n{done.stdout}"
                )


def test_the_guide_builds_without_warnings(tmp_path: Path) -> None:
    import subprocess

    # scripts/docs as a newcomer runs it (mkdocs build --strict), into a folder of the test's.
    site = tmp_path / "site"
    done = subprocess.run([ROOT / "scripts" / "docs", "--site-dir", site], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # mkdocs's own log lines ("WARNING -  …"); what the install step may log is not the guide's.
    assert not re.search(r"^WARNING +-", done.stderr, re.M) and "Documentation built" in done.stderr, done.stderr
    # Every page of the nav became a page of the site, the generated options table included.
    built = {path.relative_to(site).as_posix() for path in site.rglob("*.html")}
    assert {path.relative_to(ROOT / "docs").with_suffix(".html").as_posix() for path in pages()} <= built
    assert "HARMONY_RESPONSES_ENGINE_URL" in (site / "reference" / "options.html").read_text()
    # The translator's state diagram is a diagram (Material draws a pre.mermaid), not a block of its source.
    states = (site / "translator-states.html").read_text()
    assert '<pre class="mermaid"><code>stateDiagram-v2' in states and "language-mermaid" not in states
    # Offline: no web fonts or scripts from elsewhere (the theme's default fonts come from Google).
    assert "fonts.googleapis.com" not in (site / "index.html").read_text()


DIAGRAM_PAGE = """
import chromium from "@sparticuz/chromium";
import { chromium as playwright } from "playwright-core";
const browser = await playwright.launch({ executablePath: await chromium.executablePath(), args: chromium.args });
try {
  const context = await browser.newContext();
  const requested = [];
  context.on("request", (request) => requested.push(request.url()));
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (error) => errors.push(error.message));
  await page.goto(process.argv[2]);
  // Material swaps the pre.mermaid for a div.mermaid once mermaid has drawn the diagram into it.
  const drawn = await page.waitForSelector("div.mermaid", { timeout: 60000 });
  const box = await drawn.boundingBox();
  console.log(JSON.stringify({
    requested, errors, height: box.height, source: await page.$$eval("pre.mermaid", (nodes) => nodes.length),
  }));
} finally {
  await browser.close();
}
"""


def test_the_state_diagram_is_drawn_offline_in_chromium(tmp_path: Path) -> None:
    import functools
    import http.server
    import subprocess
    import threading

    from chromium import ensure, node

    ensure()
    site = tmp_path / "site"
    done = subprocess.run([ROOT / "scripts" / "docs", "--site-dir", site], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        root = f"http://127.0.0.1:{server.server_address[1]}/"
        try:
            seen = node(DIAGRAM_PAGE, root + "translator-states.html")
        finally:
            server.shutdown()
    assert seen.returncode == 0, seen.stderr
    page = json.loads(seen.stdout)
    assert page["errors"] == [] and page["source"] == 0 and page["height"] > 100, page
    # Drawn by the site's own copy of mermaid: nothing was asked of another host (unpkg.com, a font CDN).
    assert root + "javascripts/mermaid.min.js" in page["requested"]
    assert all(url.startswith(root) for url in page["requested"]), page["requested"]


def test_scripts_docs_serve_serves_the_guide() -> None:
    import subprocess
    import time

    import httpx

    from reliability.server_process import free_port

    port = free_port()
    process = subprocess.Popen(
        [ROOT / "scripts" / "docs", "serve", "--dev-addr", f"127.0.0.1:{port}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, process.communicate()[1]
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/reference/options.html", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "scripts/docs serve did not answer within 120 s"
                time.sleep(0.2)
        assert answer.status_code == 200 and "HARMONY_RESPONSES_ENGINE_URL" in answer.text
    finally:
        process.terminate()
        process.communicate(timeout=30)  # and its stderr pipe closed


def test_every_guide_page_is_in_the_nav() -> None:
    # mkdocs only logs a page left out of the nav; a reader of the site would never find it.
    assert sorted(pages()) == sorted((ROOT / "docs").rglob("*.md"))


def test_readme_is_a_short_landing_page_whose_blocks_are_the_guide_s() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 150
    assert "scripts/serve" in readme and "scripts/test" in readme
    # Each block is one the guide has, word for word, so that the guide's tests check what the README shows.
    guide = "\n".join(path.read_text() for path in pages())
    blocks = re.findall(r"^```\w*\n.*?^```$", readme, re.S | re.M)
    assert len(blocks) >= 4, blocks
    for block in blocks:
        assert block in guide, f"the README shows a block the guide does not:\n{block}"
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        assert (ROOT / target).is_file(), f"the README links to {target}, which does not exist"
