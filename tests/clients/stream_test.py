#!/usr/bin/env python3
"""A decoupled pipeline over gRPC ModelStreamInfer with tritonclient, unchanged
(scripts/stream-test.sh starts the node: the example MLP and the row_stream pipeline, which
answers one response per row, examples/hooks/row_stream.c).

    stream_test.py HTTP_HOST:PORT GRPC_HOST:PORT

Checks: N responses per request, in order, each the MLP's answer for its row, then the empty
final response when asked for; requests one after another on one stream; the decoupled model
refused over HTTP and unary gRPC, and with its input in client shared memory; a stream
cancelled mid-request stops the work.
"""
import os
import queue
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from checks import check, failures, refused

RNG = np.random.default_rng(7)


def rows_input(n, client=grpcclient):
    x = RNG.standard_normal((n, 784)).astype(np.float32)
    inp = client.InferInput("input", [n, 784], "FP32")
    inp.set_data_from_numpy(x)
    return x, inp


def final(result):
    p = result.get_response().parameters
    return "triton_final_response" in p and p["triton_final_response"].bool_param


def collect(answers, count, seconds=30):
    """`count` callback results (or errors) from the stream, in arrival order."""
    out = []
    end = time.time() + seconds
    while len(out) < count and time.time() < end:
        try:
            out.append(answers.get(timeout=0.5))
        except queue.Empty:
            pass
    return out


def streamed(g):
    mlp = {}
    answers = queue.Queue()
    g.start_stream(callback=lambda result, error: answers.put((result, error)))
    x, inp = rows_input(5)
    g.async_stream_infer("row_stream", [inp], request_id="a", enable_empty_final_response=True)
    got = collect(answers, 6)
    errors = [e for _, e in got if e is not None]
    check(not errors, f"no errors in the stream: {errors[:1]}")
    check(len(got) == 6, f"5 responses and the final one: {len(got)}")
    if len(got) == 6 and not errors:
        data, last = [r for r, _ in got[:5]], got[5][0]
        check([int(r.as_numpy("row")[0, 0]) for r in data] == list(range(5)), "rows in order")
        check(not any(final(r) for r in data) and final(last), "only the last flagged final")
        check(last.as_numpy("logits") is None, "the final response is empty")
        check(all(r.get_response().id == "a" for r, _ in got), "every response carries the id")
        for i in range(5):
            one = grpcclient.InferInput("input", [1, 784], "FP32")
            one.set_data_from_numpy(x[i:i + 1])
            mlp[i] = g.infer("mlp", [one]).as_numpy("logits")
        check(all(np.allclose(data[i].as_numpy("logits"), mlp[i], atol=1e-5) for i in range(5)),
              "each response is the MLP's answer for its row")
    # Two requests back to back on the stream, without the empty final response: 3 then 2.
    _, first = rows_input(3)
    _, second = rows_input(2)
    g.async_stream_infer("row_stream", [first], request_id="b",
                         outputs=[grpcclient.InferRequestedOutput("row")])
    g.async_stream_infer("row_stream", [second], request_id="c")
    got = collect(answers, 5)
    ids = [r.get_response().id if r is not None else str(e) for r, e in got]
    check(ids == ["b", "b", "b", "c", "c"], f"requests answered in order: {ids}")
    check(len(got) == 5 and got[0][0].as_numpy("logits") is None and
          got[0][0].as_numpy("row") is not None, "only the outputs asked for")
    check(collect(answers, 1, 1) == [], "no empty final unless asked")
    g.stop_stream()


def described(h, g):
    check(h.get_model_config("row_stream")["model_transaction_policy"]["decoupled"] is True,
          "HTTP config: decoupled")
    check(g.get_model_config("row_stream").config.model_transaction_policy.decoupled,
          "gRPC config: decoupled")
    check(h.get_model_config("mlp")["model_transaction_policy"]["decoupled"] is False,
          "the MLP is not decoupled")


def refused_elsewhere(h, g):
    _, inp = rows_input(2, httpclient)
    r = refused(lambda: h.infer("row_stream", [inp]))
    check(r.startswith("400") and "ModelStreamInfer" in r, f"HTTP refuses it: {r[:100]}")
    _, inp = rows_input(2)
    r = refused(lambda: g.infer("row_stream", [inp]))
    check("INVALID_ARGUMENT" in r and "ModelStreamInfer" in r, f"unary gRPC refuses it: {r[:100]}")


def shared_memory_refused(h, g):
    """A decoupled model's tensors cannot be in client shared memory: refused by name over the
    stream and over HTTP, the region untouched (the node has system_shared_memory on)."""
    key = f"/streamtest{os.getpid()}"
    handle = shm.create_shared_memory_region("rows", key, 784 * 4)
    try:
        x = RNG.standard_normal((1, 784)).astype(np.float32)
        shm.set_shared_memory_region(handle, [x])
        h.register_system_shared_memory("rows", key, 784 * 4)
        answers = queue.Queue()
        g.start_stream(callback=lambda result, error: answers.put((result, error)))
        inp = grpcclient.InferInput("input", [1, 784], "FP32")
        inp.set_shared_memory("rows", 784 * 4)
        g.async_stream_infer("row_stream", [inp], request_id="shm")
        got = collect(answers, 1)
        g.stop_stream()
        error = str(got[0][1]) if got and got[0][1] is not None else "no error"
        check("decoupled model's tensors cannot be in shared memory" in error,
              f"a stream's request with its input in shared memory refused: {error[:100]}")
        inp = httpclient.InferInput("input", [1, 784], "FP32")
        inp.set_shared_memory("rows", 784 * 4)
        r = refused(lambda: h.infer("row_stream", [inp]), "cannot be in shared memory")
        check(r == "cannot be in shared memory", f"and over HTTP: {r[:100]}")
        h.unregister_system_shared_memory("rows")
    finally:
        shm.destroy_shared_memory_region(handle)


def mlp_count(h):
    stats = h.get_inference_statistics("mlp")["model_stats"][0]
    return stats["inference_stats"]["success"]["count"]


def cancelled(h, g):
    before = mlp_count(h)
    answers = queue.Queue()
    g.start_stream(callback=lambda result, error: answers.put((result, error)))
    _, inp = rows_input(3000)
    g.async_stream_infer("row_stream", [inp], request_id="long")
    got = collect(answers, 5)
    check(len(got) == 5 and all(e is None for _, e in got),
          f"the long request streams: {[str(e)[:120] for _, e in got if e is not None]}")
    g.stop_stream(cancel_requests=True)
    time.sleep(1.0)
    settled = mlp_count(h)
    time.sleep(1.0)
    after = mlp_count(h)
    check(after == settled, f"no model call after the cancel settled: {settled} then {after}")
    check(after - before < 3000, f"the cancel stopped the run: {after - before} of 3000 rows ran")
    # The node serves the next stream.
    answers = queue.Queue()
    g.start_stream(callback=lambda result, error: answers.put((result, error)))
    _, inp = rows_input(2)
    g.async_stream_infer("row_stream", [inp], request_id="after")
    got = collect(answers, 2)
    check(len(got) == 2 and all(e is None for _, e in got), "a new stream after the cancel")
    g.stop_stream()


def main():
    http_address, grpc_address = sys.argv[1:3]
    h = httpclient.InferenceServerClient(http_address)
    streamed(grpcclient.InferenceServerClient(grpc_address))
    described(h, grpcclient.InferenceServerClient(grpc_address))
    refused_elsewhere(h, grpcclient.InferenceServerClient(grpc_address))
    shared_memory_refused(h, grpcclient.InferenceServerClient(grpc_address))
    cancelled(h, grpcclient.InferenceServerClient(grpc_address))
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
