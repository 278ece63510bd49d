"""A tiny OpenAI-compatible ``/v1/embeddings`` server over WordLlama, for ``retrieval_bench.py --embeddings``.

Run: ``python bench/_wordllama_embeddings.py PORT`` with ``wordllama`` installed (``pip install wordllama``, in a
venv of its own if you like: it needs numpy 2 and tokenizers, not this project). WordLlama (MIT) ships its
256-dimension ``l2_supercat`` static embeddings and their tokenizer inside the wheel, so nothing is downloaded:
it is the one embedding model this machine can load (every other small one comes from a hub at run time). It
is a bag of word vectors (an average over tokens), far weaker than a transformer encoder: a floor for what
hybrid ranking gains, not a ceiling.

Answers ``GET /v1/models`` and ``POST /v1/embeddings`` (``input`` a string or a list of strings; ``data`` in
input order, ``usage`` with token counts); nothing else.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import wordllama
from wordllama import WordLlama

# The wheel keeps its tokenizer under tokenizers/, which WordLlama looks for in a cache folder only: the
# package's own folder is that cache.
MODEL = WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)
NAME = "wordllama-l2-supercat-256"


class Handler(BaseHTTPRequestHandler):
    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": NAME, "object": "model"}]})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/v1/embeddings":
            self._send(404, {"error": {"message": "not found"}})
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = MODEL.embed(texts, norm=True)
        tokens = sum(len(t.split()) for t in texts)
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
        self._send(
            200,
            {"object": "list", "model": NAME, "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}},
        )

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
