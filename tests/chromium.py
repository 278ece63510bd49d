"""Headless Chromium for the tests that look at a page as a user would (the trace page, the guide's diagrams).

Chromium is ``@sparticuz/chromium``'s binary driven by ``playwright-core``, both from npm, installed at
test setup (not at run time) into a cache outside the checkout keyed by their versions; ``ensure`` skips
the test, naming the command to run, when they cannot be installed or Chromium cannot start here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

CHROMIUM = "153.0.0"  # @sparticuz/chromium (Chromium 153)
PLAYWRIGHT = "1.65.1"  # playwright-core
CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "harmony-responses"
    / f"trace-browser-chromium-{CHROMIUM}-playwright-core-{PLAYWRIGHT}"
)
INSTALL = f"npm install --prefix {CACHE} @sparticuz/chromium@{CHROMIUM} playwright-core@{PLAYWRIGHT}"
PROBE = (
    'import c from "@sparticuz/chromium"; import { chromium as p } from "playwright-core";'
    "const b = await p.launch({ executablePath: await c.executablePath(), args: c.args, headless: true });"
    "await b.close();"
)


def node(script: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run an ES module from the cache folder, where its imports resolve (a copy, removed after)."""
    path = CACHE / f"run-{uuid.uuid4().hex}.mjs"
    path.write_text(script)
    try:
        return subprocess.run(["node", str(path), *args], capture_output=True, text=True, timeout=timeout, cwd=CACHE)
    finally:
        path.unlink()


def ensure() -> None:
    """Chromium installed and able to start here, else the calling test is skipped."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip(f"node and npm are needed for the browser test: install them, then run {INSTALL}")
    if not (CACHE / "node_modules" / "playwright-core").is_dir():
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=CACHE.name + ".", dir=CACHE.parent))
        (staging / "package.json").write_text('{"private": true}\n')
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(staging),
             f"@sparticuz/chromium@{CHROMIUM}", f"playwright-core@{PLAYWRIGHT}"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            pytest.skip(f"could not install Chromium from npm ({done.stderr.strip()[-300:]}): run {INSTALL}")
        try:
            staging.rename(CACHE)  # whole or not at all: a concurrent run may have won, which is as good
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    probe = node(PROBE, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"headless Chromium cannot start here ({probe.stderr.strip()[-300:]}); check with: {INSTALL}")
