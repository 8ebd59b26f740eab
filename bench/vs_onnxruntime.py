#!/usr/bin/env python3
"""ferry's CPU backend against onnxruntime (CPU), on the same ONNX files, same run:

    build/ort-venv/bin/python bench/vs_onnxruntime.py [--threads 1,2] [--seconds 1] [--json]
        [--models resnet18,mobilenet_v2,encoder128]

The models come from scripts/make_onnx_models.py (PyTorch exports with seeded weights; run
with Debian's /usr/bin/python3). Each is imported with `ferryctl import`; for every thread
count and batch, build/bench/ferry-cpu-bench runs the bundle (CpuBackend called directly, one
request of `batch` rows per call) and onnxruntime runs the ONNX file (intra-op threads = the
same count, one inter-op thread, sequential execution, all graph optimizations), both on the
same seeded input for the same time after a warm-up. max_abs_diff is max |ferry - ort| over
max |ort|: the difference relative to the output's scale. A model ferry cannot import is
listed with the importer's reason and no figures.

Needs a virtual environment with onnxruntime (PyPI):
    /usr/bin/python3 -m venv --system-site-packages build/ort-venv
    build/ort-venv/bin/pip install onnxruntime
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
POINTS = {"resnet18": [1, 8, 32], "mobilenet_v2": [1, 16], "encoder128": [1, 8]}


def make_inputs(session, batch):
    """Seeded inputs for every graph input: normal floats; token ids in [0, 1000); a mask of
    ones with the last quarter of every other row padded."""
    rng = np.random.default_rng(1)
    feed = {}
    for i in session.get_inputs():
        shape = [batch] + i.shape[1:]
        if i.type == "tensor(int64)" and i.name == "mask":
            mask = np.ones(shape, dtype=np.int64)
            mask[1::2, shape[1] * 3 // 4:] = 0
            feed[i.name] = mask
        elif i.type == "tensor(int64)":
            feed[i.name] = rng.integers(0, 1000, shape, dtype=np.int64)
        else:
            feed[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feed


def ort_rows_per_s(path, feed, threads, seconds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    rows = next(iter(feed.values())).shape[0]
    warm_until = time.perf_counter() + seconds / 5
    while time.perf_counter() < warm_until:
        out = session.run(None, feed)[0]
    iterations, begin = 0, time.perf_counter()
    while True:
        out = session.run(None, feed)[0]
        iterations += 1
        elapsed = time.perf_counter() - begin
        if elapsed >= seconds:
            return iterations * rows / elapsed, out


def ferry_rows_per_s(bundle, feed, threads, seconds, work):
    """Every input written raw in its own type, in the graph's order (the bundle's too)."""
    y_file = os.path.join(work, "y.f32")
    inputs = []
    for k, value in enumerate(feed.values()):
        inputs += ["--input", os.path.join(work, f"x{k}.raw")]
        value.tofile(inputs[-1])
    rows = next(iter(feed.values())).shape[0]
    result = subprocess.run(
        [os.path.join(ROOT, "build/bench/ferry-cpu-bench"), "--bundle", bundle, "--batches",
         str(rows), "--threads", str(threads), "--seconds", str(seconds), *inputs,
         "--output", y_file, "--json"], check=True, capture_output=True, text=True, cwd=ROOT)
    rate = json.loads(result.stdout)["results"][0]["ferry_rows_per_s"]
    return rate, np.fromfile(y_file, dtype="<f4")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--models", default=",".join(POINTS), help="a subset of " + ",".join(POINTS))
    args = parser.parse_args()
    points = {m: POINTS[m] for m in args.models.split(",")}
    work = tempfile.mkdtemp(prefix="ferry-vs-ort-")
    models = os.path.join(work, "models")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts/make_onnx_models.py"), models,
                    "--models", ",".join(points)], check=True, capture_output=True)
    results, refused = [], []
    for model, batches in points.items():
        path = os.path.join(models, model, "model.onnx")
        bundle = os.path.join(work, "repo", model)
        imported = subprocess.run(
            [os.path.join(ROOT, "build/ctl/ferryctl"), "import", path, "--out", bundle, "--sizes",
             ",".join(map(str, batches))], capture_output=True, text=True)
        if imported.returncode != 0:
            refused.append({"model": model, "reason": imported.stderr.strip()})
            continue
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        for threads in map(int, args.threads.split(",")):
            for batch in batches:
                feed = make_inputs(session, batch)
                ferry_rate, ferry_out = ferry_rows_per_s(bundle, feed, threads, args.seconds, work)
                ort_rate, ort_out = ort_rows_per_s(path, feed, threads, args.seconds)
                diff = float(np.max(np.abs(ferry_out - ort_out.ravel())) /
                             max(float(np.max(np.abs(ort_out))), 1e-30))
                results.append({"model": model, "batch": batch, "threads": threads,
                                "ferry_rows_per_s": ferry_rate, "ort_rows_per_s": ort_rate,
                                "ratio": ferry_rate / ort_rate, "max_abs_diff": diff})
                if not args.json:
                    print(f"{model:12} batch {batch:3} threads {threads}  ferry {ferry_rate:8.1f}"
                          f"  ort {ort_rate:8.1f} rows/s  ratio {ferry_rate / ort_rate:5.2f}"
                          f"  diff {diff:.1e}", flush=True)
    report = {"onnxruntime": ort.__version__, "results": results, "refused": refused}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for r in refused:
            print(f"{r['model']}: not imported: {r['reason']}")


if __name__ == "__main__":
    sys.exit(main())
