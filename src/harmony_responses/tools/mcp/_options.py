"""What the operator decides about MCP: which hosts MCP URLs may reach, named stdio servers, timeouts.

SSRF: an ``mcp`` tool makes *this server* open a connection to whatever ``server_url`` the client names,
so hosts only this server can reach (``localhost`` admin ports, the private network, cloud metadata at
``http://169.254.169.254/``) would be the client's to probe. Two modes:

- **Default** (no ``--mcp-allowed-hosts``): public hosts only. A URL whose host is an internal IP literal
  or a loopback name is a 400; a name is resolved when connecting and refused if any address is internal,
  and the connection goes to the address that was checked (``_guard``: no DNS rebinding between check and
  connect). Failures with such a host are one uniform error that never says what the host answered (a
  closed port, a non-HTTP service and an HTTP service that is not MCP all read the same); the reason goes
  to the server's log only.
- **An allow list** (``--mcp-allowed-hosts``): only the listed hosts (and ports), and those are trusted:
  connected to whatever they resolve to, internal or not, and their errors shown in detail. List host
  names whose DNS you control; ``*`` trusts every host (the unguarded behaviour, for trusted networks only).

A client's ``Host`` header is never sent (it would point a name-based proxy or virtual host elsewhere).

Stdio servers are programs the operator names (``--mcp-server NAME=COMMAND ARGS…`` or ``--mcp-config
FILE``); a request reaches one with ``"server_url": "stdio:NAME"``. Clients cannot start anything else.
They are started with the MCP SDK's default environment (``HOME``, ``PATH``, … but none of the server's
other variables) plus the ``env`` the operator gives them.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ._bounded import DEFAULT_MCP_MAX_BODY_BYTES
from ._guard import host_problem

__all__ = [
    "DEFAULT_MCP_TIMEOUT",
    "STDIO_SCHEME",
    "McpOptions",
    "StdioServer",
    "load_mcp_config",
    "parse_stdio_server",
]

DEFAULT_MCP_TIMEOUT = 60.0
STDIO_SCHEME = "stdio:"


@dataclass(frozen=True, slots=True)
class StdioServer:
    """An MCP server the operator configured, started as a subprocess speaking MCP on stdin/stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class McpOptions:
    """The operator's MCP settings.

    Args:
        allowed_hosts: host patterns MCP URLs may name, trusted wherever they resolve (``example.com``,
            ``*.example.com`` for subdomains, ``host:port`` for one port, ``*`` for any); None allows
            public hosts only, through the SSRF guard (see the module docstring).
        servers: named stdio servers.
        timeout: seconds for connecting and listing tools, and for each tool call.
        max_body_bytes: the most an MCP server may send in one response body or event (``_bounded``).
    """

    allowed_hosts: tuple[str, ...] | None = None
    servers: tuple[StdioServer, ...] = ()
    timeout: float = DEFAULT_MCP_TIMEOUT
    max_body_bytes: int = DEFAULT_MCP_MAX_BODY_BYTES
    _by_name: dict[str, StdioServer] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.allowed_hosts is not None:
            object.__setattr__(self, "allowed_hosts", tuple(h.strip().lower() for h in self.allowed_hosts if h.strip()))
        object.__setattr__(self, "servers", tuple(self.servers))
        names = [s.name for s in self.servers]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"MCP server names must be unique: {', '.join(duplicated)}")
        if not self.timeout > 0:
            raise ValueError("the MCP timeout must be positive")
        object.__setattr__(self, "_by_name", {s.name: s for s in self.servers})

    def stdio_server(self, name: str) -> StdioServer | None:
        return self._by_name.get(name)

    def url_problem(self, url: str) -> str | None:
        """Why this server will not connect to ``url`` (an http(s) URL), or None."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            return f"it is not a valid URL ({exc})"
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return "MCP servers are reached over http or https (or 'stdio:NAME' for a server configured by name)"
        host = parts.hostname.lower()
        if self.allowed_hosts is None:
            problem = host_problem(host)
            if problem is None:
                return None
            return (
                f"host '{host}' is {problem}; this server reaches MCP servers on internal addresses only when "
                "they are listed in --mcp-allowed-hosts"
            )
        port = port or (443 if parts.scheme == "https" else 80)
        if any(_host_matches(pattern, host, port) for pattern in self.allowed_hosts):
            return None
        return f"host '{host}' is not among the MCP hosts this server may reach (--mcp-allowed-hosts)"

    def trusts(self, url: str) -> bool:
        """Whether the operator listed ``url``'s host (call after ``url_problem`` found nothing): a listed
        host is connected to wherever it resolves, and its errors are shown in detail."""
        return self.allowed_hosts is not None


def _host_matches(pattern: str, host: str, port: int) -> bool:
    if pattern == "*":
        return True
    name, want_port = pattern, None
    if pattern.startswith("["):  # [::1]:8080
        name, _, rest = pattern[1:].partition("]")
        if rest.startswith(":") and rest[1:].isdigit():
            want_port = int(rest[1:])
    elif pattern.count(":") == 1:
        name, _, digits = pattern.partition(":")
        if not digits.isdigit():
            return False
        want_port = int(digits)
    if want_port is not None and want_port != port:
        return False
    if name.startswith("*."):
        return host.endswith(name[1:]) and host != name[2:]
    return host == name


def parse_stdio_server(spec: str) -> StdioServer:
    """``NAME=COMMAND ARGS…`` (shell-style quoting) → a StdioServer; raises ValueError."""
    name, eq, command_line = spec.partition("=")
    name = name.strip()
    if not eq or not name:
        raise ValueError(f"--mcp-server expects NAME=COMMAND [ARGS...], got {spec!r}")
    _check_name(name)
    try:
        words = shlex.split(command_line)
    except ValueError as exc:
        raise ValueError(f"--mcp-server {name}: {exc}") from None
    if not words:
        raise ValueError(f"--mcp-server {name}: no command given")
    return StdioServer(name=name, command=words[0], args=tuple(words[1:]))


def load_mcp_config(path: str | Path) -> tuple[StdioServer, ...]:
    """Stdio servers from a JSON file in the common ``mcpServers`` shape; raises ValueError.

    ``{"mcpServers": {"NAME": {"command": "…", "args": […], "env": {…}, "cwd": "…"}}}``
    """
    try:
        data: Any = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read the MCP config {path}: {exc}") from None
    entries = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise ValueError(f"the MCP config {path} needs an object 'mcpServers': {{NAME: {{command, args, env}}}}")
    servers = []
    for name, entry in entries.items():
        where = f"the MCP config {path}, server {name!r}"
        _check_name(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("command"), str) or not entry["command"]:
            raise ValueError(f"{where}: needs a 'command' (only stdio servers can be configured by name)")
        args, env, cwd = entry.get("args", []), entry.get("env", {}), entry.get("cwd")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"{where}: 'args' must be a list of strings")
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ValueError(f"{where}: 'env' must map names to strings")
        if cwd is not None and not isinstance(cwd, str):
            raise ValueError(f"{where}: 'cwd' must be a string")
        servers.append(
            StdioServer(name=name, command=entry["command"], args=tuple(args), env=tuple(env.items()), cwd=cwd)
        )
    return tuple(servers)


def _check_name(name: str) -> None:
    if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ValueError(f"MCP server name {name!r}: use letters, digits, '-', '_' and '.'")
