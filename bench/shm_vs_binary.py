#!/usr/bin/env python3
"""System shared memory against binary HTTP, tritonclient unchanged, same node, same run
(bench/shm_vs_binary.sh starts the node: a relu over rows of 256 Ki floats, 1 MiB a row).

    shm_vs_binary.py HTTP_HOST:PORT [--rounds N] [--requests N] [--json]

For 1 MiB and 16 MiB inputs (the output the same size), alternating the two ways over the
rounds, each request's latency as the client sees it:
  binary: the input in the body (binary_data), the output back binary, read (as_numpy, summed);
  shm:    the input copied into a registered region (set_shared_memory_region: the copy a
          client makes counts), the output written by ferry into another, read (summed).
Every answer is checked (relu of the input). Prints a table, or one JSON object; the ratio
is binary's median latency over shm's (above 1: shared memory is faster).
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

ROW = 256 * 1024  # floats per row: 1 MiB


def binary_once(client, x):
    start = time.perf_counter()
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    out = httpclient.InferRequestedOutput("y", binary_data=True)
    y = client.infer("wide", [inp], outputs=[out]).as_numpy("y")
    total = float(y.sum())
    return time.perf_counter() - start, total


def shm_once(client, x, regions):
    handle_in, handle_out, nbytes = regions
    start = time.perf_counter()
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_shared_memory("bench_in", nbytes)
    out = httpclient.InferRequestedOutput("y")
    out.set_shared_memory("bench_out", nbytes)
    shm.set_shared_memory_region(handle_in, [x])
    client.infer("wide", [inp], outputs=[out])
    y = shm.get_contents_as_numpy(handle_out, np.float32, list(x.shape))
    total = float(y.sum())
    return time.perf_counter() - start, total


def measure(client, rows, rounds, requests):
    nbytes = rows * ROW * 4
    tag = f"/shmbench{os.getpid()}"
    handles = (shm.create_shared_memory_region("bench_in", tag + "_in", nbytes),
               shm.create_shared_memory_region("bench_out", tag + "_out", nbytes))
    client.register_system_shared_memory("bench_in", tag + "_in", nbytes)
    client.register_system_shared_memory("bench_out", tag + "_out", nbytes)
    x = np.random.default_rng(rows).standard_normal((rows, ROW)).astype(np.float32)
    want = float(np.maximum(x, 0).sum())
    times = {"binary": [], "shm": []}
    try:
        for r in range(rounds):
            order = ("binary", "shm") if r % 2 == 0 else ("shm", "binary")
            for way in order:
                for _ in range(requests):
                    seconds, total = (binary_once(client, x) if way == "binary"
                                      else shm_once(client, x, (*handles, nbytes)))
                    if abs(total - want) > 1e-3 * abs(want):
                        sys.exit(f"{way}: wrong answer ({total} != {want})")
                    times[way].append(seconds)
    finally:
        client.unregister_system_shared_memory()
        for h in handles:
            shm.destroy_shared_memory_region(h)
    med = {way: statistics.median(t) * 1e3 for way, t in times.items()}
    return {"mib": rows, "binary_p50_ms": round(med["binary"], 3), "shm_p50_ms": round(med["shm"], 3),
            "ratio": round(med["binary"] / med["shm"], 2), "requests": len(times["shm"])}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    client = httpclient.InferenceServerClient(a.url, connection_timeout=120, network_timeout=120)
    results = [measure(client, rows, a.rounds, a.requests) for rows in (1, 16)]
    if a.json:
        print(json.dumps({"bench": "shm_vs_binary", "results": results}))
    else:
        print(f"{'input':>8} {'binary p50 ms':>14} {'shm p50 ms':>11} {'ratio':>6}")
        for r in results:
            print(f"{r['mib']:>5}MiB {r['binary_p50_ms']:>14} {r['shm_p50_ms']:>11} {r['ratio']:>6}")


if __name__ == "__main__":
    main()
