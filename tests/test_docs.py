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


def test_readme_options_table_is_the_declared_one() -> None:
    from harmony_responses.serve.options import markdown_table

    readme = (ROOT / "README.md").read_text()
    start = readme.index("-->\n", readme.index("<!-- options: generated")) + 4
    end = readme.index("<!-- options: end -->")
    assert readme[start:end] == markdown_table(), "run: .venv/bin/python -m harmony_responses.serve.options"


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
