"""Generated documentation stays in step with the code it is generated from."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_translator_state_diagram_is_current() -> None:
    spec = importlib.util.spec_from_file_location("state_diagram", ROOT / "scripts" / "state-diagram.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    current = (ROOT / "docs" / "translator-states.md").read_text()
    assert current == module.render(), "run: .venv/bin/python scripts/state-diagram.py"
