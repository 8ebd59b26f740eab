#!/usr/bin/env python3
"""The example models in PyTorch on the GPU, the baseline for ferry-gpu-bench:

    python3 bench/torch_bench.py [--json]

Builds each example bundle's program with torch.nn.functional (scripts/make_reference.py's
interpreter) on CUDA in the bundle's precision, and times eager execution per compiled batch
size with CUDA events (inputs already on the device, inference_mode).
"""
import json
import os
import sys
import tomllib

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from make_reference import run  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def load_weights(path):
    import struct
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[8 + n + begin:8 + n + end]), dtype=dtypes[info["dtype"]])
        out[name] = t.reshape(info["shape"])
    return out


def main():
    # fp32 against fp32: no TF32 in convolutions or matmuls unless the bundle asks for it.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for model in ("mlp", "cnn", "mlp-large"):
        bundle = os.path.join(ROOT, "examples", "models", model)
        if not os.path.exists(bundle):
            continue
        with open(os.path.join(bundle, "manifest.toml"), "rb") as f:
            manifest = tomllib.load(f)
        dtype = torch.bfloat16 if manifest.get("precision") == "bf16" else torch.float32
        weights = {k: v.to("cuda", dtype) for k, v in load_weights(os.path.join(bundle, "weights.safetensors")).items()}
        for size in manifest["batching"]["sizes"]:
            inputs = {t["name"]: torch.randn([size if d == -1 else d for d in t["shape"]], device="cuda", dtype=dtype)
                      for t in manifest["inputs"]}
            with torch.inference_mode():
                for _ in range(10):
                    run(manifest["program"], weights, dict(inputs))
                torch.cuda.synchronize()
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                iterations = 200
                begin.record()
                for _ in range(iterations):
                    run(manifest["program"], weights, dict(inputs))
                end.record()
                torch.cuda.synchronize()
            us = begin.elapsed_time(end) * 1e3 / iterations
            rows.append({"model": model, "batch": size, "eager_us": us, "rows_per_s": size / (us / 1e6)})
    if "--json" in sys.argv:
        print(json.dumps({"torch": rows, "version": torch.__version__}, indent=2))
    else:
        for r in rows:
            print(f"{r['model']:10s} {r['batch']:6d} {r['eager_us']:10.1f} us {r['rows_per_s']:12.0f} rows/s")


if __name__ == "__main__":
    main()
