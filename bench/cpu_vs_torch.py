#!/usr/bin/python3
"""CPU execution against PyTorch, same machine, same run:

    /usr/bin/python3 bench/cpu_vs_torch.py [--threads 1,2] [--seconds 0.5] [--json] [--check]

For each thread count, runs build/bench/ferry-cpu-bench (CpuBackend's fast path, called
directly, no Python on its path) and then the same programs in PyTorch CPU eager
(torch.nn.functional, fp32, inference_mode, scripts/make_reference.py's interpreter) with
torch.set_num_threads and OpenBLAS's threads both set to that count. OpenBLAS must be the BLAS
PyTorch calls: threadpoolctl is asked and the run stops otherwise (Debian's python3-torch uses
whatever libblas.so.3 points at; the reference BLAS would make PyTorch look 10x slower).
Convolutions in PyTorch go through its bundled oneDNN (mkldnn), as users run it.

Points: the example MLP at batch 1, 8, 32 and the example CNN at batch 1 and 16, one
request of `batch` rows per call. Target: ferry >= 1.0x PyTorch everywhere, >= 1.5x at batch 1;
--check exits 1 when a point misses. Needs: apt-get install python3-torch python3-threadpoolctl
libopenblas0-pthread.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import tomllib

import torch
import threadpoolctl

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from make_reference import read_safetensors, run  # noqa: E402

POINTS = [("mlp", 1), ("mlp", 8), ("mlp", 32), ("cnn", 1), ("cnn", 16)]


def torch_rows_per_s(model, batch, seconds):
    bundle = os.path.join(ROOT, "examples", "models", model)
    with open(os.path.join(bundle, "manifest.toml"), "rb") as f:
        manifest = tomllib.load(f)
    weights = {k: v.float().contiguous() for k, v in
               read_safetensors(os.path.join(bundle, "weights.safetensors")).items()}
    spec = manifest["inputs"][0]
    x = torch.randn([batch if d == -1 else d for d in spec["shape"]], generator=torch.Generator().manual_seed(1))
    out = manifest["outputs"][0]["name"]
    with torch.inference_mode():
        warm_until = time.perf_counter() + seconds / 5
        while time.perf_counter() < warm_until:
            run(manifest["program"], weights, {spec["name"]: x})[out]
        iterations, begin = 0, time.perf_counter()
        while True:
            run(manifest["program"], weights, {spec["name"]: x})[out]
            iterations += 1
            elapsed = time.perf_counter() - begin
            if elapsed >= seconds:
                return iterations * batch / elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "ferry-cpu-bench"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()

    torch.zeros(4, 4) @ torch.zeros(4, 4)  # Loads the BLAS so threadpoolctl can see it.
    blas = [p for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    if not blas or blas[0]["internal_api"] != "openblas":
        sys.exit(f"PyTorch is not on OpenBLAS here ({blas}); install libopenblas0-pthread")
    results = []
    for threads in [int(t) for t in args.threads.split(",")]:
        out = subprocess.run([args.bench, "--threads", str(threads), "--seconds", str(args.seconds),
                              "--json"], check=True, capture_output=True, text=True, cwd=ROOT).stdout
        ferry = {(r["model"], r["batch"]): r["ferry_rows_per_s"] for r in json.loads(out)["results"]}
        torch.set_num_threads(threads)
        with threadpoolctl.threadpool_limits(limits=threads, user_api="blas"):
            for model, batch in POINTS:
                t = torch_rows_per_s(model, batch, args.seconds)
                f = ferry[(model, batch)]
                results.append({"model": model, "batch": batch, "threads": threads,
                                "ferry_rows_per_s": round(f, 1), "torch_rows_per_s": round(t, 1),
                                "ratio": round(f / t, 3),
                                "target": 1.5 if batch == 1 else 1.0})
    missed = [r for r in results if r["ratio"] < r["target"]]
    report = {"results": results, "torch_version": torch.__version__,
              "torch_blas": f"{blas[0]['internal_api']} {blas[0]['version']} ({blas[0]['architecture']})",
              "machine": f"{os.cpu_count()} CPUs", "missed": len(missed)}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"PyTorch {report['torch_version']} on {report['torch_blas']}")
        print(f"{'model':5s} {'batch':>5s} {'thr':>3s} {'ferry rows/s':>13s} {'torch rows/s':>13s} {'ratio':>6s} target")
        for r in results:
            print(f"{r['model']:5s} {r['batch']:5d} {r['threads']:3d} {r['ferry_rows_per_s']:13.0f} "
                  f"{r['torch_rows_per_s']:13.0f} {r['ratio']:6.2f} >= {r['target']}")
    if args.check and missed:
        sys.exit(f"{len(missed)} point(s) below target")


if __name__ == "__main__":
    main()
