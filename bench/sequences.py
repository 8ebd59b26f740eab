#!/usr/bin/env python3
"""Server-held sequence state against client-carried state, tritonclient over gRPC, same node,
same run (bench/sequences.sh starts the node: the example accumulator, whose worker keeps each
sequence's running sum, and "carried", the same program without [sequence]).

    sequences.py GRPC_HOST:PORT [--sequences N] [--steps N] [--rounds N] [--json]

Each round runs N sequences for S steps, one request per sequence per step sent at once
(async_infer) and all awaited before the next step, so requests of different sequences can
share batches:
  held:    sequence_id / sequence_start / sequence_end; the client sends only x;
  carried: no sequence; the client sends x and the state it got back last (zeros first).
Every answer is checked (the running sum). The ways alternate over the rounds. Prints each
way's requests per second (median over its rounds) and mean batch size (the statistics
extension: inferences / executions), as a table or one JSON object; the ratio is held's
throughput over carried's.
"""
import argparse
import json
import queue
import statistics
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient


def rows(n, step):
    base = np.arange(n, dtype=np.float32)[:, None]
    return np.concatenate([base + step, base * 0 + 1, -base, base * 0.5], axis=1).astype(np.float32)


def send(client, model, tensors, done, tag, **kwargs):
    inputs = []
    for name, value in tensors:
        inp = grpcclient.InferInput(name, [1, 4], "FP32")
        inp.set_data_from_numpy(value.reshape(1, 4))
        inputs.append(inp)
    client.async_infer(model, inputs, lambda result, error: done.put((tag, result, error)),
                       **kwargs)


def await_all(done, n):
    out = {}
    for _ in range(n):
        tag, result, error = done.get(timeout=60)
        if error is not None:
            raise RuntimeError(str(error))
        out[tag] = result
    return out


def run(client, way, n, steps, base_id):
    """Requests per second of one round; raises on a wrong answer."""
    done = queue.Queue()
    state = np.zeros((n, 4), np.float32)
    total = np.zeros((n, 4), np.float32)
    start = time.perf_counter()
    for step in range(steps):
        x = rows(n, step)
        total += x
        for k in range(n):
            if way == "held":
                send(client, "accumulator", [("x", x[k])], done, k, sequence_id=base_id + k,
                     sequence_start=step == 0, sequence_end=step == steps - 1)
            else:
                send(client, "carried", [("x", x[k]), ("state_in", state[k])], done, k)
        got = await_all(done, n)
        for k in range(n):
            y = got[k].as_numpy("y")[0]
            if not np.allclose(y, np.maximum(total[k], 0), rtol=1e-5, atol=1e-4):
                raise RuntimeError(f"{way}: sequence {k} step {step}: {y} != {total[k]}")
            if way == "carried":
                state[k] = got[k].as_numpy("state_out")[0]
    return n * steps / (time.perf_counter() - start)


def batch_mean(client, model):
    s = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(s.get("inference_count", 0)), int(s.get("execution_count", 0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("grpc")
    ap.add_argument("--sequences", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    client = grpcclient.InferenceServerClient(a.grpc)
    run(client, "held", a.sequences, 2, 10_000_000)  # Warm-up, both ways.
    run(client, "carried", a.sequences, 2, 0)
    before = {m: batch_mean(client, m) for m in ("accumulator", "carried")}
    rates = {"held": [], "carried": []}
    for r in range(a.rounds):
        for way in (("held", "carried") if r % 2 == 0 else ("carried", "held")):
            rates[way].append(run(client, way, a.sequences, a.steps, 20_000_000 + r * 1000))
    batch = {}
    for way, model in (("held", "accumulator"), ("carried", "carried")):
        inferences, executions = (x - y for x, y in zip(batch_mean(client, model), before[model]))
        batch[way] = inferences / executions if executions else 0.0
    result = {
        "sequences": a.sequences, "steps": a.steps, "rounds": a.rounds,
        "requests_per_s": {w: statistics.median(v) for w, v in rates.items()},
        "rounds_requests_per_s": rates,
        "mean_batch": batch,
    }
    result["ratio_held_over_carried"] = (result["requests_per_s"]["held"] /
                                         result["requests_per_s"]["carried"])
    if a.json:
        print(json.dumps(result))
    else:
        for w in ("held", "carried"):
            print(f"{w:8s} {result['requests_per_s'][w]:9.0f} req/s  mean batch {batch[w]:.2f}"
                  f"  rounds {[round(x) for x in rates[w]]}")
        print(f"held / carried: {result['ratio_held_over_carried']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
