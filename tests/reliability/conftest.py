"""The reliability suite runs on both stores: the state tests' fixtures (a SQLite file, a PostgreSQL schema)."""

from state.conftest import postgres_url, serve, store_spec

__all__ = ["postgres_url", "serve", "store_spec"]
