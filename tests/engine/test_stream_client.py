"""The engine streams' HTTP client (engine/_stream_client.py) against servers written byte by byte on 127.0.0.1.

Each server here is a raw asyncio server whose bytes the test chooses: keep-alive, a connection the engine
closes as the next request goes out, bodies framed by length, chunks or the connection's end, a pool at its
limit, broken HTTP, TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from harmony_responses.engine import EngineProtocolError, EngineUnavailable, _stream_client
from harmony_responses.engine._stream_client import Answer, StreamClient

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
LABEL = "vllm at test"


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head and body (by its Content-Length); b"" when the connection closed first."""
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    if not head:
        return b""
    length = next(
        int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")) if k.lower() == b"content-length"
    )
    return head + await reader.readexactly(length)


@contextlib.asynccontextmanager
async def server(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[tuple[str, list[int]]]:
    """A server running ``handler`` per connection: its URL, and one entry per connection it accepted."""
    connections: list[int] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(connections))
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(accept, "127.0.0.1", 0, ssl=ssl_context)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}/v1/completions", connections
    finally:
        srv.close()
        await srv.wait_closed()


async def body(answer: Answer) -> bytes:
    data = b""
    while part := await answer.readany():
        data += part
    answer.close()
    return data


@contextlib.asynccontextmanager
async def pool(**kwargs: float) -> AsyncIterator[StreamClient]:
    options = {"max_connections": 8, "connect_timeout": 2.0, **kwargs}
    streams = StreamClient(LABEL, headers={}, **options)  # type: ignore[arg-type]
    try:
        yield streams
    finally:
        await streams.aclose()


def test_answers_are_read_whole_and_the_connection_is_kept_for_the_next_request() -> None:
    requests: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while request := await read_request(reader):
            requests.append(request)
            writer.write(HEAD + chunked(b"data: 1\n\n", b"data: 2\n\n"))

    async def main() -> tuple[list[bytes], list[int]]:
        async with server(handler) as (url, connections), pool() as streams:
            got = []
            for n in range(3):
                answer = await streams.post(url, b'{"n": %d}' % n)
                assert answer.status == 200
                got.append(await body(answer))
            return got, connections

    got, connections = asyncio.run(main())
    assert got == [b"data: 1\n\ndata: 2\n\n"] * 3
    assert len(connections) == 1  # one connection, kept alive
    assert requests[0].startswith(b"POST /v1/completions HTTP/1.1\r\n")
    assert b"\r\nContent-Length: 8\r\n" in requests[0] and requests[2].endswith(b'{"n": 2}')


def test_waiting_for_each_chunk_does_not_ask_for_the_running_loop_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # On Python 3.11 asyncio.get_running_loop() is a getpid() system call (a fork check): asked at every wait
    # for the engine, a paced stream paid one per token, 4-7 % of the server's CPU there (bench/ab_bench.py).
    chunks = 40
    read: asyncio.Queue[None] = asyncio.Queue()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD)
        for n in range(chunks):
            writer.write(chunked(b"data: %d\n\n" % n)[: -len(b"0\r\n\r\n")])
            await writer.drain()
            await read.get()  # the client has read it and waits for the next: a paced engine
        writer.write(b"0\r\n\r\n")

    asked = 0
    running_loop = asyncio.get_running_loop

    def counted() -> asyncio.AbstractEventLoop:
        nonlocal asked
        asked += 1
        return running_loop()

    async def main() -> bytes:
        async with server(handler) as (url, _), pool() as streams:
            monkeypatch.setattr(asyncio, "get_running_loop", counted)
            answer = await streams.post(url, b"{}")
            data = b""
            while part := await answer.readany():
                data += part
                read.put_nowait(None)
            answer.close()
            return data

    data = asyncio.run(main())
    assert data == b"".join(b"data: %d\n\n" % n for n in range(chunks))
    assert asked <= 2, f"asked for the running loop {asked} times for {chunks} chunks"


def test_a_pooled_connection_the_engine_closes_as_the_request_goes_out_is_replaced() -> None:
    # An engine's keep-alive running out just as the next request is sent: it reads the request and closes.
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD + chunked(b"data: first\n\n"))
        await writer.drain()
        if await read_request(reader):
            return  # closed without a word: the client must send again on a new connection

    async def main() -> tuple[bytes, bytes, int]:
        async with server(handler) as (url, connections), pool() as streams:
            first = await body(await streams.post(url, b"{}"))
            second = await body(await streams.post(url, b"{}"))
            return first, second, len(connections)

    first, second, n = asyncio.run(main())
    assert first == second == b"data: first\n\n"
    assert n == 2


def test_a_new_connection_closed_without_an_answer_is_the_engine_closing_it() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async def main() -> None:
        async with server(handler) as (url, _), pool() as streams:
            with pytest.raises(EngineProtocolError, match=f"^{LABEL}: the engine closed the connection"):
                await streams.post(url, b"{}")

    asyncio.run(main())


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\ndata: 1\n\nxx", b"data: 1\n\nxx"),
        (
            b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 1\n\ndata: 2\n\n",
            b"data: 1\n\ndata: 2\n\n",
        ),
        (HEAD + chunked(b"da", b"ta: 1\n", b"\n"), b"data: 1\n\n"),
    ],
    ids=["content-length", "until-close", "chunked"],
)
def test_bodies_framed_by_length_by_the_connections_end_or_chunked(answer: bytes, expected: bytes) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        for i in range(0, len(answer), 7):  # a few bytes a write: the parser sees every boundary
            writer.write(answer[i : i + 7])
            await writer.drain()
            await asyncio.sleep(0)
        if answer.startswith(b"HTTP/1.0"):
            writer.close()

    async def main() -> bytes:
        async with server(handler) as (url, _), pool() as streams:
            return await body(await streams.post(url, b"{}"))

    assert asyncio.run(main()) == expected


def test_an_answer_cut_mid_body_fails_with_what_came_before_it_kept() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD + b"9\r\ndata: 1\n\n\r\n5\r\nda")
        await writer.drain()

    async def main() -> tuple[bytes, str]:
        async with server(handler) as (url, _), pool() as streams:
            answer = await streams.post(url, b"{}")
            first = await answer.readany()
            with pytest.raises(EngineProtocolError) as info:
                while await answer.readany():
                    pass
            return first, str(info.value)

    first, message = asyncio.run(main())
    assert first.startswith(b"data: 1\n\n")
    assert message.startswith(f"{LABEL}: the connection was cut mid-response")


def test_an_answer_that_is_not_http_is_reported() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    async def main() -> None:
        async with server(handler) as (url, _), pool() as streams:
            with pytest.raises(EngineProtocolError, match=f"^{LABEL}: the engine's answer is not valid HTTP"):
                await streams.post(url, b"{}")

    asyncio.run(main())


def test_no_more_connections_than_the_pools_size_and_the_wait_for_one_is_bounded() -> None:
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await read_request(reader):
            writer.write(HEAD)
            await writer.drain()
            await release.wait()
            writer.write(chunked(b"data: done\n\n"))
            await writer.drain()

    async def main() -> tuple[str, bytes, bytes, int]:
        async with server(handler) as (url, connections), pool(max_connections=1, connect_timeout=0.3) as streams:
            first = await streams.post(url, b"{}")
            with pytest.raises(EngineUnavailable) as info:
                await streams.post(url, b"{}")  # the only connection is busy for longer than the bound
            waiting = asyncio.create_task(streams.post(url, b"{}"))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            release.set()
            first_body = await body(first)  # back in the pool: the waiting request takes it
            second_body = await body(await waiting)
            return str(info.value), first_body, second_body, len(connections)

    message, first, second, n = asyncio.run(main())
    assert "no pooled connection was free in time (raise --engine-max-connections)" in message
    assert first == second == b"data: done\n\n"
    assert n == 1


def test_a_closed_answer_closes_its_connection_and_the_next_request_opens_another() -> None:
    # Closing before the end is how most engines learn to stop generating.
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD + b"9\r\ndata: 1\n\n\r\n")
        await writer.drain()
        if not await reader.read():
            closed.set()

    async def main() -> int:
        async with server(handler) as (url, connections), pool() as streams:
            answer = await streams.post(url, b"{}")
            assert await answer.readany() == b"data: 1\n\n"
            answer.close()
            await asyncio.wait_for(closed.wait(), 2)
            assert answer.transport_now() is None
            second = await streams.post(url, b"{}")
            second.close()
            return len(connections)

    assert asyncio.run(main()) == 2


def test_an_unread_answer_stops_being_read_past_the_high_water_mark_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_stream_client, "HIGH_WATER", 4096)
    parts = [b"data: %06d\n\n" % i for i in range(20000)]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD)
        for i in range(0, len(parts), 100):
            writer.write(chunked(*parts[i : i + 100])[:-5])  # every chunk but the terminating one
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def main() -> tuple[bool, bytes]:
        async with server(handler) as (url, _), pool() as streams:
            answer = await streams.post(url, b"{}")
            await asyncio.sleep(0.3)  # the engine writes on; nobody reads
            transport = answer.transport_now()
            paused = transport is not None and not transport.is_reading()
            return paused, await body(answer)

    paused, data = asyncio.run(main())
    assert paused
    assert data == b"".join(parts)


def test_a_refused_connection_is_an_unavailable_engine() -> None:
    async def main() -> None:
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        async with pool() as streams:
            with pytest.raises(EngineUnavailable, match=f"^{LABEL}: cannot connect"):
                await streams.post(f"http://127.0.0.1:{port}/v1/completions", b"{}")

    asyncio.run(main())


def _certificate(tmp: Path) -> tuple[Path, Path]:
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return key, cert


def test_https_engines_are_reached_over_tls_and_an_untrusted_certificate_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, cert = _certificate(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await read_request(reader):
            writer.write(HEAD + chunked(b"data: secret\n\n"))
            await writer.drain()

    async def main(trusted: bool) -> bytes:
        if trusted:
            monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # read when the client's TLS context is made
        async with server(handler, context) as (url, _), pool() as streams:
            return await body(await streams.post(url, b"{}"))

    with pytest.raises(EngineUnavailable, match=f"^{LABEL}: cannot connect: the TLS certificate was refused"):
        asyncio.run(main(trusted=False))
    assert asyncio.run(main(trusted=True)) == b"data: secret\n\n"
