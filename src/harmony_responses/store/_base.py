"""The store interface: what the API keeps about responses and conversations, independent of the database.

A store keeps five things (schema in ``_migrations.py``):

- **responses**: one row per stored response — its owner (a hash of the API key, ``""`` without auth),
  status, the Response object as last written, the chain link (``previous_response_id``), its
  conversation, and which server process is producing it while it runs (``process_id``, NULL once it
  ended) plus a cancel flag any process can set;
- **events**: each response's event log, each event's JSON exactly as sent, so that a replay is
  byte-identical to the live stream; stored in chunks of consecutive events (``_migrations.py``);
- **items**: input items and output items of responses, and conversation items, each list ordered by
  ``position`` (the cursor of ``input_items`` and conversation item listings is an item id);
- **conversations**: id, owner, metadata and the next free item position;
- **processes**: one row per running server process with a heartbeat — the lease that tells a live
  process's in-flight responses from those a crashed process left behind;
- **traces**: a traced response's per-token trace (``tokentrace``), one JSON document per response, read
  through its response's owner and deleted with it.

Writes that happen while a response streams go through ``write(ops)``: one transaction for any number of
operations, so that the caller (``_writer.Writer``) can group the events of every stream into one commit.
Everything else is a small method per question. Owners: every read that a client can reach takes
``owner`` and answers as if a row of another owner did not exist.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

__all__ = [
    "ACTIVE_STATUSES",
    "ActiveResponse",
    "AppendEvents",
    "AppendItems",
    "ConversationRecord",
    "CreateConversation",
    "InsertResponse",
    "ItemKind",
    "Op",
    "Page",
    "ProcessInfo",
    "PutTrace",
    "RESPONSE_COLUMNS",
    "Rows",
    "Store",
    "item_rows",
    "StoreError",
    "StoreUnavailable",
    "StoredResponse",
    "UpdateResponse",
    "split_chunks",
]

ItemKind = Literal["input", "output", "conversation"]
ACTIVE_STATUSES = ("queued", "in_progress")


class StoreError(Exception):
    """The store cannot be opened or used (bad spec, unreachable database, newer schema than this code)."""


class StoreUnavailable(StoreError):
    """A read or write failed in the store's driver (the database unreachable, full or refusing the row), or
    the store can no longer keep writes (its SQLite file deleted): the request is refused, 503."""


# ---------------------------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResponse:
    """A response row. ``response`` is the Response object as last written (JSON bytes)."""

    id: str
    owner: str
    created_at: int
    status: str
    background: bool
    previous_response_id: str | None
    conversation_id: str | None
    process_id: str | None
    cancel_requested: bool
    response: bytes
    request_id: str | None = None  # the x-request-id of the request that created it (logs.py), for support


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationRecord:
    id: str
    owner: str
    created_at: int
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessInfo:
    """A server process: ``host`` names the machine and its pid namespace, so pids can be checked there;
    ``pid_start`` tells that pid's process from a later one given the same pid (None: unknown)."""

    id: str
    host: str
    pid: int
    pid_start: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ActiveResponse:
    """A queued or in-progress response and the lease of the process producing it (None: no such row)."""

    id: str
    process_id: str | None
    host: str | None  # None: no process row (it unregistered, or was forgotten)
    pid: int | None
    pid_start: str | None = None
    heartbeat: float | None = None  # changes at every heartbeat of the process
    # Seconds since its last heartbeat by a clock all processes share (PostgreSQL's); None where the store has
    # none (SQLite: each process writes its own wall clock, which may disagree or step).
    heartbeat_age: float | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a cursor listing: ``items`` in the order asked for, and whether more follow."""

    items: list[dict[str, Any]]
    has_more: bool


# ---------------------------------------------------------------------------------------------- writes


@dataclass(frozen=True, slots=True, kw_only=True)
class InsertResponse:
    """A new response row and its input items (``(item_id, json)`` in order)."""

    record: StoredResponse
    updated_at: float
    input_items: Sequence[tuple[str, bytes]] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateResponse:
    """New status and Response object; ``finished`` releases the row from its process."""

    id: str
    status: str
    response: bytes
    updated_at: float
    finished: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendEvents:
    """Events ``first_seq, first_seq + 1, …`` of a response's log."""

    response_id: str
    first_seq: int
    data: Sequence[bytes]


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendItems:
    """Items appended to a list: a response's output (positions from 0) or a conversation (after its last)."""

    parent: str
    kind: ItemKind
    owner: str
    created_at: int
    items: Sequence[tuple[str, bytes]]


@dataclass(frozen=True, slots=True, kw_only=True)
class PutTrace:
    """A response's trace (JSON), written in the round of its terminal event (before it: submitted first)."""

    response_id: str
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateConversation:
    record: ConversationRecord
    updated_at: float
    items: Sequence[tuple[str, bytes]] = field(default=())


Op = InsertResponse | UpdateResponse | AppendEvents | AppendItems | CreateConversation | PutTrace


# A StoredResponse's columns, in its field order (the row also has ``updated_at``).
RESPONSE_COLUMNS = (
    "id, owner, created_at, status, background, previous_response_id, conversation_id, process_id, "
    "cancel_requested, response, request_id"
)


def item_rows(
    parent: str, kind: str, owner: str, created_at: int, start: int, items: Sequence[tuple[str, bytes]]
) -> list[tuple[Any, ...]]:
    """Rows of the ``items`` table (parent, kind, position, id, owner, created_at, data), positions from ``start``."""
    return [(parent, kind, start + i, item_id, owner, created_at, data) for i, (item_id, data) in enumerate(items)]


@dataclass(slots=True)
class Rows:
    """A write's ops as rows, one list per statement, in the order the statements must run.

    A store writes each list with one statement (PostgreSQL: a pipelined executemany; SQLite: one
    multi-row statement), not one per op: a round under load holds events and an update for each of
    dozens of streams. The order keeps what depends on what: responses are inserted before they are
    updated, conversations created before items are appended to them. Conversation appends take their
    positions from the conversation's row, so they stay ops; their items join ``items`` once placed.
    """

    responses: list[tuple[Any, ...]] = field(default_factory=list)  # RESPONSE_COLUMNS, updated_at
    updates: list[tuple[Any, ...]] = field(default_factory=list)  # (status, response, updated_at, finished, id)
    events: list[tuple[str, int, int, bytes]] = field(default_factory=list)  # (response_id, seq, last_seq, data)
    # (id, owner, created_at, updated_at, metadata, next_position)
    conversations: list[tuple[Any, ...]] = field(default_factory=list)
    appends: list[AppendItems] = field(default_factory=list)  # to conversations
    items: list[tuple[Any, ...]] = field(default_factory=list)  # item_rows
    traces: list[tuple[str, bytes]] = field(default_factory=list)  # (response_id, data)

    @classmethod
    def of(cls, ops: Sequence[Op]) -> Rows:
        rows = cls()
        updates: dict[str, tuple[Any, ...]] = {}  # the last update of each response wins: each is a snapshot
        for op in ops:
            if isinstance(op, AppendEvents):
                if op.data:
                    last = op.first_seq + len(op.data) - 1
                    rows.events.append((op.response_id, op.first_seq, last, b"\n".join(op.data)))
            elif isinstance(op, InsertResponse):
                r = op.record
                rows.responses.append(
                    (
                        r.id,
                        r.owner,
                        r.created_at,
                        r.status,
                        r.background,
                        r.previous_response_id,
                        r.conversation_id,
                        r.process_id,
                        r.cancel_requested,
                        r.response,
                        r.request_id,
                        op.updated_at,
                    )
                )
                rows.items += item_rows(r.id, "input", r.owner, r.created_at, 0, op.input_items)
            elif isinstance(op, UpdateResponse):
                finished = op.finished or (op.id in updates and updates[op.id][3])
                updates.pop(op.id, None)
                updates[op.id] = (op.status, op.response, op.updated_at, finished, op.id)
            elif isinstance(op, AppendItems):
                if op.kind == "conversation":
                    rows.appends.append(op)
                else:
                    rows.items += item_rows(op.parent, op.kind, op.owner, op.created_at, 0, op.items)
            elif isinstance(op, CreateConversation):
                c = op.record
                rows.conversations.append(
                    (c.id, c.owner, c.created_at, op.updated_at, orjson.dumps(c.metadata), len(op.items))
                )
                rows.items += item_rows(c.id, "conversation", c.owner, c.created_at, 0, op.items)
            elif isinstance(op, PutTrace):
                rows.traces.append((op.response_id, op.data))
            else:  # pragma: no cover - Op is a closed union
                raise AssertionError(op)
        rows.updates = list(updates.values())
        return rows

    def response_ids(self) -> set[str]:
        """The responses whose log, row or output this write changes (``held`` filters on them)."""
        ids = {row[0] for row in self.events}
        ids.update(row[4] for row in self.updates)
        ids.update(row[0] for row in self.items if row[1] == "output")
        ids.update(row[0] for row in self.traces)
        return ids

    def held(self, held: set[str]) -> None:
        """Drop the events, updates and output items of responses not in ``held`` (``Store.write``'s holder)."""
        self.events = [row for row in self.events if row[0] in held]
        self.updates = [row for row in self.updates if row[4] in held]
        self.items = [row for row in self.items if row[1] != "output" or row[0] in held]
        self.traces = [row for row in self.traces if row[0] in held]


def split_chunks(rows: Sequence[Any], after: int) -> list[tuple[int, bytes]]:
    """Event-log chunks ``(first_seq, newline-joined events)`` → ``(seq, event)`` with ``seq > after``."""
    events: list[tuple[int, bytes]] = []
    for first, data in rows:
        for offset, event in enumerate(bytes(data).split(b"\n")):
            if first + offset > after:
                events.append((first + offset, event))
    return events


# ---------------------------------------------------------------------------------------------- interface


class Store(abc.ABC):
    """A database keeping responses, event logs, items and conversations; see the module docstring."""

    #: ``sqlite`` or ``postgresql``.
    kind: str
    #: What ranks file_search's chunks by vectors here ("sqlite-vec v0.1.9"), once ``use_vectors`` found it.
    vectors: str | None = None
    #: Why vectors were asked for (``use_vectors``) and cannot be had.
    no_vectors: str | None = None

    @abc.abstractmethod
    def describe(self) -> str:
        """One line for the startup banner (no secrets)."""

    def use_vectors(self) -> None:
        """Make ready, before ``open``, to keep and compare vectors (file_search's hybrid ranking)."""
        self.no_vectors = "this store keeps no vectors"

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and apply pending migrations (creating the file or schema on first start).

        Raises:
            StoreError: the database cannot be reached or its schema is newer than this code.
        """

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    # ------------------------------------------------------------------ writes

    @abc.abstractmethod
    async def write(self, ops: Sequence[Op], *, holder: str | None = None) -> None:
        """Apply ``ops`` in order, in one transaction.

        ``holder``: the process writing. Its events, updates and output items of a response apply only while
        that process holds the response (``process_id``); the others are dropped. So once another process's
        recovery has claimed a response and closed its log, nothing the former producer still writes lands
        after (or instead of) that close; and nothing is appended to a response that ended or was deleted.
        """

    # ------------------------------------------------------------------ processes and recovery

    @abc.abstractmethod
    async def register_process(self, process: ProcessInfo) -> None: ...

    @abc.abstractmethod
    async def heartbeat(self, process_id: str) -> None: ...

    @abc.abstractmethod
    async def unregister_process(self, process_id: str) -> None: ...

    @abc.abstractmethod
    async def active_responses(self) -> list[ActiveResponse]:
        """Every queued or in-progress response with the lease of its process."""

    @abc.abstractmethod
    async def claim(self, response_id: str, *, holder: str | None, new_holder: str) -> bool:
        """Move an active response from process ``holder`` to ``new_holder``; False if someone else did first."""

    @abc.abstractmethod
    async def forget_processes(self, max_age: float) -> None:
        """Delete process rows whose heartbeat is older than ``max_age`` seconds and that hold nothing."""

    # ------------------------------------------------------------------ responses

    @abc.abstractmethod
    async def get_response(self, response_id: str, owner: str | None) -> StoredResponse | None:
        """The row, or None; ``owner`` None skips the owner check (internal use only)."""

    @abc.abstractmethod
    async def delete_response(self, response_id: str, owner: str) -> bool:
        """Delete a response with its log and items; False if there is none for this owner."""

    @abc.abstractmethod
    async def request_cancel(self, response_id: str) -> None: ...

    @abc.abstractmethod
    async def cancel_requests(self, response_ids: Sequence[str]) -> list[str]:
        """Which of ``response_ids`` have their cancel flag set."""

    @abc.abstractmethod
    async def get_trace(self, response_id: str, owner: str) -> bytes | None:
        """The response's trace (JSON), if it has one and ``owner`` owns the response."""

    @abc.abstractmethod
    async def read_events(self, response_id: str, *, after: int, limit: int) -> list[tuple[int, bytes]]:
        """Events with ``seq > after`` in order, from at most ``limit`` chunks of the log."""

    @abc.abstractmethod
    async def chain_items(self, response_id: str, owner: str) -> list[dict[str, Any]] | None:
        """Input then output items of the response and, before them, of every response it continues.

        None when ``response_id`` is not a response of ``owner``. Oldest first.
        """

    # ------------------------------------------------------------------ items

    @abc.abstractmethod
    async def list_items(
        self, parent: str, kind: ItemKind, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> Page | None:
        """A page of a list; None when ``after`` names no item of it."""

    @abc.abstractmethod
    async def all_items(self, parent: str, kind: ItemKind) -> list[dict[str, Any]]: ...

    @abc.abstractmethod
    async def get_item(self, parent: str, kind: ItemKind, item_id: str) -> dict[str, Any] | None: ...

    @abc.abstractmethod
    async def delete_item(self, parent: str, kind: ItemKind, item_id: str) -> bool: ...

    @abc.abstractmethod
    async def find_item(self, item_id: str, owner: str) -> dict[str, Any] | None:
        """The first stored item with this id among the owner's responses and conversations.

        The first, in the order rows were stored: the item as it was made (a response's output item, a new
        input item). Later rows with its id are copies clients resent, often thinner (a reasoning item sent
        back with its id alone), and must not stand for it.
        """

    @abc.abstractmethod
    async def shared_secret(self, name: str, new: str) -> str:
        """The secret stored under ``name``; ``new`` is stored first when there is none (of processes racing, one
        wins for all)."""

    # ------------------------------------------------------------------ conversations

    @abc.abstractmethod
    async def get_conversation(self, conversation_id: str, owner: str) -> ConversationRecord | None: ...

    @abc.abstractmethod
    async def update_conversation(
        self, conversation_id: str, owner: str, metadata: dict[str, Any], updated_at: float
    ) -> ConversationRecord | None: ...

    @abc.abstractmethod
    async def delete_conversation(self, conversation_id: str, owner: str) -> bool: ...

    # ------------------------------------------------------------------ retention

    @abc.abstractmethod
    async def purge(self, before: float) -> int:
        """Delete finished responses created before ``before`` (Unix seconds) and conversations not
        updated since; returns how many responses and conversations went."""
