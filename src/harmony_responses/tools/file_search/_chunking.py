"""Chunking strategies: a text → overlapping windows of o200k tokens, each decoded back to text.

``auto`` is what the API documents for it: 800-token chunks overlapping by 400. ``static`` takes
``max_chunk_size_tokens`` (100..4096) and ``chunk_overlap_tokens`` (0..half the chunk size), the API's bounds.
A window's edges can split a multi-byte character between two tokens: the partial bytes are dropped at the
edge (the overlap holds them whole in the neighbouring chunk).
"""

from __future__ import annotations

from typing import Any

from ...text_tokens import encode_text
from ...vocab import load_vocabulary
from ._extract import Unsupported

__all__ = ["AUTO_CHUNKING", "ChunkingError", "chunk_text", "parse_chunking"]

AUTO_CHUNKING = {"type": "static", "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}}
MIN_TOKENS, MAX_TOKENS = 100, 4096
MAX_FILE_TOKENS = 5_000_000  # OpenAI's limit per file in a vector store


class ChunkingError(ValueError):
    """A chunking_strategy the API would refuse; the message says why, ``param`` where."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def parse_chunking(value: Any, param: str = "chunking_strategy") -> dict[str, Any]:
    """A request's ``chunking_strategy`` (None: auto) → the static strategy it means (as the API reports it)."""
    if value is None:
        return AUTO_CHUNKING
    if not isinstance(value, dict) or value.get("type") not in ("auto", "static"):
        raise ChunkingError("Invalid chunking_strategy: expected type 'auto' or 'static'.", f"{param}.type")
    if value["type"] == "auto":
        return AUTO_CHUNKING
    static = value.get("static")
    if not isinstance(static, dict):
        raise ChunkingError("Missing required parameter: 'static'.", f"{param}.static")
    size, overlap = static.get("max_chunk_size_tokens"), static.get("chunk_overlap_tokens")
    for name, number in (("max_chunk_size_tokens", size), ("chunk_overlap_tokens", overlap)):
        if not isinstance(number, int) or isinstance(number, bool):
            raise ChunkingError(f"Invalid type for '{name}': expected an integer.", f"{param}.static.{name}")
    assert isinstance(size, int) and isinstance(overlap, int)
    if not MIN_TOKENS <= size <= MAX_TOKENS:
        raise ChunkingError(
            f"Invalid 'max_chunk_size_tokens': expected a value between {MIN_TOKENS} and {MAX_TOKENS}, got {size}.",
            f"{param}.static.max_chunk_size_tokens",
        )
    if not 0 <= overlap <= size // 2:
        raise ChunkingError(
            f"Invalid 'chunk_overlap_tokens': expected a value between 0 and half of max_chunk_size_tokens "
            f"({size // 2}), got {overlap}.",
            f"{param}.static.chunk_overlap_tokens",
        )
    return {"type": "static", "static": {"max_chunk_size_tokens": size, "chunk_overlap_tokens": overlap}}


def chunk_text(text: str, strategy: dict[str, Any]) -> list[str]:
    """The chunks of ``text`` under a parsed ``strategy``, in order; none for a text without tokens.

    Raises:
        Unsupported: the text has more than ``MAX_FILE_TOKENS`` tokens (``invalid_file``).
    """
    size = strategy["static"]["max_chunk_size_tokens"]
    overlap = strategy["static"]["chunk_overlap_tokens"]
    # disallowed_special=(): a document containing '<|end|>' is text, not a special token.
    ids = encode_text(text)  # in linear time: a file may hold a long run of one character
    if len(ids) > MAX_FILE_TOKENS:
        raise Unsupported(f"The file's text has {len(ids)} tokens, more than {MAX_FILE_TOKENS}.", "invalid_file")
    table = load_vocabulary().token_bytes
    chunks: list[str] = []
    step = size - overlap
    for start in range(0, max(len(ids) - overlap, 1) if ids else 0, step):
        window = ids[start : start + size]
        piece = b"".join(table[i] for i in window).decode("utf-8", errors="ignore").strip()
        if piece:
            chunks.append(piece)
    return chunks
