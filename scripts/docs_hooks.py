"""MkDocs hooks (mkdocs.yml ``hooks``): the guide's diagrams are drawn by mermaid served with the site.

Material draws a ``mermaid`` block with the ``mermaid`` script and, when the page has none, loads it from
unpkg.com; the guide works offline, so the site ships its own copy: ``mermaid.min.js`` from the npm
package pinned in package.json (``scripts/install`` runs ``npm ci``), copied into the built site and named
in ``extra_javascript``, which Material then uses instead.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
MERMAID = ROOT / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
SITE_PATH = "javascripts/mermaid.min.js"


def on_post_build(config: Any) -> None:
    if not MERMAID.is_file():
        raise PluginError(f"{MERMAID} is missing: run scripts/install (it installs package.json's mermaid with npm)")
    target = Path(config["site_dir"]) / SITE_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(MERMAID, target)
