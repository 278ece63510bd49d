"""file_search — retrieval over a key's own documents: chunking, text extraction and attribute filters.

``_chunking``: the ``auto`` (800 tokens, 400 overlap) and ``static`` strategies over the o200k tokenizer the
server already has (``vocab.py``); ``_extract``: a stored file's bytes → text (text, Markdown, HTML, JSON,
code; PDF through pypdf); ``_filters``: the API's comparison and compound filters over file attributes;
``_session``: the ``file_search`` tool of a response (its ``msearch`` calls and their citations);
``_embeddings``: the ``--embeddings`` server's client; ``_ranking``: hybrid ranking (reciprocal rank fusion). The
vector stores themselves are kept by ``store/_vector_stores.py`` and run by ``run/vector_stores.py``.
"""

from ._chunking import AUTO_CHUNKING, ChunkingError, chunk_text, parse_chunking
from ._embeddings import Embeddings, EmbeddingsError
from ._extract import MAX_INGEST_BYTES, Unsupported, extract_text
from ._filters import FilterError, check_filter, matches
from ._ranking import HybridError, fuse, hybrid_weights
from ._session import FileSearchSession

__all__ = [
    "AUTO_CHUNKING",
    "MAX_INGEST_BYTES",
    "ChunkingError",
    "Embeddings",
    "EmbeddingsError",
    "FileSearchSession",
    "FilterError",
    "HybridError",
    "Unsupported",
    "check_filter",
    "chunk_text",
    "extract_text",
    "fuse",
    "hybrid_weights",
    "matches",
    "parse_chunking",
]
