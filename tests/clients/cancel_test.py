"""Cancellation as clients do it, against a node whose workers take 1.5 s per batch (the sim
backend): a tritonclient gRPC call cancelled while its request waits in a worker's queue, a
curl request whose client gives up (closes its connection) the same way, and a gRPC client
that closes its channel with 20 calls queued, and a gRPC stream stopped (cancelled) with its
request queued. Every one of those requests must leave the
worker's queue unexecuted: /metrics counts them cancelled at the worker and at the hook hosts,
and the worker executes only the others.

    cancel_test.py HTTP_ADDRESS GRPC_ADDRESS METRICS_ADDRESS
"""
import queue
import subprocess
import sys
import time
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient

from checks import check, failures, metric_sum


def main():
    http, grpc_address, metrics = sys.argv[1:4]
    client = grpcclient.InferenceServerClient(grpc_address)
    done = queue.Queue()

    def send(tag):
        inp = grpcclient.InferInput("input", [1, 784], "FP32")
        inp.set_data_from_numpy(np.zeros((1, 784), np.float32))
        # tritonclient calls back with keywords: callback(result=..., error=...).
        return client.async_infer(
            "mlp", [inp], callback=lambda result, error: done.put((tag, result, error)))

    def behind_two_batches():
        # "running" executes (1.5 s), "next" is decided next: what is sent now waits queued.
        send("running")
        time.sleep(0.2)
        send("next")
        time.sleep(0.2)

    def both_served(round_name):
        for _ in range(2):
            tag, result, error = done.get(timeout=30)
            check(error is None, f"{round_name}: {tag} served")

    # C waits in the queue behind the two until it is cancelled.
    behind_two_batches()
    waiting = send("cancelled")
    time.sleep(0.2)
    waiting.cancel()
    answers = {}
    for _ in range(3):
        tag, result, error = done.get(timeout=30)
        answers[tag] = error
    check(answers["running"] is None and answers["next"] is None, "gRPC: the others are served")
    check(answers["cancelled"] is not None and "CANCELLED" in str(answers["cancelled"].status()),
          "gRPC: the cancelled call ends CANCELLED")

    # curl gives up after 0.4 s on a request queued behind two 1.5 s batches.
    behind_two_batches()
    body = '{"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":[' + \
        ",".join(["0"] * 784) + "]}]}"
    curl = subprocess.run(["curl", "-sS", "-m", "0.4", "-X", "POST", "-d", body,
                           f"http://{http}/v2/models/mlp/infer"], capture_output=True, text=True)
    check(curl.returncode == 28, f"curl timed out as intended (exit {curl.returncode})")
    both_served("HTTP round")

    # A second gRPC client queues 20 calls behind two batches and closes its channel: its
    # connection goes, and every one of its calls is cancelled (the reactor hears it at once).
    behind_two_batches()
    leaving = grpcclient.InferenceServerClient(grpc_address)
    left = queue.Queue()
    for i in range(20):
        inp = grpcclient.InferInput("input", [1, 784], "FP32")
        inp.set_data_from_numpy(np.zeros((1, 784), np.float32))
        leaving.async_infer("mlp", [inp], callback=lambda result, error: left.put(error))
    time.sleep(0.3)
    leaving.close()
    both_served("gRPC round")

    # A stream (ModelStreamInfer) whose client stops it, cancelling, while its request waits
    # behind two batches: the stream's reactor hears the cancel and the request leaves the queue.
    behind_two_batches()
    streamer = grpcclient.InferenceServerClient(grpc_address)
    streamed = queue.Queue()
    streamer.start_stream(callback=lambda result, error: streamed.put(error))
    inp = grpcclient.InferInput("input", [1, 784], "FP32")
    inp.set_data_from_numpy(np.zeros((1, 784), np.float32))
    streamer.async_stream_infer("mlp", [inp], request_id="streamed")
    time.sleep(0.3)
    streamer.stop_stream(cancel_requests=True)
    streamer.close()
    both_served("gRPC stream round")

    # The worker took all 23 out of its queue; it executed only the eight others.
    deadline = time.time() + 10
    while True:
        text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10).read().decode()
        cancelled = metric_sum(text, "ferry_requests_total", model="mlp", outcome="cancelled")
        served = metric_sum(text, "ferry_requests_total", model="mlp", outcome="success")
        if (cancelled >= 23 and served >= 8) or time.time() > deadline:
            break
        time.sleep(0.1)
    check(cancelled == 23, f"the worker counted 23 cancelled (got {cancelled:g})")
    check(served == 8, f"the worker executed the 8 others only (got {served:g})")
    check(metric_sum(text, "ferry_frontend_requests_total", model="mlp", code="CANCELLED") == 23,
          "the hook hosts counted 23 answered CANCELLED")
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all cancellation checks passed")


if __name__ == "__main__":
    main()
