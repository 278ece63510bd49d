"""MkDocs hooks (mkdocs.yml ``hooks``): the guide's diagrams are drawn by mermaid served with the site.

Material draws a ``mermaid`` block with the ``mermaid`` script and, when the page has none, loads it from
unpkg.com; the guide works offline, so the site ships its own copy: ``mermaid.min.js`` from the npm
package pinned in package.json (``scripts/install`` runs ``npm ci``), copied into the built site and named
in ``extra_javascript``, which Material then uses instead. ``MERMAID_JS`` names another copy (scripts/docs
sets it when node_modules has none).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
MERMAID = ROOT / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
SITE_PATH = "javascripts/mermaid.min.js"


def on_post_build(config: Any) -> None:
    source = Path(os.environ.get("MERMAID_JS") or MERMAID)
    if not source.is_file():
        raise PluginError(f"{source} is missing: build with scripts/docs (it installs package.json's mermaid)")
    target = Path(config["site_dir"]) / SITE_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
