"""A vector store of many files is searched like a small one, on both stores: the files searched are one
parameter of the query, not one each (PostgreSQL's statements here numbered at most 999 placeholders: a
store of a thousand completed files answered every search with a 500; SQLite's own limit on variables is
32,766 unless built otherwise)."""

from __future__ import annotations

import asyncio

from harmony_responses.store import store_from_spec, vector_stores_of

FILES = 40_000  # past both limits


def test_a_search_over_tens_of_thousands_of_files(store_spec: str) -> None:
    async def search() -> tuple[list[object], list[object]]:
        store = store_from_spec(store_spec)
        await store.open()
        try:
            stores = vector_stores_of(store)
            pairs = [(f"vs_{i % 3}", f"file-{i}") for i in range(FILES)]
            text = await stores.search(pairs, ["otters"], 10)
            vectors = await stores.vector_search(pairs, [0.5, 0.5], "any", 10) if stores.vectors else []
            return text, vectors
        finally:
            await store.aclose()

    assert asyncio.run(search()) == ([], [])
