"""Request rendering: a Responses API request (a JSON-decoded dict) → Harmony prompt token ids.

Pure functions over openai_harmony; no I/O beyond loading the (offline) vocabulary once. The caller
checks ``len(RenderedPrompt.token_ids)`` against the context window (``truncation`` is the api layer's).
Modules: ``_request`` (assembly), ``_system`` (system message, reasoning effort, built-in namespaces),
``_developer`` (instructions, function tools, response formats), ``_tools`` (tools and tool_choice),
``_history`` (input items, chain-of-thought dropping), ``_schema_ts`` (JSON Schema → TypeScript),
``_tool_search`` (the search tool, deferred tools and what a search loads), ``_file_search`` (the
file_search namespace and the results the model reads).
"""

from ._errors import RenderError
from ._file_search import MAX_QUERIES as FILE_SEARCH_MAX_QUERIES
from ._file_search import MSEARCH_PARAMETERS as FILE_SEARCH_PARAMETERS
from ._file_search import results_text as file_search_results_text
from ._history import PendingMcpCall
from ._request import RenderedPrompt, answer_tool_search, render_request
from ._system import DEFAULT_PYTHON_DESCRIPTION

__all__ = [
    "DEFAULT_PYTHON_DESCRIPTION",
    "FILE_SEARCH_MAX_QUERIES",
    "FILE_SEARCH_PARAMETERS",
    "PendingMcpCall",
    "RenderError",
    "RenderedPrompt",
    "answer_tool_search",
    "file_search_results_text",
    "render_request",
]
