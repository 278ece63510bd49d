"""Every option of ``harmony-responses serve``, declared once: flag, environment twin, type, default, help.

``OPTIONS`` is the one table that the command line (``cli.add_serve_arguments``), ``--help`` and the
guide's options table (``markdown_table``, in docs/reference/options.md, checked by tests/test_docs.py) are made
from, and that a config file will be read by. Each option's environment twin is its flag's name in capitals after
``HARMONY_RESPONSES_`` (``--engine-url`` → ``HARMONY_RESPONSES_ENGINE_URL``); a flag on the command line
wins over its variable, which wins over the default. Repeatable flags take a comma-separated list in their
variable. Defaults are written as text, as a user would type them: argparse applies ``type`` to a text
default too, so a bad environment variable gets the same clean error as a bad flag.

Each option belongs to one of ``GROUPS`` (server, engines, …): ``--help`` shows them under its heading, with
its default and a name for its value (``TOKENS``, ``SECONDS``), and the guide has a table per group.

Run ``python -m harmony_responses.serve.options --write`` in a checkout to rewrite the guide's tables in
docs/reference/options.md (without ``--write``: print them).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine import EngineOptions
from ..http.connection import MAX_HEAD_BYTES, MAX_HEADERS
from ..http.files import DEFAULT_MAX_FILE_BYTES
from ..logs import LOG_FORMATS
from ..store import parse_retention
from ..tokentrace import DEFAULT_MAX_BYTES as DEFAULT_TRACE_BYTES
from ..tools.browser import BACKENDS
from ..tools.mcp import DEFAULT_MCP_MAX_BODY_BYTES, DEFAULT_MCP_TIMEOUT

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MODELS",
    "ENV_PREFIX",
    "GROUPS",
    "OPTIONS",
    "Group",
    "Option",
    "env_value",
    "given_on_command_line",
    "markdown_table",
]

ENV_PREFIX = "HARMONY_RESPONSES_"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
REASONING_SUMMARY_SOURCES = ("reasoning", "none")
FUNCTION_ARGUMENT_CONSTRAINTS = ("json", "schema", "off")
DEFAULT_MODELS: tuple[str, ...] = ("gpt-oss-120b", "gpt-oss-20b")
# gpt-oss's context window (harmony.md): prompt plus generation.
DEFAULT_CONTEXT_WINDOW = 131_072
# Codex's first turn is ~25 KB and a long agent session a few MB of JSON; 32 MiB leaves room for any
# 128k-token conversation while keeping one request from taking the process's memory.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def _seconds_or_zero(text: str) -> float:
    return 0.0 if float(text) == 0 else _seconds(text)


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0..65535, got {text}")
    return value


def _lower(text: str) -> str:
    return text.lower()


@dataclass(frozen=True, slots=True)
class Group:
    """A heading of ``--help`` and of the guide's options tables."""

    name: str
    about: str


GROUPS: tuple[Group, ...] = (
    Group("server", "where it listens, who may call it, how it stops"),
    Group("engines", "which engine serves which model name, and how it is reached"),
    Group("prompt", "what every prompt says, and what answers carry"),
    Group("limits", "what one request or connection may take"),
    Group("state", "where responses and conversations are kept, and the key that seals reasoning"),
    Group("tools", "the built-in tools: MCP servers, web search, file search's embeddings, the code interpreter"),
    Group("logging", "what the log says, and in which format"),
)
_GROUP_NAMES = tuple(group.name for group in GROUPS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """One option.

    Args:
        flag: the command-line flag (``--engine-url``).
        group: the ``GROUPS`` heading it is listed under.
        help: what it means, in one sentence for ``--help`` and the guide.
        type: text → value (argparse's ``type``); None: the text as it is.
        default: the default as text (None: unset).
        metavar: the value's name in ``--help`` (``SECONDS``); every option that takes a value other than
            one of ``choices`` has one.
        choices: the values allowed.
        repeatable: the flag may be given several times (its variable: comma-separated).
        switch: a flag without a value (its variable: ``1``, ``true`` or ``yes``).
        dest: the attribute argparse stores it in (default: the flag's name with underscores).
        env: whether the option has an environment twin.
    """

    flag: str
    group: str
    help: str
    type: Callable[[str], Any] | None = None
    default: str | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    repeatable: bool = False
    switch: bool = False
    dest: str | None = None
    env: bool = True

    def __post_init__(self) -> None:
        assert self.group in _GROUP_NAMES, f"{self.flag}: group {self.group!r} is not one of {_GROUP_NAMES}"
        # argparse would show the dest in capitals (CONTEXT_WINDOW), which says nothing of the value.
        assert self.switch or self.metavar or self.choices, f"{self.flag}: name its value (metavar)"

    @property
    def name(self) -> str:
        return self.dest or self.flag.removeprefix("--").replace("-", "_")

    @property
    def env_name(self) -> str | None:
        return ENV_PREFIX + self.flag.removeprefix("--").replace("-", "_").upper() if self.env else None

    @property
    def key(self) -> str:
        """Its key in a config file: the flag as written, without ``--`` (``engine-url``)."""
        return self.flag.removeprefix("--")

    def add_to(self, parser: argparse._ActionsContainer) -> None:
        """Add this option to ``parser`` (or an argument group), its default taken from the environment when set
        there; its help says the declared default and the variable."""
        notes = [f"default: {self.default}"] if self.default is not None else []
        if self.env_name is not None:
            notes.append(f"env {self.env_name}{', comma-separated' if self.repeatable else ''}")
        # argparse formats help with %: a literal one must be doubled.
        help_text = (self.help + (f" ({'; '.join(notes)})" if notes else "")).replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": self.name, "help": help_text}
        if self.switch:
            kwargs.update(action=_GivenTrue, default=env_value(self) in ("1", "true", "yes"))
        elif self.repeatable:
            # The variable is read later (``env_list``): argparse would append flags to a list default.
            kwargs.update(action=_GivenAppend, metavar=self.metavar)
        else:
            kwargs.update(action=_Given, default=env_value(self) or self.default, metavar=self.metavar)
            if self.type is not None:
                kwargs["type"] = self.type
            if self.choices is not None:
                kwargs["choices"] = self.choices
        parser.add_argument(self.flag, **kwargs)


# The options given on the command line (their ``dest``), kept in the parsed namespace under this name: a
# config file (``config_file.py``) fills in only the others, whose value is still the environment's or the
# default (which argparse alone cannot tell apart from a flag).
GIVEN = "_given_on_command_line"


def given_on_command_line(namespace: argparse.Namespace) -> frozenset[str]:
    return frozenset(getattr(namespace, GIVEN, ()))


def _mark_given(namespace: argparse.Namespace, dest: str) -> None:
    given = getattr(namespace, GIVEN, None)
    if given is None:
        given = set()
        setattr(namespace, GIVEN, given)
    given.add(dest)


class _Given(argparse.Action):
    """``store``, remembering that the flag was given."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, values)
        _mark_given(namespace, self.dest)


class _GivenTrue(argparse.Action):
    """``store_true``, remembering that the flag was given."""

    def __init__(self, option_strings: Any, dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, True)
        _mark_given(namespace, self.dest)


class _GivenAppend(argparse.Action):
    """``append``, remembering that the flag was given."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or ()), values])
        _mark_given(namespace, self.dest)


def env_value(option: Option) -> str | None:
    """The option's environment variable, when set and not empty."""
    if option.env_name is None:
        return None
    value = os.environ.get(option.env_name)
    return value if value else None


def env_list(option: Option) -> list[str] | None:
    value = env_value(option)
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


_ENGINE_DEFAULTS = EngineOptions()

OPTIONS: tuple[Option, ...] = (
    Option(
        flag="--config",
        group="server",
        metavar="PATH",
        help="a TOML file of these options, each under its flag's name without '--' (engine-url = \"...\"; "
        "repeatable ones as arrays, switches as true/false); the command line and the environment win over it",
    ),
    Option(flag="--host", group="server", metavar="ADDRESS", default="127.0.0.1", help="address to listen on"),
    Option(flag="--port", group="server", metavar="N", type=_port, default="8400", help="port (0: any free one)"),
    Option(
        flag="--workers",
        group="server",
        type=_positive_int,
        default="1",
        metavar="N",
        help="server processes sharing the port, the store and the sealing key (a background response can be "
        "retrieved, resumed, cancelled and deleted through any of them); one that dies is restarted",
    ),
    Option(
        flag="--model",
        group="engines",
        dest="models",
        repeatable=True,
        metavar="NAME",
        help="a model name to answer to, served by the plain --engine; repeatable; the first is the default "
        f"(default: {', '.join(DEFAULT_MODELS)}, or only the names --engine NAME=SPEC binds when there is no plain "
        "--engine); any other name is 404 model_not_found",
    ),
    Option(
        flag="--engine",
        group="engines",
        dest="engines",
        repeatable=True,
        default="echo",
        metavar="[NAME=]SPEC",
        help="engine spec: 'echo' (a stand-in, not a model; the default), 'replay:PATH', 'vllm', 'sglang', "
        "'llamacpp', 'trtllm' (each optionally ':URL') or 'transformers:PATH'; NAME=SPEC serves model NAME "
        "with it (also when --model does not list NAME), a plain SPEC every other model; repeatable: a NAME "
        "given several times is balanced over its engines as replicas",
    ),
    Option(
        flag="--engine-url",
        group="engines",
        metavar="URL",
        help="the HTTP engine's base URL (default: its usual local port)",
    ),
    Option(
        flag="--engine-model",
        group="engines",
        metavar="NAME",
        help="the engine's model name (default: the one it serves)",
    ),
    Option(
        flag="--engine-api-key",
        group="engines",
        metavar="KEY",
        help="bearer token for an engine started with an API key",
    ),
    Option(
        flag="--engine-connect-timeout",
        group="engines",
        type=_seconds,
        default=str(_ENGINE_DEFAULTS.connect_timeout),
        metavar="SECONDS",
        help="bound on connecting to the engine",
    ),
    Option(
        flag="--engine-first-token-timeout",
        group="engines",
        type=_seconds,
        default=str(_ENGINE_DEFAULTS.first_token_timeout),
        metavar="SECONDS",
        help="bound from sending a request to its first token",
    ),
    Option(
        flag="--engine-stall-timeout",
        group="engines",
        type=_seconds,
        default=str(_ENGINE_DEFAULTS.stall_timeout),
        metavar="SECONDS",
        help="bound on the engine's silence mid-stream",
    ),
    Option(
        flag="--engine-max-connections",
        group="engines",
        type=_positive_int,
        default=str(_ENGINE_DEFAULTS.max_connections),
        metavar="N",
        help="connection pool size: concurrent generations per engine",
    ),
    Option(
        flag="--engine-start-wait",
        group="engines",
        type=_seconds_or_zero,
        default="0",
        metavar="SECONDS",
        help="keep retrying an unreachable engine at start for this long (0: fail at once)",
    ),
    Option(
        flag="--engine-priority",
        group="engines",
        switch=True,
        help="send a response's service_tier to vLLM and SGLang as their 'priority' field (flex after default "
        "after priority); start vLLM with --scheduling-policy priority, SGLang with --enable-priority-scheduling",
    ),
    Option(
        flag="--record",
        group="engines",
        metavar="PATH",
        help="append every engine call to PATH in the replay format ('replay:PATH' plays it back)",
    ),
    Option(
        flag="--api-key",
        group="server",
        dest="api_keys",
        repeatable=True,
        metavar="KEY",
        help="accept this bearer token; repeatable; none: no authentication",
    ),
    Option(
        flag="--allowed-host",
        group="server",
        dest="allowed_hosts",
        repeatable=True,
        metavar="NAME",
        help="on a loopback bind, also answer requests whose Host is NAME (a reverse proxy's name; '*': any); "
        "other names get 400, so that a web page cannot reach the server through DNS rebinding; repeatable",
    ),
    Option(flag="--log-level", group="logging", type=_lower, choices=LOG_LEVELS, default="info", help="log level"),
    Option(
        flag="--log-format",
        group="logging",
        type=_lower,
        choices=LOG_FORMATS,
        default="text",
        help="'text' lines, or 'json': one object per line (time, level, logger, message, request_id, exception), "
        "uvicorn's access log included",
    ),
    Option(
        flag="--trace",
        group="logging",
        switch=True,
        help="keep a per-token trace of every stored response (prompt tokens, engine calls, each token and the "
        "events it caused, tool calls, recoveries), served at GET /v1/responses/{id}/trace",
    ),
    Option(
        flag="--trace-header",
        group="logging",
        switch=True,
        help="trace the stored responses whose request has the header 'x-harmony-trace: 1'",
    ),
    Option(
        flag="--trace-max-bytes",
        group="logging",
        metavar="BYTES",
        type=_positive_int,
        default=str(DEFAULT_TRACE_BYTES),
        help="a trace stops recording tokens and events past about this size (it says it was cut)",
    ),
    Option(
        flag="--otel",
        group="logging",
        switch=True,
        help="export OpenTelemetry traces (a span per request, its rendering, engine calls, tool calls and store "
        "writes; traceparent sent to the engines) over OTLP/HTTP, configured by the standard OTEL_* variables "
        "(OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, ...); needs the 'otel' extra",
    ),
    Option(
        flag="--context-window",
        group="limits",
        metavar="TOKENS",
        type=_positive_int,
        default=str(DEFAULT_CONTEXT_WINDOW),
        help="prompt plus output tokens the engine accepts",
    ),
    Option(
        flag="--max-body-bytes",
        group="limits",
        metavar="BYTES",
        type=_positive_int,
        default=str(DEFAULT_MAX_BODY_BYTES),
        help="larger request bodies get 413",
    ),
    Option(
        flag="--max-file-bytes",
        group="limits",
        metavar="BYTES",
        type=_positive_int,
        default=str(DEFAULT_MAX_FILE_BYTES),
        help="larger uploads to /v1/files get 413",
    ),
    Option(
        flag="--head-timeout",
        group="limits",
        type=_seconds,
        default="20",
        metavar="SECONDS",
        help="close a connection whose request headers take longer than this to arrive",
    ),
    Option(
        flag="--max-head-bytes",
        group="limits",
        type=_positive_int,
        default=str(MAX_HEAD_BYTES),
        metavar="BYTES",
        help="a request whose head (request line and headers) is larger gets 431, and its connection is closed",
    ),
    Option(
        flag="--max-headers",
        group="limits",
        type=_positive_int,
        default=str(MAX_HEADERS),
        metavar="N",
        help="a request with more header fields gets 431, and its connection is closed",
    ),
    Option(
        flag="--body-timeout",
        group="limits",
        type=_seconds,
        default="60",
        metavar="SECONDS",
        help="answer 408 to a request whose body takes longer than this to arrive",
    ),
    Option(
        flag="--shutdown-grace",
        group="server",
        type=_seconds_or_zero,
        default="10",
        metavar="SECONDS",
        help="on SIGTERM or Ctrl-C, let running responses go on for this long (still listening: new requests get "
        "503 shutting_down), then end them failed (their clients are told why) and exit",
    ),
    Option(
        flag="--current-date",
        group="prompt",
        metavar="YYYY-MM-DD",
        help="date written into every prompt (default: today, UTC)",
    ),
    Option(
        flag="--knowledge-cutoff",
        group="prompt",
        default="2024-06",
        metavar="YYYY-MM",
        help="the model's knowledge cutoff, written into every prompt",
    ),
    Option(
        flag="--secret-key",
        group="state",
        metavar="KEY",
        help="key for reasoning.encrypted_content blobs (default: one generated at the first start and kept in the "
        "store, so every process sharing the store opens every blob, also after a restart)",
    ),
    Option(
        flag="--reasoning-summaries",
        group="prompt",
        choices=REASONING_SUMMARY_SOURCES,
        default="reasoning",
        help="what a request asking for reasoning.summary gets: 'reasoning' streams each reasoning item's own text "
        "as its summary (gpt-oss writes no summaries; the summary is the chain of thought, verbatim), 'none' "
        "leaves summary empty",
    ),
    Option(
        flag="--constrain-function-arguments",
        group="tools",
        choices=FUNCTION_ARGUMENT_CONSTRAINTS,
        default="json",
        help="what a call of a function without strict: true is held to on engines that constrain calls (vLLM, "
        "SGLang, llama.cpp): 'json' one JSON object, 'schema' its parameters' schema where a grammar can hold it "
        "(as if strict; else one JSON object), 'off' nothing. Strict functions are always held to their schema",
    ),
    Option(
        flag="--constrain-recipients",
        group="tools",
        choices=("declared", "off"),
        default="declared",
        help="on engines that constrain calls (vLLM, SGLang, llama.cpp): 'declared' holds the recipient a header "
        "names after to= to the declared tools (functions, namespaces, MCP servers' listed tools, python, "
        "browser.*, tool_search) and, under tool_choice none, lets no header name one; 'off' takes the recipient "
        "as written (an undeclared one becomes a function_call of that name)",
    ),
    Option(
        flag="--mcp-allowed-hosts",
        group="tools",
        metavar="HOSTS",
        help="comma-separated hosts that request MCP server_urls may reach, trusted wherever they resolve "
        "(example.com, *.example.com, host:port, *: any); default: public hosts only (internal addresses are "
        "refused, and errors do not say what a host answered)",
    ),
    Option(
        flag="--mcp-server",
        group="tools",
        dest="mcp_servers",
        repeatable=True,
        env=False,
        metavar="NAME=COMMAND",
        help="an MCP server started over stdio for requests that name it (server_url 'stdio:NAME'), e.g. "
        "--mcp-server 'files=npx -y @modelcontextprotocol/server-filesystem /srv/docs'; repeatable",
    ),
    Option(
        flag="--mcp-config",
        group="tools",
        metavar="FILE",
        help='stdio MCP servers from a JSON file: {"mcpServers": {NAME: {"command", "args", "env", "cwd"}}}',
    ),
    Option(
        flag="--mcp-timeout",
        group="tools",
        type=float,
        default=str(DEFAULT_MCP_TIMEOUT),
        metavar="SECONDS",
        help="limit for connecting to an MCP server and listing its tools, and for each tool call",
    ),
    Option(
        flag="--mcp-max-body-bytes",
        group="tools",
        metavar="BYTES",
        type=_positive_int,
        default=str(DEFAULT_MCP_MAX_BODY_BYTES),
        help="the most an MCP server may send in one response body (or one event of an event stream); a "
        "larger answer fails the listing or the call",
    ),
    Option(
        flag="--search-dir",
        group="tools",
        metavar="PATH",
        help="folder of Markdown, HTML and text documents that web_search searches (a local SQLite FTS5 index, no "
        "network)",
    ),
    Option(
        flag="--search-backend",
        group="tools",
        choices=BACKENDS,
        help="web_search backend (default: local with --search-dir, else none: web_search is not offered to the "
        "model); exa reads its key from HARMONY_RESPONSES_SEARCH_API_KEY or EXA_API_KEY",
    ),
    Option(
        flag="--search-base-url",
        group="tools",
        metavar="URL",
        help="URL prefix of the --search-dir documents (default: their file:// URLs)",
    ),
    Option(
        flag="--search-api-url",
        group="tools",
        metavar="URL",
        help="address of the online search backend's API (default: the service's own)",
    ),
    Option(
        flag="--embeddings",
        group="tools",
        metavar="URL",
        help="file_search ranks hybrid (vector similarity fused with BM25) with the embeddings of this "
        "OpenAI-compatible /v1/embeddings server (vLLM, llama-server --embedding, text-embeddings-inference; "
        "the key, if it needs one, from HARMONY_RESPONSES_EMBEDDINGS_API_KEY); without it, or on a store "
        "without sqlite-vec or pgvector, full text only",
    ),
    Option(
        flag="--embeddings-model",
        group="tools",
        metavar="NAME",
        help="the model name sent to the --embeddings server (default: the first its /v1/models lists)",
    ),
    Option(
        flag="--code-timeout",
        group="tools",
        type=_seconds,
        default="60",
        metavar="SECONDS",
        help="code interpreter: wall-clock (and CPU) time limit per call",
    ),
    Option(
        flag="--unsafe-code-interpreter",
        group="tools",
        switch=True,
        help="run code_interpreter code WITHOUT a sandbox when bubblewrap is unavailable: the code can read the "
        "server's files and reach the network",
    ),
    Option(
        flag="--store",
        group="state",
        default="sqlite",
        metavar="SPEC",
        help="where stored responses and conversations live: 'sqlite' (a file in --data-dir, the default), "
        "'sqlite:PATH', or a postgresql://user:password@host:port/database URL that several server processes may "
        "share",
    ),
    Option(
        flag="--data-dir",
        group="state",
        metavar="DIR",
        help="folder of the SQLite store (default: $XDG_DATA_HOME/harmony-responses or "
        "~/.local/share/harmony-responses)",
    ),
    Option(
        flag="--retention",
        group="state",
        type=parse_retention,
        default="forever",
        metavar="AGE",
        help="delete stored responses and conversations older than AGE: a number with s, m, h, d or w (e.g. 7d), "
        "or 'forever' (the default)",
    ),
)

BY_NAME = {option.name: option for option in OPTIONS}


def _rows(group: Group) -> Iterator[str]:
    yield f"**{group.name}**: {group.about}"
    yield ""
    yield "| option | environment | default | meaning |"
    yield "|---|---|---|---|"
    for option in OPTIONS:
        if option.group != group.name:
            continue
        flag = f"`{option.flag}{' ' + option.metavar if option.metavar else ''}`"
        env = f"`{option.env_name}`" if option.env_name else "—"
        default = f"`{option.default}`" if option.default is not None else "—"
        meaning = option.help.replace("|", "\\|")
        yield f"| {flag} | {env} | {default} | {meaning} |"


def markdown_table() -> str:
    """The guide's tables of ``serve``'s options, one per group."""
    return "\n\n".join("\n".join(_rows(group)) for group in GROUPS) + "\n"


# The guide's page that holds the tables, in a checkout (src/harmony_responses/serve/ → the checkout's root).
TABLE_PAGE = Path(__file__).resolve().parents[3] / "docs" / "reference" / "options.md"
_TABLE_START = "<!-- options: generated"
_TABLE_END = "<!-- options: end -->"


def generated_region(text: str) -> tuple[int, int]:
    """Where the generated tables are in the page's text: after the line of the start mark, up to the end mark."""
    start = text.index("-->\n", text.index(_TABLE_START)) + 4
    return start, text.index(_TABLE_END, start)


def write_table(page: Path = TABLE_PAGE) -> None:
    """Rewrite the generated tables in ``page``, leaving the rest of it as it is."""
    text = page.read_text()
    start, end = generated_region(text)
    page.write_text(text[:start] + markdown_table() + text[end:])


if __name__ == "__main__":  # pragma: no cover
    import sys

    if sys.argv[1:] == ["--write"]:
        write_table()
        print(f"wrote the options tables into {TABLE_PAGE}")
    else:
        print(markdown_table(), end="")
