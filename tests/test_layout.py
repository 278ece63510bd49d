"""The package's layout is what the guide draws (docs/reference/architecture.md): the folders exist, and
imports run one way only.

A request passes through ``http/`` → ``request/`` → ``run/`` → ``render/``, ``engine/``, ``translate/``,
``tools/``, ``store/``; ``serve/`` wires them together. The HTTP layer reaches the packages below only
through ``run/``, and no package imports one above its own stage.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from guide import page

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "harmony_responses"

# package → the packages it must never import.
LOWER = {"render", "engine", "translate", "tools", "store"}
FORBIDDEN = {
    "http": LOWER | {"serve"},
    "request": {"http", "run", "serve", "render", "engine", "translate", "store"},
    "run": {"http", "serve"},
    **{name: {"http", "request", "run", "serve"} for name in LOWER},
    # Compilers of tool-call grammars, shared by request/ (what a strict schema may use) and engine/.
    "grammar": {"http", "request", "run", "serve", "render", "engine", "translate", "tools", "store"},
}


def _built() -> str:
    return page("reference/architecture.md")


def test_every_folder_and_module_the_guide_names_exists() -> None:
    section = _built()
    named = set(re.findall(r"`((?:[a-z_]+/)+(?:[a-z_]+\.py)?)`", section))
    assert {"http/", "request/", "run/", "render/", "engine/", "translate/", "tools/", "store/", "serve/"} <= named
    missing = sorted(path for path in named if not (PACKAGE / path).exists() and not (ROOT / path).exists())
    assert not missing, f"the guide's 'How it is built' names what does not exist: {missing}"


def test_the_guide_draws_the_stages_in_the_order_of_the_flow() -> None:
    rows = [line for line in _built().splitlines() if re.match(r"\| \d \|", line)]
    folders = [re.search(r"`([a-z_]+)/`", row).group(1) for row in rows]  # type: ignore[union-attr]
    assert folders == ["http", "request", "run", "render", "engine", "translate", "tools", "store"]


def _imported_packages(path: Path) -> set[str]:
    """The ``harmony_responses`` subpackages (or top-level modules) that the module at ``path`` imports."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts  # ("harmony_responses", "run", "loop")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(parts[: len(parts) - node.level + (1 if path.name == "__init__.py" else 0)])
                target = [*base, *(node.module.split(".") if node.module else [])]
            else:
                target = (node.module or "").split(".")
            names = [target] if node.module or not node.level else [[*target, a.name] for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        else:
            continue
        for name in names:
            if len(name) >= 2 and name[0] == "harmony_responses":
                found.add(name[1])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_run_one_way(package: str) -> None:
    wrong = {}
    for path in sorted((PACKAGE / package).rglob("*.py")):
        bad = (_imported_packages(path) & FORBIDDEN[package]) - {package}
        if bad:
            wrong[str(path.relative_to(PACKAGE))] = sorted(bad)
    assert not wrong, f"{package}/ must not import {sorted(FORBIDDEN[package])}: {wrong}"


def test_the_import_check_sees_relative_and_absolute_imports(tmp_path: Path) -> None:
    # The check above must be able to fail: a module importing the engine both ways is caught.
    module = PACKAGE / "http" / "app.py"
    found = _imported_packages(module)
    assert {"run", "request"} <= found
    assert "engine" in _imported_packages(PACKAGE / "run" / "loop.py")
    assert "store" in _imported_packages(PACKAGE / "run" / "stored.py")
