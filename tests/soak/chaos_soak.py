"""The chaos soak's load and faults (scripts/soak.sh starts the node and runs this).

Load: client threads send KServe v2 HTTP requests in a loop to every served model (the MLP and
the CNN compared with the PyTorch references in tests/data/reference, the hooked classifier
compared with its first answer) and to the hostile ones (whose answers must be refusals).
Faults: every --interval seconds one of ferryd's children, chosen at random, is killed
(SIGKILL) or stopped for 5 s (SIGSTOP, then SIGCONT).

Reported (one JSON object on stdout): requests answered, wrong answers (a successful answer
that differs from its reference, or a hostile call that succeeded), failed requests and faults,
failures per fault, hangs (a request not answered within --hang seconds), the longest latency,
and for each stop the good answers per second during it against the median second.
Exit 1 when a rule breaks: wrong answers or hangs, failures past --max-failures-per-fault per
fault, less than --min-stop-throughput of the median second's good answers in the seconds a
worker was stopped, no answers at all.

  chaos_soak.py HTTP_ADDRESS CTL_SOCKET FERRYCTL --seconds S [--interval 30] [--threads 4]
"""
import argparse
import json
import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(blob[begin:end], dtype=np.float32).reshape(info["shape"])
    return out


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.answered = 0
        self.wrong = []
        self.failed = 0
        self.failures = {}
        self.hangs = 0
        self.refused_hostile = 0
        self.max_latency = 0.0
        self.per_second = {}  # Good answers by whole second since the start.

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)


def cases():
    """(model, input name, dtype, array, output name, expected or None, hostile)."""
    out = []
    for model, inp, outp, ref in [("mlp", "input", "logits", "mlp-default-b8.safetensors"),
                                  ("cnn", "image", "probs", "cnn-default-b4.safetensors")]:
        r = read_safetensors(os.path.join(ROOT, "tests", "data", "reference", ref))
        out.append((model, inp, "FP32", r["input." + inp], outp, r["output." + outp], False))
    image = np.random.default_rng(7).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    out.append(("cnn_classify", "image", "UINT8", image, "classes", None, False))
    x = np.zeros((1, 784), np.float32)
    for hostile in ("hostile_create", "hostile_open"):
        out.append((hostile, "input", "FP32", x, "logits", None, True))
    return out


def check_answer(case, got, first):
    model, _, _, _, _, want, _ = case
    if want is not None:
        return got.shape == want.shape and float(np.abs(got - want).max()) < 1e-4
    if model not in first:
        first[model] = got
    return got.shape == first[model].shape and np.array_equal(got, first[model])


def client_loop(address, stop, stats, hang_s, first, seed, t0):
    rng = random.Random(seed)
    client = httpclient.InferenceServerClient(address, network_timeout=hang_s,
                                              connection_timeout=hang_s)
    all_cases = cases()
    while not stop.is_set():
        case = rng.choice(all_cases)
        model, inp, dtype, x, outp, _, hostile = case
        tensor = httpclient.InferInput(inp, list(x.shape), dtype)
        tensor.set_data_from_numpy(x, binary_data=rng.random() < 0.5)
        started = time.monotonic()
        try:
            result = client.infer(model, [tensor],
                                  outputs=[httpclient.InferRequestedOutput(outp)])
            got = result.as_numpy(outp)
            if hostile:
                stats.add(wrong=[f"{model}: a hostile call succeeded"])
            elif check_answer(case, got, first):
                with stats.lock:
                    stats.answered += 1
                    second = int(time.monotonic() - t0)
                    stats.per_second[second] = stats.per_second.get(second, 0) + 1
            else:
                stats.add(wrong=[f"{model}: answer differs from its reference"])
        except InferenceServerException as e:
            text = str(e)
            if hostile and "ESCAPED" in text:
                stats.add(wrong=[f"{model}: {text[:100]}"])
            elif hostile and "refused" in text:
                stats.add(refused_hostile=1)
            elif "timed out" in text.lower() and time.monotonic() - started >= hang_s - 1:
                stats.add(hangs=1)
            else:
                with stats.lock:
                    stats.failed += 1
                    key = text.split("\n")[0][:100]
                    stats.failures[key] = stats.failures.get(key, 0) + 1
                client.close()
                client = httpclient.InferenceServerClient(address, network_timeout=hang_s,
                                                          connection_timeout=hang_s)
        except Exception as e:  # A connection reset by a killed hook host.
            with stats.lock:
                stats.failed += 1
                key = type(e).__name__ + ": " + str(e).split("\n")[0][:80]
                stats.failures[key] = stats.failures.get(key, 0) + 1
            client.close()
            client = httpclient.InferenceServerClient(address, network_timeout=hang_s,
                                                      connection_timeout=hang_s)
        latency = time.monotonic() - started
        with stats.lock:
            stats.max_latency = max(stats.max_latency, latency)


def children(ferryctl, socket):
    out = subprocess.run([ferryctl, "--socket", socket, "--json", "status"], capture_output=True,
                         text=True, timeout=10)
    return [c for c in json.loads(out.stdout)["children"] if c.get("pid", 0) > 0]


def chaos_loop(args, stop, faults, rng):
    while not stop.wait(args.interval):
        try:
            child = rng.choice(children(args.ferryctl, args.socket))
        except Exception as e:  # ferryd busy restarting: try at the next tick.
            faults.append({"skipped": str(e)[:80]})
            continue
        action = rng.choice(["kill", "stop"])
        fault = {"t": round(time.monotonic() - args.t0, 1), "kind": child["kind"],
                 "index": child["index"], "action": action}
        try:
            if action == "kill":
                os.kill(child["pid"], signal.SIGKILL)
            else:
                os.kill(child["pid"], signal.SIGSTOP)
                time.sleep(5)
                os.kill(child["pid"], signal.SIGCONT)
        except ProcessLookupError:
            fault["gone"] = True
        faults.append(fault)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("address")
    p.add_argument("socket")
    p.add_argument("ferryctl")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--interval", type=float, default=30)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--hang", type=float, default=30)
    p.add_argument("--max-failures-per-fault", type=float, default=8)
    p.add_argument("--seed", type=int, default=1)
    # Good answers per second while a worker is stopped, against the median second, below
    # which the run fails (0: reported only). A stopped hook host is reported, never judged:
    # the connections it holds wait for it whatever the node does.
    p.add_argument("--min-stop-throughput", type=float, default=0)
    args = p.parse_args()
    args.t0 = time.monotonic()
    stop = threading.Event()
    stats = Stats()
    first = {}
    threads = [threading.Thread(target=client_loop,
                                args=(args.address, stop, stats, args.hang, first, args.seed + i,
                                      args.t0))
               for i in range(args.threads)]
    faults = []
    chaos = threading.Thread(target=chaos_loop, args=(args, stop, faults,
                                                      random.Random(args.seed)))
    for t in threads:
        t.start()
    chaos.start()
    time.sleep(args.seconds)
    stop.set()
    chaos.join()
    for t in threads:
        t.join()
    done = [f for f in faults if "action" in f]
    # Good answers per second while a child was stopped, against the median second.
    rates = sorted(stats.per_second.get(t, 0) for t in range(1, int(args.seconds) - 1))
    median = rates[len(rates) // 2] if rates else 0
    for f in done:
        if f["action"] == "stop":
            window = [stats.per_second.get(int(f["t"]) + d, 0) for d in range(1, 5)]
            f["throughput_vs_median"] = round(sum(window) / 4 / max(median, 1), 2)
    report = {
        "seconds": args.seconds, "threads": args.threads, "answered": stats.answered,
        "wrong": len(stats.wrong), "wrong_examples": stats.wrong[:5],
        "hostile_refused": stats.refused_hostile, "failed": stats.failed,
        "faults": len(done), "failed_per_fault": round(stats.failed / max(len(done), 1), 2),
        "hangs": stats.hangs, "max_latency_s": round(stats.max_latency, 3),
        "median_answers_per_s": median,
        "failures": stats.failures, "fault_log": faults,
    }
    print(json.dumps(report, indent=1))
    broken = []
    if report["wrong"]:
        broken.append("wrong answers")
    if report["hangs"]:
        broken.append("hangs")
    if report["failed_per_fault"] > args.max_failures_per_fault:
        broken.append("more failures per fault than requests in flight")
    stopped_workers = [f["throughput_vs_median"] for f in done
                       if f["action"] == "stop" and f["kind"] == "worker"]
    if stopped_workers and min(stopped_workers) < args.min_stop_throughput:
        broken.append(f"under {args.min_stop_throughput} of the throughput while a worker "
                      "was stopped")
    if stats.answered == 0 or stats.refused_hostile == 0:
        broken.append("no answers")
    if broken:
        print("soak: " + ", ".join(broken), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
