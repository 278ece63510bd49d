"""A real ``harmony-responses serve`` subprocess on 127.0.0.1, for tests that need the whole process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

BIN = Path(sys.executable).parent / "harmony-responses"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerProcess:
    process: subprocess.Popen[str]
    port: int
    log: IO[str] | None = None  # its stderr

    def stderr(self) -> str:
        """What the server wrote to stderr (once it has exited: the file's offset is shared with it)."""
        assert self.log is not None
        self.log.seek(0)
        return self.log.read()

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)


@contextmanager
def server_process(
    args: Sequence[str], *, env: dict[str, str] | None = None, preexec_fn: Callable[[], object] | None = None
) -> Iterator[ServerProcess]:
    """Start ``serve`` with ``args`` (plus a free port), wait until it answers, stop it at the end.

    ``preexec_fn`` runs in the child before ``serve`` starts (``subprocess.Popen``'s): to set a signal's
    disposition as a shell would, say.
    """
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HARMONY_RESPONSES_")}
    environment["HARMONY_RESPONSES_DATA_DIR"] = os.environ["HARMONY_RESPONSES_DATA_DIR"]
    environment.update(env or {})
    log = tempfile.TemporaryFile("w+")
    process = subprocess.Popen(
        [str(BIN), "serve", "--port", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
        env=environment,
        preexec_fn=preexec_fn,
    )
    server = ServerProcess(process, port, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                log.seek(0)
                raise AssertionError(f"serve exited {process.returncode}: {log.read()}")
            try:
                if httpx.get(f"{server.root}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("serve did not start within 60 s")
            time.sleep(0.1)
        yield server
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        log.close()
