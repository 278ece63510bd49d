"""Subprocesses of the real-engine tier: our server (``harmony-responses serve``) and an engine server.

Shared by every engine's tests (``tests/real_engines/<engine>/``). Both kinds run exactly as a user runs
them, on 127.0.0.1, with their output in a log file that a failure message quotes:

- ``start_gateway(engine_spec, ...)`` starts ``.venv/bin/harmony-responses serve --engine SPEC --port 0``
  and waits for its banner (``listening on http://127.0.0.1:PORT/v1``: the port is the one the server
  bound, so there is no race for a free port); the ``Gateway`` gives the base URL, ``openai.OpenAI`` /
  ``openai.AsyncOpenAI`` clients and ``stop()``; with ``record=True`` also what the server got from the
  engine (``records()``: the ``--record`` file). ``gateway(...)`` is the same as a context manager.
- ``run_gateway_until_exit(...)`` runs the server when it is expected to refuse to start (a start-up
  check failing) and returns its exit status and output.
- ``start_engine(argv, ...)`` starts an engine command (``{port}`` in ``argv`` is replaced by a free
  loopback port) and waits until ``GET <health path>`` answers 200; ``EngineProcess`` gives its URL,
  log and ``stop()``. ``engine(...)`` is the context-manager form.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai

__all__ = [
    "ROOT",
    "EngineProcess",
    "Gateway",
    "GatewayFailed",
    "engine",
    "free_port",
    "gateway",
    "run_gateway_until_exit",
    "start_engine",
    "start_gateway",
    "wait_http",
]

ROOT = Path(__file__).resolve().parents[2]
SERVE = ROOT / ".venv" / "bin" / "harmony-responses"
DEFAULT_MODEL = "gpt-oss-20b"
_BANNER = re.compile(rb"listening on http://(?:127\.0\.0\.1|localhost|\[::1\]):(\d+)/v1")
# How much of a log a failure message quotes.
_LOG_TAIL = 4000


class GatewayFailed(RuntimeError):
    """A subprocess did not come up: it exited, or did not get ready in time (the message quotes its log)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for engines that cannot bind port 0 and say which)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return "(no log)"
    return data[-_LOG_TAIL:].decode("utf-8", "replace")


def _stop(process: subprocess.Popen[bytes], timeout: float) -> None:
    if process.poll() is not None:
        return
    # The process group: engines (llama-server in router mode, vLLM, SGLang) start children of their own.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout)


def _log_file(log_dir: Path | None, stem: str) -> Path:
    directory = log_dir or Path(tempfile.mkdtemp(prefix="real-engines-"))
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f"{stem}-", suffix=".log", dir=directory)
    os.close(fd)
    return Path(name)


def _popen(argv: Sequence[str], log: Path, env: dict[str, str] | None, cwd: Path | None) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,  # its own process group, stopped as a whole
        )


# ---------------------------------------------------------------------------------------------- gateway


@dataclass
class Gateway:
    """A running ``harmony-responses serve``: where it listens, clients for it, and its log."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path
    api_key: str = "unused"
    _clients: list[openai.OpenAI | openai.AsyncOpenAI] = field(default_factory=list, repr=False)
    # The --record file when started with ``record=True``: every engine call the server made.
    record: Path | None = None

    @property
    def url(self) -> str:
        """The server's root (``/health``, ``/v1/...`` below it)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI client's ``base_url`` (ends in ``/v1``)."""
        return f"{self.url}/v1"

    def client(self, **kwargs: object) -> openai.OpenAI:
        """An ``openai.OpenAI`` for this server (no retries: a test sees the first answer)."""
        options: dict[str, object] = {
            "base_url": self.base_url,
            "api_key": self.api_key,
            "max_retries": 0,
            "timeout": 120.0,
        }
        options.update(kwargs)
        client = openai.OpenAI(**options)  # type: ignore[arg-type]
        self._clients.append(client)
        return client

    def async_client(self, **kwargs: object) -> openai.AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` for this server (close it in the test's event loop: ``await c.close()``)."""
        options: dict[str, object] = {
            "base_url": self.base_url,
            "api_key": self.api_key,
            "max_retries": 0,
            "timeout": 120.0,
        }
        options.update(kwargs)
        return openai.AsyncOpenAI(**options)  # type: ignore[arg-type]

    def output(self) -> str:
        """The server's log so far (stdout and stderr)."""
        return _tail(self.log)

    def alive(self) -> bool:
        return self.process.poll() is None

    def records(self) -> list[dict[str, object]]:
        """The engine calls recorded so far (``record=True``), oldest first: ids, chunks, finish, counts."""
        if self.record is None or not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line.strip()]

    def stop(self, timeout: float = 15.0) -> None:
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()  # type: ignore[union-attr]
        self._clients.clear()
        _stop(self.process, timeout)


def _serve_argv(engine_spec: str, model: str | Sequence[str], data_dir: Path, args: Sequence[str]) -> list[str]:
    models = [model] if isinstance(model, str) else list(model)
    argv = [str(SERVE), "serve", "--engine", engine_spec, "--host", "127.0.0.1", "--port", "0"]
    for name in models:
        argv += ["--model", name]
    # A store of its own per server: tests never share state, and never touch the user's data dir.
    return argv + ["--data-dir", str(data_dir), *args]


def start_gateway(
    engine_spec: str,
    *,
    model: str | Sequence[str] = DEFAULT_MODEL,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
    log_dir: Path | None = None,
    record: bool = False,
) -> Gateway:
    """Start ``harmony-responses serve --engine ENGINE_SPEC`` and wait for its banner.

    Args:
        engine_spec: the ``--engine`` value, e.g. ``"llamacpp:http://127.0.0.1:8123"``.
        model: the ``--model`` name(s) clients use.
        args: further ``serve`` flags (``--engine-model``, ``--engine-start-wait``, ``--context-window``…).
        env: variables added to the environment.
        timeout: how long the start-up (the engine check included) may take.
        log_dir: where the log goes (default: a new temporary folder).
        record: also ``--record`` every engine call to a file next to the log (``Gateway.records()``).

    Raises:
        GatewayFailed: it exited before listening, or did not listen in time (quoting its output).
    """
    log = _log_file(log_dir, "serve")
    data_dir = Path(tempfile.mkdtemp(prefix="data-", dir=log.parent))
    record_path = log.with_suffix(".record.jsonl") if record else None
    if record_path is not None:
        args = [*args, "--record", str(record_path)]
    process = _popen(_serve_argv(engine_spec, model, data_dir, args), log, env, ROOT)
    deadline = time.monotonic() + timeout
    while True:
        match = _BANNER.search(log.read_bytes())
        if match:
            return Gateway(process=process, port=int(match[1]), log=log, record=record_path)
        if process.poll() is not None:
            raise GatewayFailed(f"harmony-responses serve exited with {process.returncode}:\n{_tail(log)}")
        if time.monotonic() > deadline:
            _stop(process, 10.0)
            raise GatewayFailed(f"harmony-responses serve did not listen within {timeout:g} s:\n{_tail(log)}")
        time.sleep(0.05)


@contextlib.contextmanager
def gateway(engine_spec: str, **kwargs: object) -> Iterator[Gateway]:
    """``start_gateway`` as a context manager: the server is stopped on the way out."""
    gw = start_gateway(engine_spec, **kwargs)  # type: ignore[arg-type]
    try:
        yield gw
    finally:
        gw.stop()


def run_gateway_until_exit(
    engine_spec: str,
    *,
    model: str | Sequence[str] = DEFAULT_MODEL,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> tuple[int | None, str]:
    """Run ``serve`` expecting it to refuse to start: (exit status, output); status None if it listened.

    A server that listens after all is stopped, and None returned with its output.
    """
    log = _log_file(None, "serve")
    data_dir = Path(tempfile.mkdtemp(prefix="data-", dir=log.parent))
    process = _popen(_serve_argv(engine_spec, model, data_dir, args), log, env, ROOT)
    deadline = time.monotonic() + timeout
    try:
        while process.poll() is None:
            if _BANNER.search(log.read_bytes()) or time.monotonic() > deadline:
                return None, _tail(log)
            time.sleep(0.05)
        return process.returncode, _tail(log)
    finally:
        _stop(process, 10.0)


# ---------------------------------------------------------------------------------------------- engine


@dataclass
class EngineProcess:
    """A running engine server on 127.0.0.1: its URL, log and process."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return _tail(self.log)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        _stop(self.process, timeout)


def wait_http(
    url: str,
    *,
    timeout: float,
    ready: Callable[[httpx.Response], bool] = lambda r: r.status_code == 200,
    process: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> httpx.Response:
    """Poll ``GET url`` until ``ready(response)``; GatewayFailed when ``process`` exits or time runs out."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        if process is not None and process.poll() is not None:
            raise GatewayFailed(f"{url}: the process exited with {process.returncode}:\n{_tail(log) if log else ''}")
        try:
            response = httpx.get(url, timeout=5.0)
            if ready(response):
                return response
            last = f"HTTP {response.status_code}: {response.text[:200]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        if time.monotonic() > deadline:
            raise GatewayFailed(f"{url} not ready within {timeout:g} s ({last}):\n{_tail(log) if log else ''}")
        time.sleep(0.1)


def start_engine(
    argv: Sequence[str],
    *,
    health: str | None = "/health",
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    port: int | None = None,
    log_dir: Path | None = None,
    name: str = "engine",
) -> EngineProcess:
    """Start an engine command on a free loopback port and wait until ``GET health`` answers 200.

    Args:
        argv: the command; every ``{port}`` in it becomes the port.
        health: the path polled for readiness; None returns at once (a test of an engine still loading).
        port: use this port instead of a free one.

    Raises:
        GatewayFailed: the command exited, or did not get ready in time (quoting its log).
    """
    port = port or free_port()
    log = _log_file(log_dir, name)
    process = _popen([a.replace("{port}", str(port)) for a in argv], log, env, cwd)
    started = EngineProcess(process=process, port=port, log=log)
    if health is not None:
        try:
            wait_http(started.url + health, timeout=timeout, process=process, log=log)
        except BaseException:
            started.stop()
            raise
    return started


@contextlib.contextmanager
def engine(argv: Sequence[str], **kwargs: object) -> Iterator[EngineProcess]:
    """``start_engine`` as a context manager: the engine is stopped on the way out."""
    started = start_engine(argv, **kwargs)  # type: ignore[arg-type]
    try:
        yield started
    finally:
        started.stop()
