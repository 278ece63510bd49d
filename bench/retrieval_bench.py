"""How well file_search finds what a test collection's judges marked relevant: nDCG@10 and recall@10.

Run: ``python bench/retrieval_bench.py DIR`` where DIR holds a test collection in one of two layouts:

* BEIR (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``), e.g. SciFact; for the BEIR collections
  named in ``PUBLISHED`` the BM25 figures of the BEIR paper and of Anserini's regressions are printed beside
  ours (the folder's name says which collection it is: ``scifact``, ``nfcorpus``, ...);
* Cranfield as its authors distribute it (``cran.all.1400``, ``cran.qry``, ``cranqrel``).

No package on PyPI or npm ships such a collection with its documents (``ir_datasets`` and ``beir`` download
them at run time), so the bench reads a copy the caller already has and downloads nothing;
docs/tools/file-search.md ("Quality and speed") says where the SciFact copy measured there came from.

A server runs as a subprocess (``--store`` as given, else a SQLite file in a temporary folder); every
document is uploaded as one ``.txt`` file (title, a blank line, text) through ``/v1/files`` with the openai
client, attached with ``file_batches`` (default ``auto`` chunking) and waited for; each query is a
``vector_stores.search`` for 50 chunks, ranked to documents by their best chunk. ``--embeddings URL`` runs it
again on a server given that embedding engine: hybrid ranking (the default weights), then the vectors alone
(``ranking_options.hybrid_search`` with ``text_weight`` 0) on the same ingestion, which says what the embedding
model brings to the fusion; ``bench/_wordllama_embeddings.py`` serves the one small embedding model a package
ships with its weights.

Beside ours the bench prints a reference BM25 computed here over whole documents (Okapi BM25, k1=0.9,
b=0.4 — Anserini's defaults — on lower-cased words, no stemming), so that a gap between the two says what
chunking and the store's full-text engine cost or gain on the same text. Metrics follow trec_eval's
``ndcg_cut.10`` (linear gains, the judged grades) and ``recall.10`` (documents judged above 0).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import openai
from openai import OpenAI

from server_bench import BIN, free_port

# BM25 nDCG@10 on each collection's test split, BEIR paper (Thakur et al., NeurIPS 2021 Datasets and
# Benchmarks, arXiv:2104.08663), Table 2 (Elasticsearch BM25 over title + text).
PUBLISHED = {"scifact": 0.665, "nfcorpus": 0.325, "fiqa": 0.236, "arguana": 0.315, "scidocs": 0.158}
# BM25 "flat" nDCG@10 of Anserini's BEIR v1.0.0 regressions (docs/regressions-beir-v1.0.0-*-flat.md: Lucene,
# k1=0.9 b=0.4, title and text concatenated into one field, English analyzer with Porter stemming): the
# published configuration nearest this bench's, which uploads title and text as one file's text.
ANSERINI_FLAT = {"scifact": 0.679, "nfcorpus": 0.322, "fiqa": 0.236, "arguana": 0.397, "scidocs": 0.149}
CANDIDATES = 50
WORD = re.compile(r"\w+")

Docs = dict[str, tuple[str, str]]  # id -> (title, text)
Qrels = dict[str, dict[str, int]]  # query id -> document id -> grade


def load_beir(folder: Path) -> tuple[Docs, dict[str, str], Qrels]:
    docs: Docs = {}
    for line in (folder / "corpus.jsonl").open(encoding="utf-8"):
        row = json.loads(line)
        docs[str(row["_id"])] = (row.get("title") or "", row.get("text") or "")
    queries = {str(r["_id"]): r["text"] for r in map(json.loads, (folder / "queries.jsonl").open(encoding="utf-8"))}
    qrels: Qrels = {}
    for line in (folder / "qrels" / "test.tsv").open(encoding="utf-8"):
        parts = line.split()
        if len(parts) < 3 or not parts[-1].lstrip("-").isdigit():
            continue  # the header
        query, doc, grade = parts[0], parts[-2], int(parts[-1])
        qrels.setdefault(query, {})[doc] = grade
    return docs, {q: queries[q] for q in qrels if q in queries}, qrels


def _fields(path: Path) -> list[dict[str, str]]:
    """Records of a SMART-format file (``.I id`` then ``.T``/``.A``/``.B``/``.W`` fields)."""
    records: list[dict[str, str]] = []
    field = ""
    for line in path.read_text(encoding="latin-1").splitlines():
        if line.startswith(".I"):
            records.append({"id": line[2:].strip()})
            field = ""
        elif len(line) == 2 and line.startswith("."):
            field = line[1]
        elif records and field:
            records[-1][field] = (records[-1].get(field, "") + " " + line).strip()
    return records


def load_cranfield(folder: Path) -> tuple[Docs, dict[str, str], Qrels]:
    docs = {r["id"]: (r.get("T", ""), r.get("W", "")) for r in _fields(folder / "cran.all.1400")}
    # cranqrel numbers the queries 1..225 in file order, not by their .I ids (which skip numbers).
    queries = {str(n): r.get("W", "") for n, r in enumerate(_fields(folder / "cran.qry"), 1)}
    qrels: Qrels = {}
    for line in (folder / "cranqrel").read_text().splitlines():
        query, doc, code = line.split()[:3]
        # Codes 1 (a complete answer) to 4 (minimum interest); -1 (no interest) and 5 are not relevant.
        grade = 5 - int(code) if 1 <= int(code) <= 4 else 0
        qrels.setdefault(query, {})[doc] = grade
    return docs, {q: queries[q] for q in qrels if q in queries}, qrels


def ndcg_at(ranked: list[str], judged: dict[str, int], k: int = 10) -> float:
    dcg = sum(judged.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    best = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / best if best else 0.0


def recall_at(ranked: list[str], judged: dict[str, int], k: int = 10) -> float:
    relevant = {d for d, g in judged.items() if g > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def reference_bm25(docs: Docs, queries: dict[str, str], k1: float = 0.9, b: float = 0.4) -> dict[str, list[str]]:
    terms = {d: Counter(w.lower() for w in WORD.findall(f"{t} {x}")) for d, (t, x) in docs.items()}
    lengths = {d: sum(c.values()) for d, c in terms.items()}
    average = sum(lengths.values()) / len(lengths)
    postings: dict[str, list[str]] = {}
    for d, counts in terms.items():
        for w in counts:
            postings.setdefault(w, []).append(d)
    runs: dict[str, list[str]] = {}
    for q, text in queries.items():
        scores: Counter[str] = Counter()
        for w in dict.fromkeys(w.lower() for w in WORD.findall(text)):
            having = postings.get(w, [])
            if not having:
                continue
            idf = math.log(1 + (len(docs) - len(having) + 0.5) / (len(having) + 0.5))
            for d in having:
                tf = terms[d][w]
                scores[d] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[d] / average))
        runs[q] = [d for d, _ in scores.most_common(10)]
    return runs


def server_runs(
    docs: Docs, queries: dict[str, str], store: str | None, embeddings: str | None, searches: dict[str, dict | None]
) -> tuple[dict[str, dict[str, list[str]]], dict[str, float]]:
    """One server, the collection ingested once, then each of ``searches`` (a label: the search's extra body, such
    as hybrid weights) over every query: the ten documents each found, by label, and the timings."""
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="retrieval-bench-"))
    argv = [str(BIN / "harmony-responses"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--store", store or f"sqlite:{workdir / 'store.sqlite3'}", "--log-level", "warning"]
    if embeddings:
        argv += ["--embeddings", embeddings]
    log = (workdir / "server.log").open("wb")
    ok = False
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: see {workdir / 'server.log'}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become healthy")
            time.sleep(0.1)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
        started = time.monotonic()

        def upload(item: tuple[str, tuple[str, str]]) -> tuple[str, str]:
            doc, (title, text) = item
            body = f"{title}\n\n{text}".encode()
            return client.files.create(file=(f"{doc}.txt", body, "text/plain"), purpose="assistants").id, doc

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            doc_of = dict(pool.map(upload, docs.items()))
        store_id = client.vector_stores.create(name="retrieval-bench").id
        ids = list(doc_of)
        for i in range(0, len(ids), 500):
            batch = client.vector_stores.file_batches.create_and_poll(
                vector_store_id=store_id, file_ids=ids[i : i + 500], poll_interval_ms=200
            )
            if batch.file_counts.completed != len(ids[i : i + 500]):
                raise RuntimeError(f"ingestion: {batch.file_counts}")
        ingested = time.monotonic() - started

        runs: dict[str, dict[str, list[str]]] = {}
        timing = {"ingest_s": ingested}
        for label, extra in searches.items():

            def search(item: tuple[str, str], extra: dict | None = extra) -> tuple[str, list[str], float]:
                q, text = item
                t0 = time.monotonic()
                try:
                    page = client.vector_stores.search(
                        store_id, query=text, max_num_results=CANDIDATES, extra_body=extra
                    )
                except openai.APIStatusError as exc:
                    log_at = f"the server's log: {workdir}/server.log"
                    raise RuntimeError(f"query {q} ({text!r}): {exc} ({log_at})") from None
                ranked = list(dict.fromkeys(doc_of[hit.file_id] for hit in page.data))
                return q, ranked[:10], time.monotonic() - t0

            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                found = list(pool.map(search, queries.items()))
            latencies = sorted(t for _, _, t in found)
            timing[label] = 1000 * latencies[len(latencies) // 2]
            runs[label] = {q: ranked for q, ranked, _ in found}
        client.close()
        ok = True  # the folder (store, server log) is removed; after a failure it stays, to be read
        return runs, timing
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)


def score(runs: dict[str, list[str]], qrels: Qrels) -> tuple[float, float]:
    n = len(qrels)
    return (
        sum(ndcg_at(runs.get(q, []), j) for q, j in qrels.items()) / n,
        sum(recall_at(runs.get(q, []), j) for q, j in qrels.items()) / n,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a BEIR collection's folder, or Cranfield's")
    parser.add_argument("--store", help="the server's --store (default: a SQLite file in a temporary folder)")
    parser.add_argument("--embeddings", metavar="URL", help="also rank with this /v1/embeddings engine (hybrid)")
    args = parser.parse_args()
    folder: Path = args.folder
    if (folder / "corpus.jsonl").exists():
        docs, queries, qrels = load_beir(folder)
        name = folder.resolve().name.lower()
    elif (folder / "cran.all.1400").exists():
        docs, queries, qrels = load_cranfield(folder)
        name = "cranfield"
    else:
        sys.exit(f"{folder}: neither a BEIR folder (corpus.jsonl) nor Cranfield (cran.all.1400)")
    qrels = {q: j for q, j in qrels.items() if q in queries and any(g > 0 for g in j.values())}
    print(f"{name}: {len(docs)} documents, {len(qrels)} judged queries")
    rows = [("reference BM25 (whole documents, k1=0.9 b=0.4)", *score(reference_bm25(docs, queries), qrels), "")]
    servers: list[tuple[str | None, dict[str, dict | None]]] = [(None, {"file_search BM25": None})]
    if args.embeddings:
        # The hybrid server's default (embedding_weight and text_weight 1), then its vectors alone
        # (text_weight 0): what the embedding model brings to the fusion on its own.
        alone = {"ranking_options": {"hybrid_search": {"embedding_weight": 1, "text_weight": 0}}}
        servers.append((args.embeddings, {"file_search hybrid": None, "file_search embeddings only": alone}))
    for embeddings, searches in servers:
        runs, timing = server_runs(docs, queries, args.store, embeddings, searches)
        for label in searches:
            note = f"ingest {timing['ingest_s']:.0f} s, search p50 {timing[label]:.0f} ms"
            rows.append((label, *score(runs[label], qrels), note))
    if name in PUBLISHED:
        rows.append(("published BM25 (BEIR paper, Table 2)", PUBLISHED[name], math.nan, ""))
    if name in ANSERINI_FLAT:
        rows.append(("published BM25 flat (Anserini BEIR regressions)", ANSERINI_FLAT[name], math.nan, ""))
    print(f"{'':50} {'nDCG@10':>8} {'R@10':>6}")
    for label, ndcg, recall, note in rows:
        r = "" if math.isnan(recall) else f"{recall:.3f}"
        print(f"{label:50} {ndcg:8.3f} {r:>6}  {note}")


if __name__ == "__main__":
    main()
