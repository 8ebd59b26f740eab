#!/usr/bin/env python3
"""Sequences (stateful models) with tritonclient, unchanged, over HTTP, gRPC and a gRPC stream
(scripts/sequence-test.sh starts the node: two CPU workers, two hook hosts, the example
accumulator, and "tight": the same model bounded to 2 live sequences per worker and 1 s idle).

    sequence_test.py HTTP_HOST:PORT GRPC_HOST:PORT METRICS_HOST:PORT

Checks: a sequence of 5 requests sees each request's running sum, its protocol switching
mid-sequence (so its requests reach either hook host); 24 sequences interleaved step by step,
spread over both workers, each keeping its own sum; the state hidden from the model's
metadata; a gRPC stream's sequence; and the refusals, by name: a request without a sequence,
one continuing a sequence never started or already ended, a string id, two rows, starts past
max_sequences, and a sequence idle past max_sequence_idle_us; /metrics counts the live ones.
"""
import os
import queue
import sys
import time
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from checks import check, failures, metric_sum, refused

BASE = (os.getpid() % 1000) * 1_000_000  # Ids apart from an earlier run's on a reused node.


def row(v):
    return np.array([[v, 2 * v, -v, 0.5]], np.float32)


def infer(client, module, model, x, **kwargs):
    inp = module.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return client.infer(model, [inp], **kwargs).as_numpy("y")


def expect(values):
    """relu of the running sum of row(v) over `values`."""
    return np.maximum(sum(row(v) for v in values), 0)


def flags(step, steps):
    return {"sequence_start": step == 0, "sequence_end": step == steps - 1}


def five_in_a_row(clients):
    """One sequence of 5, alternating HTTP and gRPC: each answer is its running sum."""
    seq, values = BASE + 1, [1.0, 2.5, -0.5, 4.0, 3.0]
    ok = True
    for step, v in enumerate(values):
        client, module = clients[step % 2]
        y = infer(client, module, "accumulator", row(v), sequence_id=seq, **flags(step, 5))
        ok &= bool(np.allclose(y, expect(values[:step + 1])))
    check(ok, "a sequence of 5 stateful requests over HTTP and gRPC: each its running sum")
    got = refused(lambda: infer(*clients[0], "accumulator", row(1), sequence_id=seq), "is not live")
    check(got == "is not live", f"a request after the sequence's end refused: {got[:90]}")


def interleaved(clients):
    """24 sequences stepped together: ids hash over both workers; no state crosses."""
    ids = [BASE + 100 + k for k in range(24)]
    ok = True
    for step in range(4):
        for k, seq in enumerate(ids):
            client, module = clients[(step + k) % 2]
            y = infer(client, module, "accumulator", row(k + step), sequence_id=seq,
                      **flags(step, 4))
            ok &= bool(np.allclose(y, expect([k + s for s in range(step + 1)])))
    check(ok, "24 sequences interleaved over both workers keep 24 running sums")


def stream(grpc_address):
    """A sequence of 3 over one ModelStreamInfer stream, answered in order."""
    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(grpc_address)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    seq = BASE + 50
    for step, v in enumerate([1.0, 2.0, 3.0]):
        inp = grpcclient.InferInput("x", [1, 4], "FP32")
        inp.set_data_from_numpy(row(v))
        client.async_stream_infer("accumulator", [inp], sequence_id=seq, **flags(step, 3))
    got = [answers.get(timeout=10) for _ in range(3)]
    client.stop_stream()
    ok = all(e is None for _, e in got) and all(
        np.allclose(r.as_numpy("y"), expect([1.0, 2.0, 3.0][:k + 1])) for k, (r, _) in
        enumerate(got))
    check(ok, f"a sequence of 3 over a gRPC stream: running sums in order {[str(e) for _, e in got if e]}")


def refusals(clients):
    for client, module in clients:
        name = module.__name__
        cases = [
            ({}, "needs a non-zero integer sequence_id"),
            ({"sequence_id": BASE + 900}, "is not live"),
            ({"sequence_id": "corr-1", "sequence_start": True}, "not strings"),
        ]
        for kwargs, want in cases:
            got = refused(lambda: infer(client, module, "accumulator", row(1), **kwargs), want)
            check(got == want, f"{name}: {kwargs} refused by name: {got[:100]}")
        # 2 rows, and 17 (past the largest compiled size, 16: refused before any split, so
        # no piece of it starts the sequence).
        for rows in (2, 17):
            x = np.concatenate([row(r) for r in range(rows)])
            got = refused(lambda: infer(client, module, "accumulator", x, sequence_id=BASE + 901,
                                        sequence_start=True), "one row")
            check(got == "one row", f"{name}: {rows} rows in a sequence request refused: {got[:90]}")
        got = refused(lambda: infer(client, module, "accumulator", row(1), sequence_id=BASE + 901),
                      "is not live")
        check(got == "is not live", f"{name}: no piece of those started the sequence: {got[:90]}")
    meta = clients[0][0].get_model_metadata("accumulator")
    check([t["name"] for t in meta["inputs"]] == ["x"] and
          [t["name"] for t in meta["outputs"]] == ["y"],
          f"the state is hidden from the model's metadata: {meta['inputs']} {meta['outputs']}")


def live_sequences(metrics, model, want):
    """ferry_live_sequences for `model` summed over the workers, once it equals `want` (the
    workers publish their status every few milliseconds) or after 5 s."""
    deadline = time.time() + 5
    while True:
        text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10).read().decode()
        live = metric_sum(text, "ferry_live_sequences", model=model)
        if live == want or time.time() > deadline:
            return live
        time.sleep(0.05)


def bound_and_idle(clients, metrics):
    """"tight": 2 live sequences per worker, 4 on the node at most; idle after 1 s."""
    client, module = clients[0]
    served, full = [], 0
    for k in range(12):
        seq = BASE + 500 + k
        got = refused(lambda: infer(client, module, "tight", row(1), sequence_id=seq,
                                    sequence_start=True), "max_sequences")
        if got == "served":
            served.append(seq)
        elif got == "max_sequences":
            full += 1
    check(2 <= len(served) <= 4 and full == 12 - len(served),
          f"past max_sequences a start is refused 429: {len(served)} served, {full} refused")
    live = live_sequences(metrics, "tight", len(served))
    check(live == len(served), f"/metrics counts {len(served)} live sequences (got {live:g})")
    time.sleep(1.6)  # Past max_sequence_idle_us: each live sequence is dropped.
    got = refused(lambda: infer(client, module, "tight", row(1), sequence_id=served[0]),
                  "is not live")
    check(got == "is not live", f"a sequence idle past max_sequence_idle_us is gone: {got[:90]}")
    again = [refused(lambda: infer(client, module, "tight", row(1), sequence_id=seq,
                                   sequence_start=True)) for seq in served]
    check(all(g == "served" for g in again), f"idle sequences freed their places: {again}")


def main():
    http = httpclient.InferenceServerClient(sys.argv[1])
    grpc = grpcclient.InferenceServerClient(sys.argv[2])
    clients = [(http, httpclient), (grpc, grpcclient)]
    five_in_a_row(clients)
    interleaved(clients)
    stream(sys.argv[2])
    refusals(clients)
    bound_and_idle(clients, sys.argv[3])
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all sequence checks passed")


if __name__ == "__main__":
    main()
