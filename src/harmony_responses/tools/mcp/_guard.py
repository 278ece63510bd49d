"""SSRF guard for MCP URLs the operator did not list: only public addresses, checked where the socket connects.

A client names the ``server_url``; this server makes the connection. Without ``--mcp-allowed-hosts`` a URL
may name any host, so the addresses it reaches are what is checked, not the name: every TCP connection of a
guarded MCP client resolves the host itself, refuses the connection if *any* address is internal, and
connects to an address it checked. A name whose DNS answer changes between a check and a connect (DNS
rebinding) therefore gains nothing: there is no second lookup.

Internal (refused): loopback (127/8, ::1), link-local (169.254/16, fe80::/10: cloud metadata lives there),
private ranges (10/8, 172.16/12, 192.168/16, fc00::/7), unspecified (0.0.0.0, ::), multicast, and anything
else the IANA registries do not mark globally reachable (shared 100.64/10, documentation and benchmark
ranges, reserved space). IPv6 forms that carry an IPv4 address (``::ffff:a.b.c.d``, 6to4, Teredo, NAT64
``64:ff9b::/96``) are judged by that IPv4 address too.

Guarded clients also ignore proxy environment variables: a proxy would resolve the name itself, out of the
guard's sight.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio
import httpcore2
import httpx2

__all__ = ["GuardedBackend", "address_problem", "guarded_transport", "host_problem"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_LOCAL_NAMES = ("localhost", "localhost.localdomain")


def address_problem(ip: IPAddress) -> str | None:
    """Why a connection to ``ip`` is refused for a host the operator did not allow, or None (a public address)."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            problem = address_problem(embedded)
            if problem is not None:
                return problem
    for kind, test in (
        ("a loopback", ip.is_loopback),
        ("a link-local", ip.is_link_local),
        ("an unspecified", ip.is_unspecified),
        ("a multicast", ip.is_multicast),
        ("a private", ip.is_private),
    ):
        if test:
            return f"{kind} address"
    if not ip.is_global:
        return "a non-public address"
    return None


def host_problem(host: str) -> str | None:
    """Why the URL host itself (an IP literal or a local name) is internal, or None: decided without DNS."""
    name = host.lower().rstrip(".")
    if name in _LOCAL_NAMES or name.endswith(".localhost"):
        return "a loopback name"
    try:
        ip = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return None  # a name: checked when it is resolved, at connect time
    return address_problem(ip)


async def _resolve(host: str, port: int) -> list[str]:
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """An httpcore network backend that connects only to public addresses (see the module docstring).

    ``inner`` makes the real connection (default: httpcore's own); ``resolve`` answers a host's addresses
    (default: the system resolver). TLS still verifies the URL's host name: httpcore starts TLS on the
    returned stream with the origin's name, not the address connected to.
    """

    def __init__(self, inner: httpcore2.AsyncNetworkBackend | None = None, resolve: Resolver | None = None) -> None:
        self._inner = inner if inner is not None else httpcore2.AnyIOBackend()
        self._resolve = resolve if resolve is not None else _resolve

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                addresses = await self._resolve(host, port)
        except TimeoutError:
            raise httpcore2.ConnectTimeout(f"resolving {host} timed out") from None
        except OSError as exc:
            raise httpcore2.ConnectError(f"cannot resolve {host}: {exc}") from None
        if not addresses:
            raise httpcore2.ConnectError(f"{host} has no address")
        for address in addresses:
            problem = address_problem(ipaddress.ip_address(address))
            if problem is not None:
                # Refuse the name outright, not only that address: one internal answer is a name pointed
                # inward (or a rebinding in progress), and a fallback would make the outcome racy.
                raise httpcore2.ConnectError(
                    f"{host} resolves to {address}, {problem}: not allowed without --mcp-allowed-hosts"
                )
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("unix sockets are not MCP URLs")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded_transport(backend: httpcore2.AsyncNetworkBackend | None = None) -> httpx2.AsyncHTTPTransport:
    """An httpx transport whose every connection goes through a ``GuardedBackend`` (and no proxy)."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    pool = transport._pool
    # httpx does not take a network backend; its pool does. Fail loudly if that ever changes, rather than
    # connect unguarded.
    if not isinstance(pool, httpcore2.AsyncConnectionPool) or not hasattr(pool, "_network_backend"):
        raise RuntimeError("httpx2's connection pool changed: the MCP SSRF guard cannot be installed")
    pool._network_backend = backend if backend is not None else GuardedBackend()
    return transport
