"""The Responses API's tool types as this server treats them: one list for validation, rendering and translation.

``web_search`` and ``web_search_preview`` come with dated variants (``web_search_2025_08_26``); the API adds
new dates, so they are matched by pattern. Types the server cannot run get a 400 naming ``tools[i].type``.
"""

from __future__ import annotations

import re

__all__ = ["NAME_PATTERN", "UNSUPPORTED_TOOL_TYPES", "is_web_search"]

# OpenAI's pattern for function and response-format names. It also keeps names safe to splice into a Harmony
# header (no spaces, no `<|...|>`): a recipient with a space would end the header's recipient early.
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]+$")

_WEB_SEARCH_TYPE = re.compile(r"^web_search(_preview)?(_\d{4}_\d{2}_\d{2})?$")

UNSUPPORTED_TOOL_TYPES = frozenset(
    {
        "image_generation",
        "computer_use_preview",
        "computer_use",
        "computer",
        "local_shell",
        "shell",
        "apply_patch",
        "programmatic_tool_calling",
        "browser_search",
    }
)


def is_web_search(kind: object) -> bool:
    return isinstance(kind, str) and _WEB_SEARCH_TYPE.match(kind) is not None
