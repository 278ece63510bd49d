"""Request validation for ``POST /v1/responses``, worded as the API words it (responses-protocol.md §7).

``validate_request(body)`` checks the request surface this module owns — every top-level parameter's type,
range and enum, tool declarations, ``tool_choice``, ``text.format`` and strict schemas — and returns the
few values the endpoint acts on (``RequestOptions``). What an input item means is render's business
(it raises ``RenderError`` naming ``input[i]…``); here an item only has to be an object.

Rules the API follows and so do we: unknown top-level fields are ignored (Codex sends ``client_metadata``);
``null`` is accepted for every optional field; ``bool`` is never an integer. Messages follow the API's
patterns: ``Missing required parameter: 'model'.``, ``Invalid type for 'top_p': expected a decimal, but
got a string instead.``, ``Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16,
but got 1 instead.``, ``Invalid value: 'x'. Supported values are: 'auto' and 'disabled'.``

State parameters are checked for shape here (``background`` needs ``store``; ``conversation`` excludes
``previous_response_id``) and resolved against the store in ``resolve.py``. ``context_management`` is checked
here too (its one type, ``compaction``, and ``compact_threshold`` ≥ 1), as are the two compaction items: a
``compaction_trigger`` must be the last input item, and a ``compaction`` item needs its ``encrypted_content``
(which ``resolve.py`` opens).
Features that belong to later issues are refused with a clear 400 rather than silently ignored:
``prompt`` templates, and built-in tools
the server cannot run yet (``tools[i].type`` named). ``web_search`` declarations (``tool_types.is_web_search``)
are always accepted: the model gets Harmony's browser when the server has a search backend, and otherwise
they are echoed and not offered to the model (Codex sends ``{"type": "web_search", "external_web_access":
false}`` with every request and must not get a 400). ``tool_choice`` may force them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import APIError
from ..grammar import schema_problem as grammar_schema_problem
from ..ids import id_problem
from ..quotas import requestable_tiers
from ..tool_types import NAME_PATTERN, UNSUPPORTED_TOOL_TYPES, is_web_search
from ..tools.file_search import FilterError, check_filter
from ..tools.mcp import mcp_tool_problem
from .schema import SchemaProblem, check_json_schema, strict_schema_problem

__all__ = [
    "INCLUDABLE",
    "REASONING_EFFORTS",
    "RequestOptions",
    "check_id",
    "check_items",
    "check_metadata",
    "conversation_items",
    "string_too_long",
    "validate_request",
]

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
REASONING_SUMMARIES = ("auto", "concise", "detailed")
INCLUDABLE = (
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
)
LOGPROBS_INCLUDE = "message.output_text.logprobs"
ENCRYPTED_REASONING_INCLUDE = "reasoning.encrypted_content"

# web_search (any dated variant) is always accepted; it is offered to the model only when the server has a
# search backend (run/start.py). Types the server cannot run get a 400 naming ``tools[i].type``.
SUPPORTED_TOOL_TYPES = (
    "function",
    "custom",
    "namespace",
    "tool_search",
    "web_search",
    "web_search_preview",
    "file_search",
    "mcp",
    "code_interpreter",
)
CUSTOM_SYNTAXES = ("lark", "regex")
CODE_INTERPRETER_MEMORY_LIMITS = ("1g", "4g", "16g", "64g")

MAX_NAME_LENGTH = 64
MIN_OUTPUT_TOKENS = 16
MAX_TOP_LOGPROBS = 20
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
# Input items per request. The API states no limit; a long agent session has a few thousand items, and
# 100,000 tiny ones (4 MB) kept the event loop busy for 20 s, starving every other stream.
MAX_INPUT_ITEMS = 10_000
MAX_CONVERSATION_ITEMS = 20  # the Conversations API's own limit per request


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestOptions:
    """What the endpoint acts on, read from a valid request.

    ``top_logprobs`` is None unless ``include`` asks for ``message.output_text.logprobs``; then it is the
    request's ``top_logprobs`` (default 0). ``strict_schema`` is ``(name, schema)`` for a strict
    ``json_schema`` format, whose final answer the server checks.
    """

    model: str
    stream: bool
    max_output_tokens: int | None
    temperature: float | None
    top_p: float | None
    top_logprobs: int | None
    encrypted_reasoning: bool
    truncation: str
    response_schema: dict[str, Any] | None
    strict_schema: tuple[str, dict[str, Any]] | None
    max_tool_calls: int | None = None
    include: frozenset[str] = frozenset()
    # context_management's compaction entry: compact first when the rendered prompt is longer (run/compact.py).
    compact_threshold: int | None = None


# ---------------------------------------------------------------------------------------- wording


def _kind(value: object) -> str:
    """The API's name for a JSON value's type, with its article."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _number(value: float) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() and abs(value) < 1e16 else str(value)


def _invalid_type(param: str, expected: str, value: object) -> APIError:
    return APIError(
        f"Invalid type for '{param}': expected {expected}, but got {_kind(value)} instead.",
        param=param,
        code="invalid_type",
    )


def string_too_long(param: str, limit: int, length: int) -> APIError:
    return APIError(
        f"Invalid '{param}': string too long. Expected a string with maximum length {limit}, but got a string "
        f"with length {length} instead.",
        param=param,
        code="string_above_max_length",
    )


def _missing(param: str) -> APIError:
    return APIError(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")


def _quote_list(values: Sequence[str]) -> str:
    quoted = [f"'{v}'" for v in values]
    if len(quoted) <= 2:
        return " and ".join(quoted)
    return ", ".join(quoted[:-1]) + ", and " + quoted[-1]


def _invalid_value(param: str, value: object, supported: Sequence[str]) -> APIError:
    shown = value if isinstance(value, str) else repr(value)
    return APIError(
        f"Invalid value: '{shown}'. Supported values are: {_quote_list(supported)}.",
        param=param,
        code="invalid_value",
    )


def _unsupported(param: str, message: str) -> APIError:
    return APIError(message, param=param, code="unsupported_parameter")


# ---------------------------------------------------------------------------------------- primitives


def _opt_str(body: Mapping[str, Any], key: str, param: str | None = None) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise _invalid_type(param or key, "a string", value)
    return value


def _required_str(body: Mapping[str, Any], key: str, param: str) -> str:
    value = _opt_str(body, key, param)
    if value is None:
        raise _missing(param)
    return value


def _opt_bool(body: Mapping[str, Any], key: str, param: str | None = None) -> bool | None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise _invalid_type(param or key, "a boolean", value)
    return value


def _opt_object(body: Mapping[str, Any], key: str, param: str | None = None) -> dict[str, Any] | None:
    value = body.get(key)
    if value is not None and not isinstance(value, dict):
        raise _invalid_type(param or key, "an object", value)
    return value


def _opt_array(body: Mapping[str, Any], key: str, param: str | None = None) -> list[Any] | None:
    value = body.get(key)
    if value is not None and not isinstance(value, list):
        raise _invalid_type(param or key, "an array", value)
    return value


def _opt_enum(body: Mapping[str, Any], key: str, supported: Sequence[str], param: str | None = None) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _invalid_type(param or key, "a string", value)
    if value not in supported:
        raise _invalid_value(param or key, value, supported)
    return value


def _opt_int(
    body: Mapping[str, Any], key: str, *, minimum: int | None = None, maximum: int | None = None
) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid_type(key, "an integer", value)
    if minimum is not None and value < minimum:
        raise APIError(
            f"Invalid '{key}': integer below minimum value. Expected a value >= {minimum}, but got {value} instead.",
            param=key,
            code="integer_below_min_value",
        )
    if maximum is not None and value > maximum:
        raise APIError(
            f"Invalid '{key}': integer above maximum value. Expected a value <= {maximum}, but got {value} instead.",
            param=key,
            code="integer_above_max_value",
        )
    return value


def _opt_decimal(body: Mapping[str, Any], key: str, *, minimum: float, maximum: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid_type(key, "a decimal", value)
    if math.isnan(value) or value < minimum:
        raise APIError(
            f"Invalid '{key}': decimal below minimum value. Expected a value >= {_number(minimum)}, "
            f"but got {_number(value)} instead.",
            param=key,
            code="decimal_below_min_value",
        )
    if value > maximum:
        raise APIError(
            f"Invalid '{key}': decimal above maximum value. Expected a value <= {_number(maximum)}, "
            f"but got {_number(value)} instead.",
            param=key,
            code="decimal_above_max_value",
        )
    return float(value)


def _check_name(value: object, param: str) -> str:
    if value is None:
        raise _missing(param)
    if not isinstance(value, str):
        raise _invalid_type(param, "a string", value)
    if not value:
        raise APIError(
            f"Invalid '{param}': empty string. Expected a string with minimum length 1, but got an empty string "
            "instead.",
            param=param,
            code="empty_string",
        )
    if len(value) > MAX_NAME_LENGTH:
        raise string_too_long(param, MAX_NAME_LENGTH, len(value))
    if not NAME_PATTERN.match(value):
        raise APIError(
            f"Invalid '{param}': string does not match pattern. Expected a string that matches the pattern "
            f"'{NAME_PATTERN.pattern}'.",
            param=param,
            code="invalid_value",
        )
    return value


# ---------------------------------------------------------------------------------------- parameters


def check_metadata(body: Mapping[str, Any]) -> None:
    """Validate ``body["metadata"]`` (≤ 16 string pairs): for the conversations endpoints too."""
    _check_metadata(body)


def _check_metadata(body: Mapping[str, Any]) -> None:
    metadata = _opt_object(body, "metadata")
    if metadata is None:
        return
    if len(metadata) > MAX_METADATA_PAIRS:
        raise APIError(
            f"Invalid 'metadata': too many properties. Expected an object with at most {MAX_METADATA_PAIRS} "
            f"properties, but got an object with {len(metadata)} properties instead.",
            param="metadata",
            code="object_above_max_properties",
        )
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY:
            raise APIError(
                f"Invalid 'metadata': key too long. Expected keys with maximum length {MAX_METADATA_KEY}, "
                f"but got a key with length {len(key)} instead.",
                param="metadata",
                code="string_above_max_length",
            )
        param = f"metadata.{key}"
        if not isinstance(value, str):
            raise _invalid_type(param, "a string", value)
        if len(value) > MAX_METADATA_VALUE:
            raise string_too_long(param, MAX_METADATA_VALUE, len(value))


def _check_function(tool: Mapping[str, Any], param: str) -> str:
    name = _check_name(tool.get("name"), f"{param}.name")
    _opt_str(tool, "description", f"{param}.description")
    _opt_bool(tool, "defer_loading", f"{param}.defer_loading")
    strict = _opt_bool(tool, "strict", f"{param}.strict")
    parameters = _opt_object(tool, "parameters", f"{param}.parameters")
    if parameters is not None:
        _schema_error(check_json_schema(parameters), f"Invalid schema for function '{name}'", param, "parameters")
        if strict:
            _schema_error(
                strict_schema_problem(parameters),
                f"Invalid schema for function '{name}'",
                param,
                "parameters",
                code="invalid_function_parameters",
            )
            # The engines hold a strict function's arguments to a grammar of its schema: what that grammar
            # cannot express is refused, as the API refuses what its strict mode does not support.
            _schema_error(
                grammar_schema_problem(parameters),
                f"Invalid schema for function '{name}'",
                param,
                "parameters",
                code="invalid_function_parameters",
            )
    return name


def _schema_error(
    problem: SchemaProblem | None, prefix: str, param: str, field: str, *, code: str = "invalid_json_schema"
) -> None:
    if problem is not None:
        raise APIError(f"{prefix}: {problem}", param=f"{param}.{field}", code=code)


def _check_tools(body: Mapping[str, Any]) -> set[str]:
    """Validate ``tools``; returns the function names the model may call (namespaced as ``ns.name`` too)."""
    tools = _opt_array(body, "tools")
    names: set[str] = set()
    for i, tool in enumerate(tools or ()):
        param = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _invalid_type(param, "an object", tool)
        kind = tool.get("type")
        if kind is None:
            raise _missing(f"{param}.type")
        if not isinstance(kind, str):
            raise _invalid_type(f"{param}.type", "a string", kind)
        if kind == "function":
            names.add(_check_function(tool, param))
        elif kind == "custom":
            _check_custom(tool, param)
        elif kind == "tool_search":
            _opt_enum(tool, "execution", ("server", "client"), f"{param}.execution")
            _opt_str(tool, "description", f"{param}.description")
            _opt_object(tool, "parameters", f"{param}.parameters")
        elif kind == "namespace":
            namespace = _check_name(tool.get("name"), f"{param}.name")
            _opt_str(tool, "description", f"{param}.description")
            inner = _opt_array(tool, "tools", f"{param}.tools")
            for j, member in enumerate(inner or ()):
                member_param = f"{param}.tools[{j}]"
                if not isinstance(member, dict):
                    raise _invalid_type(member_param, "an object", member)
                if member.get("type", "function") != "function":
                    raise APIError(
                        f"Invalid value for '{member_param}.type': this server supports only 'function' tools "
                        f"inside a namespace, got {member.get('type')!r}.",
                        param=f"{member_param}.type",
                        code="unsupported_value",
                    )
                function = _check_function(member, member_param)
                names.update((function, f"{namespace}.{function}"))
        elif is_web_search(kind):
            _check_web_search(tool, param)
        elif kind == "file_search":
            _check_file_search(tool, param)
        elif kind == "mcp":
            problem = mcp_tool_problem(tool, param)  # tools/mcp owns the mcp tool's fields
            if problem is not None:
                raise APIError(problem.message, param=problem.param, code=problem.code)
            _check_name(tool["server_label"], f"{param}.server_label")  # its pattern is checked there, not its length
        elif kind == "code_interpreter":
            _check_code_interpreter(tool, param)
        elif kind in UNSUPPORTED_TOOL_TYPES:
            raise APIError(
                f"Invalid value for '{param}.type': '{kind}' tools are not supported by this server: gpt-oss has "
                f"no such tool and this server does not run one. Supported tool types: "
                f"{_quote_list(SUPPORTED_TOOL_TYPES)}.",
                param=f"{param}.type",
                code="unsupported_value",
            )
        else:
            raise _invalid_value(f"{param}.type", kind, SUPPORTED_TOOL_TYPES)
    return names


def _check_custom(tool: Mapping[str, Any], param: str) -> str:
    """A custom (freeform) tool: ``name``, ``description``, ``format`` (``text``, or a ``grammar`` in lark or regex)."""
    name = _check_name(tool.get("name"), f"{param}.name")
    _opt_str(tool, "description", f"{param}.description")
    _opt_bool(tool, "defer_loading", f"{param}.defer_loading")
    fmt = _opt_object(tool, "format", f"{param}.format")
    if fmt is None:
        return name
    kind = fmt.get("type")
    if kind is None:
        raise _missing(f"{param}.format.type")
    if kind not in ("text", "grammar"):
        raise _invalid_value(f"{param}.format.type", kind, ("text", "grammar"))
    if kind == "grammar":
        for key in ("syntax", "definition"):
            if fmt.get(key) is None:
                raise _missing(f"{param}.format.{key}")
        if fmt["syntax"] not in CUSTOM_SYNTAXES:
            raise _invalid_value(f"{param}.format.syntax", fmt["syntax"], CUSTOM_SYNTAXES)
        if not isinstance(fmt["definition"], str):
            raise _invalid_type(f"{param}.format.definition", "a string", fmt["definition"])
    return name


def _custom_names(body: Mapping[str, Any]) -> set[str]:
    tools = body.get("tools")
    return {t["name"] for t in tools or () if isinstance(t, dict) and t.get("type") == "custom"}


def _check_web_search(tool: Mapping[str, Any], param: str) -> None:
    # The fields the openai types give web_search and web_search_preview: the tool is echoed in every
    # Response, so a field of the wrong shape would make the client's own types reject response.created.
    _opt_bool(tool, "external_web_access", f"{param}.external_web_access")
    _opt_enum(tool, "search_context_size", ("low", "medium", "high"), f"{param}.search_context_size")
    filters = _opt_object(tool, "filters", f"{param}.filters")
    if filters is not None:
        domains = _opt_array(filters, "allowed_domains", f"{param}.filters.allowed_domains")
        for j, domain in enumerate(domains or ()):
            if not isinstance(domain, str):
                raise _invalid_type(f"{param}.filters.allowed_domains[{j}]", "a string", domain)
    types = _opt_array(tool, "search_content_types", f"{param}.search_content_types")
    for j, value in enumerate(types or ()):
        if value not in ("text", "image"):
            raise _invalid_value(f"{param}.search_content_types[{j}]", value, ("text", "image"))
    location = _opt_object(tool, "user_location", f"{param}.user_location")
    if location is not None:
        _opt_enum(location, "type", ("approximate",), f"{param}.user_location.type")
        for key in ("city", "country", "region", "timezone"):
            _opt_str(location, key, f"{param}.user_location.{key}")


FILE_SEARCH_MAX_RESULTS = 50
FILE_SEARCH_RANKERS = ("auto", "default-2024-11-15")


def _check_file_search(tool: Mapping[str, Any], param: str) -> None:
    """``vector_store_ids`` (which must be the caller's: run/start.py looks them up), ``max_num_results``
    (1..50), ``filters`` (the comparison and compound filters ``/search`` takes), ``ranking_options``."""
    ids = tool.get("vector_store_ids")
    where = f"{param}.vector_store_ids"
    if ids is None:
        raise _missing(where)
    if not isinstance(ids, list):
        raise _invalid_type(where, "an array", ids)
    if not ids:
        raise APIError(f"Invalid '{where}': expected at least one vector store id.", param=where, code="invalid_value")
    for j, value in enumerate(ids):
        if not isinstance(value, str) or not value:
            raise _invalid_type(f"{where}[{j}]", "a non-empty string", value)
    limit = tool.get("max_num_results")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= FILE_SEARCH_MAX_RESULTS
    ):
        raise APIError(
            f"Invalid '{param}.max_num_results': expected an integer between 1 and {FILE_SEARCH_MAX_RESULTS}.",
            param=f"{param}.max_num_results",
            code="invalid_value",
        )
    filters = tool.get("filters")
    if filters is not None:
        try:
            check_filter(filters, f"{param}.filters")
        except FilterError as exc:
            raise APIError(str(exc), param=exc.param, code="invalid_value") from None
    ranking = _opt_object(tool, "ranking_options", f"{param}.ranking_options")
    if ranking is not None:
        _opt_enum(ranking, "ranker", FILE_SEARCH_RANKERS, f"{param}.ranking_options.ranker")
        _opt_decimal_at(ranking, "score_threshold", f"{param}.ranking_options.score_threshold")
        _opt_object(ranking, "hybrid_search", f"{param}.ranking_options.hybrid_search")


def _opt_decimal_at(body: Mapping[str, Any], key: str, param: str) -> None:
    value = body.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _invalid_type(param, "a number", value)
    if not 0 <= value <= 1:
        raise APIError(f"Invalid '{param}': expected a number between 0 and 1.", param=param, code="invalid_value")


def _check_code_interpreter(tool: Mapping[str, Any], param: str) -> None:
    """``container``: a container id (checked against live containers by run/start.py), or ``{type: auto}``.

    ``memory_limit`` and ``network_policy`` are accepted and not applied: the sandbox has its own limits and
    no network. ``file_ids`` would need a Files API this server does not have: a non-empty list is refused.
    """
    container = tool.get("container")
    where = f"{param}.container"
    if container is None:
        raise _missing(where)
    if isinstance(container, str):
        if not container:
            raise APIError(f"Invalid '{where}': empty string.", param=where, code="invalid_value")
        return
    if not isinstance(container, dict):
        raise _invalid_type(where, "a string or an object", container)
    kind = container.get("type")
    if kind is None:
        raise _missing(f"{where}.type")
    if kind != "auto":
        raise _invalid_value(f"{where}.type", kind, ("auto",))
    files = _opt_array(container, "file_ids", f"{where}.file_ids")
    if files:
        raise APIError(
            f"Invalid '{where}.file_ids': this server has no Files API, so containers cannot start with files.",
            param=f"{where}.file_ids",
            code="unsupported_value",
        )
    _opt_enum(container, "memory_limit", CODE_INTERPRETER_MEMORY_LIMITS, f"{where}.memory_limit")
    _opt_object(container, "network_policy", f"{where}.network_policy")


def _check_tool_choice(body: Mapping[str, Any], functions: set[str]) -> None:
    choice = body.get("tool_choice")
    if choice is None:
        return
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise _invalid_value("tool_choice", choice, ("none", "auto", "required"))
        if choice == "required" and not functions and not _custom_names(body):
            raise APIError(
                "Tool choice 'required' must be specified with 'tools' parameter that declares at least one function.",
                param="tool_choice",
                code="invalid_value",
            )
        return
    if not isinstance(choice, dict):
        raise _invalid_type("tool_choice", "a string or an object", choice)
    kind = choice.get("type")
    if kind is None:
        raise _missing("tool_choice.type")
    if kind == "function":
        name = _required_str(choice, "name", "tool_choice.name")
        namespace = choice.get("namespace")
        qualified = f"{namespace}.{name}" if isinstance(namespace, str) else name
        if qualified not in functions:
            raise APIError(
                f"Tool choice 'function' with name '{qualified}' not found in 'tools' parameter.",
                param="tool_choice.name",
                code="invalid_value",
            )
    elif kind == "custom":
        name = _required_str(choice, "name", "tool_choice.name")
        if name not in _custom_names(body):
            raise APIError(
                f"Tool choice 'custom' with name '{name}' not found in 'tools' parameter.",
                param="tool_choice.name",
                code="invalid_value",
            )
    elif kind == "allowed_tools":
        mode = choice.get("mode")
        if mode is None:
            raise _missing("tool_choice.mode")
        if mode not in ("auto", "required"):
            raise _invalid_value("tool_choice.mode", mode, ("auto", "required"))
        allowed = choice.get("tools")
        if allowed is None:
            raise _missing("tool_choice.tools")
        if not isinstance(allowed, list):
            raise _invalid_type("tool_choice.tools", "an array", allowed)
        for i, tool in enumerate(allowed):
            if not isinstance(tool, dict):
                raise _invalid_type(f"tool_choice.tools[{i}]", "an object", tool)
    elif kind in ("web_search_preview", "web_search_preview_2025_03_11"):  # the hosted types the API can force
        pass  # forced by a prefill (render/_tools.py); request/resolve.py answers 400 when no backend is configured
    elif kind == "file_search":
        pass  # forced by a prefill (render/_tools.py), which answers 400 when no file_search tool is declared
    elif kind == "mcp":
        pass  # {type: mcp, server_label, name?}: forced by a prefill; render answers 400 for an undeclared one
    elif isinstance(kind, str):
        raise APIError(
            f"Invalid value for 'tool_choice.type': '{kind}' cannot be forced on this server; use 'function', "
            "'custom' or 'allowed_tools', or one of 'none', 'auto' and 'required'.",
            param="tool_choice.type",
            code="unsupported_value",
        )
    else:
        raise _invalid_type("tool_choice.type", "a string", kind)


def _check_text(body: Mapping[str, Any]) -> tuple[dict[str, Any] | None, tuple[str, dict[str, Any]] | None]:
    """Validate ``text``; returns the json_schema (for the engine) and ``(name, schema)`` when strict."""
    text = _opt_object(body, "text")
    if text is None:
        return None, None
    _opt_enum(text, "verbosity", ("low", "medium", "high"), "text.verbosity")
    fmt = _opt_object(text, "format", "text.format")
    if fmt is None:
        return None, None
    kind = fmt.get("type")
    if kind is None:
        raise _missing("text.format.type")
    if kind in ("text", "json_object"):
        return None, None
    if kind != "json_schema":
        raise _invalid_value("text.format.type", kind, ("text", "json_object", "json_schema"))
    name = _check_name(fmt.get("name"), "text.format.name")
    _opt_str(fmt, "description", "text.format.description")
    strict = _opt_bool(fmt, "strict", "text.format.strict")
    schema = fmt.get("schema")
    if schema is None:
        raise _missing("text.format.schema")
    if not isinstance(schema, dict):
        raise _invalid_type("text.format.schema", "an object", schema)
    prefix = f"Invalid schema for response_format '{name}'"
    _schema_error(check_json_schema(schema), prefix, "text.format", "schema")
    if strict:
        _schema_error(strict_schema_problem(schema), prefix, "text.format", "schema")
        return schema, (name, schema)
    return schema, None


def _check_include(body: Mapping[str, Any]) -> set[str]:
    include = _opt_array(body, "include")
    for i, value in enumerate(include or ()):
        if not isinstance(value, str):
            raise _invalid_type(f"include[{i}]", "a string", value)
        if value not in INCLUDABLE:
            raise _invalid_value(f"include[{i}]", value, INCLUDABLE)
    return set(include or ())


def _check_reasoning(body: Mapping[str, Any]) -> None:
    reasoning = _opt_object(body, "reasoning")
    if reasoning is None:
        return
    _opt_enum(reasoning, "effort", REASONING_EFFORTS, "reasoning.effort")
    _opt_enum(reasoning, "summary", REASONING_SUMMARIES, "reasoning.summary")
    _opt_enum(reasoning, "generate_summary", REASONING_SUMMARIES, "reasoning.generate_summary")


def check_id(value: object, param: str) -> str:
    """A client-supplied id: a string the store can hold (``ids.id_problem``); 400 naming ``param`` otherwise."""
    problem = id_problem(value)
    if problem is None:
        return value  # type: ignore[return-value]
    if not isinstance(value, str):
        raise _invalid_type(param, "a string", value)
    raise APIError(f"Invalid '{param}': {problem}.", param=param, code="invalid_value")


def _check_conversation_id(value: object, param: str) -> None:
    # A malformed id is the client's mistake, not a conversation that may have been deleted: 400, as the API
    # answers, rather than the 404 of an id the store does not hold.
    check_id(value, param)
    if not str(value).startswith("conv_"):
        raise APIError(
            f"Invalid '{param}': '{value}'. Expected an ID that begins with 'conv_'.", param=param, code="invalid_value"
        )


def _check_later_features(body: Mapping[str, Any]) -> None:
    """State parameters (whether the ids exist is checked against the store, in resolve.py); ``prompt``."""
    previous = _opt_str(body, "previous_response_id")
    if previous is not None:
        check_id(previous, "previous_response_id")
    store = _opt_bool(body, "store")
    if _opt_bool(body, "background") and store is False:
        raise APIError(
            "Invalid value for 'background': background mode requires 'store' to be true (a background "
            "response is stored so that it can be retrieved, streamed again and cancelled).",
            param="background",
            code="invalid_value",
        )
    conversation = body.get("conversation")
    if conversation is not None:
        if isinstance(conversation, dict):
            conversation = conversation.get("id")
            if conversation is None:
                raise _missing("conversation.id")
            _check_conversation_id(conversation, "conversation.id")
        elif not isinstance(conversation, str):
            raise _invalid_type("conversation", "a string or an object", conversation)
        else:
            _check_conversation_id(conversation, "conversation")
        if previous is not None:
            raise APIError(
                "Mutually exclusive parameters: Ensure you are only providing one of: 'previous_response_id' or "
                "'conversation'.",
                param=None,
                code="mutually_exclusive_parameters",
            )
    if body.get("prompt") is not None:
        raise _unsupported(
            "prompt",
            "Prompt templates ('prompt') are not supported by this server: send 'instructions' and 'input'.",
        )
    if body.get("previous_input_messages") is not None:
        # vLLM's history as raw Harmony messages: they would skip every check input items get (their roles,
        # channels, recipients and calls are not validated against the declared tools), and a stored response
        # keeps input items only, so a previous_response_id chain from it would silently lose that history.
        raise _unsupported(
            "previous_input_messages",
            "Harmony messages as history ('previous_input_messages') are not supported by this server: send the "
            "conversation as 'input' items (a response's output items resent as they came), or continue with "
            "'previous_response_id'.",
        )


def check_items(items: Sequence[Any], param: str) -> None:
    """Input items as far as the server relies on them before rendering (what an item means is render's
    business): objects, ``type`` a string, ids the store can hold, references with an id, MCP listings
    whose tools have names."""
    for i, item in enumerate(items):
        at = f"{param}[{i}]"
        if not isinstance(item, dict):
            raise _invalid_type(at, "an object", item)
        kind = item.get("type")
        if kind is not None and not isinstance(kind, str):
            raise _invalid_type(f"{at}.type", "a string", kind)
        if kind == "item_reference" and item.get("id") is None:
            raise _missing(f"{at}.id")
        if item.get("id") is not None:
            check_id(item["id"], f"{at}.id")
        if kind == "compaction":
            if item.get("encrypted_content") is None:
                raise _missing(f"{at}.encrypted_content")
            _opt_str(item, "encrypted_content", f"{at}.encrypted_content")
        if kind == "mcp_list_tools":
            tools = _opt_array(item, "tools", f"{at}.tools")
            for j, tool in enumerate(tools or ()):
                if not isinstance(tool, dict):
                    raise _invalid_type(f"{at}.tools[{j}]", "an object", tool)
                name = tool.get("name")
                if name is None:
                    raise _missing(f"{at}.tools[{j}].name")
                if not isinstance(name, str):
                    raise _invalid_type(f"{at}.tools[{j}].name", "a string", name)


def _check_input(body: Mapping[str, Any]) -> None:
    value = body.get("input")
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, list):
        raise _invalid_type("input", "a string or an array of input items", value)
    _check_length("input", value, MAX_INPUT_ITEMS)
    check_items(value, "input")
    for i, item in enumerate(value[:-1]):
        if item.get("type") == "compaction_trigger":
            raise APIError(
                f"Invalid 'input[{i}]': a compaction_trigger item must be the final input item.",
                param=f"input[{i}]",
                code="invalid_value",
            )


# The context_management entry types the server runs (the API's one type).
CONTEXT_MANAGEMENT_TYPES = ("compaction",)


def _check_context_management(body: Mapping[str, Any]) -> int | None:
    """``context_management``: ``[{"type": "compaction", "compact_threshold": N}]``; returns N (None: none)."""
    entries = _opt_array(body, "context_management")
    threshold: int | None = None
    for i, entry in enumerate(entries or ()):
        param = f"context_management[{i}]"
        if not isinstance(entry, dict):
            raise _invalid_type(param, "an object", entry)
        kind = entry.get("type")
        if kind is None:
            raise _missing(f"{param}.type")
        if not isinstance(kind, str):
            raise _invalid_type(f"{param}.type", "a string", kind)
        if kind not in CONTEXT_MANAGEMENT_TYPES:
            raise _invalid_value(f"{param}.type", kind, CONTEXT_MANAGEMENT_TYPES)
        value = entry.get("compact_threshold")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise _invalid_type(f"{param}.compact_threshold", "an integer", value)
        if value < 1:
            raise APIError(
                f"Invalid '{param}.compact_threshold': integer below minimum value. Expected a value >= 1, but got "
                f"{value} instead.",
                param=f"{param}.compact_threshold",
                code="integer_below_min_value",
            )
        threshold = value if threshold is None else min(threshold, value)
    return threshold


def _check_length(param: str, value: Sequence[Any], maximum: int) -> None:
    if len(value) > maximum:
        raise APIError(
            f"Invalid '{param}': array too long. Expected an array with maximum length {maximum}, but got an "
            f"array with length {len(value)} instead.",
            param=param,
            code="array_above_max_length",
        )


def conversation_items(body: Mapping[str, Any], *, required: bool) -> list[Any]:
    """``items`` of a Conversations API body (at most ``MAX_CONVERSATION_ITEMS`` per request)."""
    raw = body.get("items")
    if raw is None:
        if required:
            raise _missing("items")
        return []
    if not isinstance(raw, list):
        raise _invalid_type("items", "an array of items", raw)
    _check_length("items", raw, MAX_CONVERSATION_ITEMS)
    check_items(raw, "items")
    return raw


def _check_instructions(body: Mapping[str, Any]) -> None:
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str | list):
        raise _invalid_type("instructions", "a string or an array of input items", instructions)


def validate_request(body: Any) -> RequestOptions:
    """Check a ``POST /v1/responses`` body.

    Raises:
        APIError: 400 with the API's message, ``param`` and ``code`` for the first problem found.
    """
    if not isinstance(body, dict):
        raise APIError(
            f"Invalid body: expected a JSON object, but got {_kind(body)} instead.", param=None, code="invalid_type"
        )
    model = body.get("model")
    if model is None:
        raise _missing("model")
    if not isinstance(model, str):
        raise _invalid_type("model", "a string", model)

    stream = _opt_bool(body, "stream")
    _opt_object(body, "stream_options")
    _check_input(body)
    _check_instructions(body)
    _check_later_features(body)
    functions = _check_tools(body)
    _check_tool_choice(body, functions)
    _opt_bool(body, "parallel_tool_calls")
    _opt_bool(body, "enable_response_messages")  # vLLM's (run/messages.py)
    max_output_tokens = _opt_int(body, "max_output_tokens", minimum=MIN_OUTPUT_TOKENS)
    max_tool_calls = _opt_int(body, "max_tool_calls", minimum=0)
    temperature = _opt_decimal(body, "temperature", minimum=0.0, maximum=2.0)
    top_p = _opt_decimal(body, "top_p", minimum=0.0, maximum=1.0)
    top_logprobs = _opt_int(body, "top_logprobs", minimum=0, maximum=MAX_TOP_LOGPROBS)
    _check_reasoning(body)
    response_schema, strict_schema = _check_text(body)
    include = _check_include(body)
    truncation = _opt_enum(body, "truncation", ("auto", "disabled"))
    _opt_bool(body, "store")
    _check_metadata(body)
    for key in ("user", "safety_identifier", "prompt_cache_key"):
        _opt_str(body, key)
    _opt_enum(body, "service_tier", requestable_tiers())  # the tier used: quotas.resolve_tier
    _opt_enum(body, "prompt_cache_retention", ("in_memory", "24h"))
    compact_threshold = _check_context_management(body)

    return RequestOptions(
        model=model,
        stream=bool(stream),
        max_output_tokens=max_output_tokens,
        temperature=temperature,
        top_p=top_p,
        top_logprobs=(top_logprobs or 0) if LOGPROBS_INCLUDE in include else None,
        encrypted_reasoning=ENCRYPTED_REASONING_INCLUDE in include,
        truncation=truncation or "disabled",
        response_schema=response_schema,
        strict_schema=strict_schema,
        max_tool_calls=max_tool_calls,
        include=frozenset(include),
        compact_threshold=compact_threshold,
    )
