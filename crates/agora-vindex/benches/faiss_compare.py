"""FAISS on the vectors `cargo bench -p agora-vindex` wrote, for a comparison in the same run.

Reads raw little-endian f32 base and query files, builds IndexFlatIP and IndexHNSWFlat (inner
product, the bench's M / efConstruction) on one thread, times each query alone (one
`index.search` call per query, as the Rust side times one `search` per query) and prints one JSON
object on stdout: build times, p50/p99 per query for the flat index and for HNSW at every
efSearch asked for, recall@10 of HNSW against the flat index, and the cost of a Python call to
FAISS on a one-vector index (the floor included in every FAISS figure); with `--extra`, the time
of adding each of those vectors alone to the HNSW index after the sweep.
"""

import argparse
import json
import time

import faiss
import numpy as np


def percentiles(samples):
    s = np.sort(np.asarray(samples))
    # nearest-rank percentiles, the same definition as the Rust side
    def rank(p):
        return float(s[min(len(s) - 1, int(np.ceil(p / 100.0 * len(s))) - 1)])
    return {"p50_us": rank(50) * 1e6, "p99_us": rank(99) * 1e6}


def time_queries(index, queries, k):
    for q in queries[:20]:
        index.search(q[None, :], k)
    times, ids = [], []
    for q in queries:
        t = time.perf_counter()
        _, found = index.search(q[None, :], k)
        times.append(time.perf_counter() - t)
        ids.append(found[0])
    return times, ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--extra", help="vectors to add one at a time after the sweep")
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--m", type=int, required=True)
    ap.add_argument("--ef-construction", type=int, required=True)
    ap.add_argument("--ef-search", required=True, help="comma-separated efSearch values")
    ap.add_argument("--k", type=int, default=10)
    a = ap.parse_args()

    faiss.omp_set_num_threads(1)
    base = np.fromfile(a.base, dtype="<f4").reshape(-1, a.dim)
    queries = np.fromfile(a.queries, dtype="<f4").reshape(-1, a.dim)

    tiny = faiss.IndexFlatIP(a.dim)
    tiny.add(base[:1])
    overhead, _ = time_queries(tiny, queries, a.k)

    t = time.perf_counter()
    flat = faiss.IndexFlatIP(a.dim)
    flat.add(base)
    flat_build = time.perf_counter() - t
    flat_times, truth = time_queries(flat, queries, a.k)

    t = time.perf_counter()
    hnsw = faiss.IndexHNSWFlat(a.dim, a.m, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = a.ef_construction
    hnsw.add(base)
    hnsw_build = time.perf_counter() - t

    sweep = []
    for ef in [int(x) for x in a.ef_search.split(",")]:
        hnsw.hnsw.efSearch = ef
        times, found = time_queries(hnsw, queries, a.k)
        hits = sum(len(set(f.tolist()) & set(tr.tolist())) for f, tr in zip(found, truth))
        sweep.append({"ef": ef, "recall": hits / (a.k * len(queries)), **percentiles(times)})

    adds = []
    if a.extra:
        extra = np.fromfile(a.extra, dtype="<f4").reshape(-1, a.dim)
        for v in extra:
            t = time.perf_counter()
            hnsw.add(v[None, :])
            adds.append(time.perf_counter() - t)

    print(json.dumps({
        "faiss_version": faiss.__version__,
        "simd": faiss.get_compile_options().strip(),
        "threads": 1,
        "call_overhead": percentiles(overhead),
        "flat": {"build_s": flat_build, **percentiles(flat_times)},
        "hnsw": {"build_s": hnsw_build, "sweep": sweep},
        "add": percentiles(adds) if adds else {},
    }))


if __name__ == "__main__":
    main()
