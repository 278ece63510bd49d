"""The Conversations API's objects: conversations and their items, kept in the store.

Every operation is scoped to the caller (``owner``, a hash of its API key): another key's conversation
is a 404, exactly as one that does not exist. Items added here are resolved like a response's input
(request/resolve.py: ids given, ``item_reference`` items replaced by the stored items they name).
"""

from __future__ import annotations

import time
from typing import Any, Literal

import orjson

from ..errors import not_found
from ..ids import random_id
from ..request import History, resolve_items
from ..store import AppendItems, ConversationRecord, CreateConversation, Store
from .stored import StoredResponses, known_id, page

__all__ = ["Conversations", "conversation_object"]


def conversation_object(record: ConversationRecord) -> dict[str, Any]:
    return {"id": record.id, "object": "conversation", "created_at": record.created_at, "metadata": record.metadata}


def _encoded(items: list[dict[str, Any]]) -> list[tuple[str, bytes]]:
    return [(item["id"], orjson.dumps(item)) for item in items]


class Conversations:
    """Conversations in the stored responses' store; their ``History`` resolves the references of added items."""

    def __init__(self, stored: StoredResponses) -> None:
        self._stored = stored
        self.history: History = stored

    @property
    def store(self) -> Store:
        return self._stored.store

    async def get(self, conversation_id: str, owner: str) -> ConversationRecord:
        known_id("Conversation", conversation_id)
        record = await self.store.get_conversation(conversation_id, owner)
        if record is None:
            raise not_found("Conversation", conversation_id)
        return record

    async def create(self, owner: str, metadata: dict[str, Any] | None, raw_items: list[Any]) -> ConversationRecord:
        items = await resolve_items(raw_items, owner, self.history, param="items")
        record = ConversationRecord(
            id=random_id("conv"), owner=owner, created_at=int(time.time()), metadata=metadata or {}
        )
        await self.store.write([CreateConversation(record=record, updated_at=time.time(), items=_encoded(items))])
        return record

    async def update(self, record: ConversationRecord, metadata: dict[str, Any]) -> ConversationRecord:
        updated = await self.store.update_conversation(record.id, record.owner, metadata, time.time())
        if updated is None:
            raise not_found("Conversation", record.id)
        return updated

    async def delete(self, conversation_id: str, owner: str) -> None:
        known_id("Conversation", conversation_id)
        if not await self.store.delete_conversation(conversation_id, owner):
            raise not_found("Conversation", conversation_id)

    async def items(
        self, conversation_id: str, owner: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> tuple[list[dict[str, Any]], bool]:
        record = await self.get(conversation_id, owner)
        return await page(self.store, record.id, "conversation", after=after, limit=limit, order=order)

    async def add_items(self, record: ConversationRecord, raw_items: list[Any]) -> list[dict[str, Any]]:
        owner = record.owner
        items = await resolve_items(raw_items, owner, self.history, param="items")
        await self.store.write(
            [
                AppendItems(
                    parent=record.id,
                    kind="conversation",
                    owner=owner,
                    created_at=int(time.time()),
                    items=_encoded(items),
                )
            ]
        )
        return items

    async def item(self, conversation_id: str, owner: str, item_id: str) -> dict[str, Any]:
        record = await self.get(conversation_id, owner)
        known_id("Item", item_id)
        item = await self.store.get_item(record.id, "conversation", item_id)
        if item is None:
            raise not_found("Item", item_id)
        return item

    async def delete_item(self, conversation_id: str, owner: str, item_id: str) -> ConversationRecord:
        record = await self.get(conversation_id, owner)
        known_id("Item", item_id)
        if not await self.store.delete_item(record.id, "conversation", item_id):
            raise not_found("Item", item_id)
        return record
