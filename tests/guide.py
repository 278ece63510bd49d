"""The user guide as the tests read it: docs/'s pages in the order of the site's nav (mkdocs.yml), and their
sections. What moved out of the README is checked where it now lives."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _nav_files(nav: list) -> list[str]:
    files: list[str] = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            files.extend(_nav_files(value) if isinstance(value, list) else [value])
    return files


class _Config(yaml.SafeLoader):
    """mkdocs.yml as data: its ``!!python/name:`` tags (a superfences fence's formatter) stay their names."""


_Config.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix)


def pages() -> list[Path]:
    """Every page of the guide, in the order a reader meets them."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Config)  # a SafeLoader
    return [DOCS / name for name in _nav_files(config["nav"])]


def page(name: str) -> str:
    """The text of ``docs/NAME``."""
    return (DOCS / name).read_text()


def section(name: str, title: str) -> str:
    """The section of ``docs/NAME`` headed ``title`` (at any level), up to the next heading of its level or
    above; a heading line inside a fenced block is not one."""
    text = page(name)
    headings = [(m.start(), len(m.group(1)), m.group(2)) for m in re.finditer(r"^(#{1,6}) (.*)$", text, re.M)]
    fences = [m.span() for m in re.finditer(r"^```.*?^```$", text, re.S | re.M)]
    headings = [h for h in headings if not any(a < h[0] < b for a, b in fences)]
    for i, (start, level, heading) in enumerate(headings):
        if heading == title:
            end = next((s for s, lvl, _ in headings[i + 1 :] if lvl <= level), len(text))
            return text[start:end]
    raise AssertionError(f"docs/{name} has no section {title!r}")


def blocks(name: str) -> list[tuple[str, str, str | None]]:
    """The fenced blocks of ``docs/NAME`` in order: (language, text, the ``<!-- test: KIND -->`` mark before it
    or None)."""
    pattern = r"(?:<!-- test: (\w+) -->\n)?^```(\w*)\n(.*?)^```$"
    return [(lang, text, mark or None) for mark, lang, text in re.findall(pattern, page(name), re.S | re.M)]


def commands(block: str) -> list[list[str]]:
    """Each command of a bash block, as words: continuations joined, comments dropped."""
    found = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            found.append(words)
    return found


def printed_pattern(expected: str) -> re.Pattern[str]:
    """What a block says a command prints, as a pattern: "…" stands for what is left out (a line of it alone,
    any lines)."""
    pattern = ""
    for line in expected.splitlines():
        pattern += r"(?:.*\n)*?" if line == "…" else ".*?".join(map(re.escape, line.split("…"))) + r"\n"
    return re.compile(pattern)
