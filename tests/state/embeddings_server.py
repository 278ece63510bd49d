"""A tiny OpenAI-compatible ``/v1/embeddings`` server for the hybrid-retrieval tests, on 127.0.0.1.

Its vectors are deterministic and carry a little meaning: each word is mapped to a concept (``CONCEPTS``:
"automobile", "car" and "vehicle" are one), the concepts hashed into ``DIMENSIONS`` buckets, the counts
normalised. So a paraphrase that shares no word with a text (and which BM25 cannot find) shares its concepts,
and its vector is near the text's. It records every request's body (``requests``) and ``Authorization``
header, can be told to fail (``fail``: answer 500) or to answer something else (``answer``), and lists one
model on ``/v1/models``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIMENSIONS = 48
MODEL = "concepts-48"

CONCEPTS = {
    word: concept
    for concept, words in {
        "car": "car cars automobile automobiles vehicle vehicles motor",
        "fix": "fix fixing repair repairing mend mending service servicing",
        "brake": "brake brakes braking stopping",
        "grease": "oil lubricant grease",
        "sea": "sea ocean oceans marine",
        "otter": "otter otters",
        "sleep": "sleep sleeping slumber rest",
    }.items()
    for word in words.split()
}


def embed(text: str) -> list[float]:
    counts = [0.0] * DIMENSIONS
    for word in re.findall(r"\w+", text.lower()):
        concept = CONCEPTS.get(word, word)
        counts[int(hashlib.sha256(concept.encode()).hexdigest(), 16) % DIMENSIONS] += 1.0
    norm = math.sqrt(sum(c * c for c in counts)) or 1.0
    return [c / norm for c in counts]


class EmbeddingsServer:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []  # each POST's Authorization header
        self.fail = False
        self.answer: dict[str, Any] | None = None  # answered (200) instead of the vectors, when set
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._answer(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
                else:
                    self._answer(404, {"error": "not found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(body)
                owner.authorizations.append(self.headers.get("Authorization"))
                if self.path != "/v1/embeddings":
                    self._answer(404, {"error": "not found"})
                elif owner.fail:
                    self._answer(500, {"error": {"message": "the embedding model is down"}})
                elif owner.answer is not None:
                    self._answer(200, owner.answer)
                else:
                    texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
                    data = [{"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(texts)]
                    # Out of order on purpose: the client must put them back by their index.
                    self._answer(200, {"object": "list", "model": MODEL, "data": data[::-1]})

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def inputs(self) -> list[str]:
        """Every text it was asked to embed, in order."""
        out: list[str] = []
        for body in self.requests:
            out.extend([body["input"]] if isinstance(body["input"], str) else body["input"])
        return out

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
