#!/usr/bin/env python3
"""Writes PyTorch reference outputs for the example bundles, the CPU backend's correctness
fixtures:

    /usr/bin/python3 scripts/make_reference.py      (needs PyTorch: apt-get install python3-torch)

For each example model, shape variant and a few compiled batch sizes, it draws fresh inputs
from a fixed seed, runs the bundle's program op by op with torch.nn.functional in float64
(so the reference is more exact than any fp32 executor), and writes
tests/data/reference/<model>-<variant>-b<size>.safetensors holding "input.<name>" and
"output.<name>" (F32). The program is interpreted from manifest.toml and the weights are read
from weights.safetensors, independently of ferry's C++ parsers.
"""
import json
import os
import struct
import sys
import tomllib

import torch
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "data", "reference")
CASES = {"mlp": [1, 8, 32], "cnn": [1, 4]}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + begin:base + end]), dtype=torch.float32)
        tensors[name] = t.reshape(info["shape"]).double()
    return tensors


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        blob = tensors[name].float().contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def run(program, weights, values):
    for op in program:
        kind, x = op["op"], values[op.get("input", (op.get("inputs") or [None])[0])]
        w = weights.get(op.get("weight"))
        b = weights.get(op.get("bias"))
        if kind == "dense":
            y = F.linear(x, w, b)
        elif kind == "relu":
            y = F.relu(x)
        elif kind == "gelu":
            y = F.gelu(x)
        elif kind == "tanh":
            y = torch.tanh(x)
        elif kind == "sigmoid":
            y = torch.sigmoid(x)
        elif kind == "softmax":
            y = F.softmax(x, dim=op.get("axis", -1))
        elif kind == "layernorm":
            y = F.layer_norm(x, (x.shape[-1],), w, b, op.get("eps", 1e-5))
        elif kind == "add":
            y = values[op["inputs"][0]] + values[op["inputs"][1]]
        elif kind == "conv2d":
            y = F.conv2d(x, w, b, stride=pair(op.get("stride", 1)), padding=pair(op.get("padding", 0)))
        elif kind == "maxpool2d":
            k = pair(op["kernel"])
            y = F.max_pool2d(x, k, stride=pair(op.get("stride", k)), padding=pair(op.get("padding", 0)))
        elif kind == "global_avgpool":
            y = F.adaptive_avg_pool2d(x, 1).flatten(1)
        elif kind == "flatten":
            y = x.flatten(1)
        elif kind == "reshape":
            y = x.reshape([x.shape[0]] + list(op["shape"]))
        else:
            sys.exit(f"unknown op {kind}")
        values[op["output"]] = y
    return values


def main():
    os.makedirs(OUT, exist_ok=True)
    generator = torch.Generator().manual_seed(20261130)
    for model, sizes in CASES.items():
        bundle = os.path.join(ROOT, "examples", "models", model)
        with open(os.path.join(bundle, "manifest.toml"), "rb") as f:
            manifest = tomllib.load(f)
        weights = read_safetensors(os.path.join(bundle, "weights.safetensors"))
        variants = [("default", {t["name"]: t["shape"] for t in manifest["inputs"]})]
        for v in manifest.get("variants", []):
            shapes = {t["name"]: t["shape"] for t in manifest["inputs"]}
            shapes.update(v.get("inputs", {}))
            variants.append((v["name"], shapes))
        for variant, shapes in variants:
            for size in sizes:
                inputs = {name: torch.randn([size if d == -1 else d for d in shape],
                                            generator=generator).double()
                          for name, shape in shapes.items()}  # fp32 values, held in fp64
                values = run(manifest["program"], weights, dict(inputs))
                tensors = {f"input.{k}": v for k, v in inputs.items()}
                for out in manifest["outputs"]:
                    tensors[f"output.{out['name']}"] = values[out["name"]]
                path = os.path.join(OUT, f"{model}-{variant}-b{size}.safetensors")
                write_safetensors(path, tensors)
                print("wrote", os.path.relpath(path, ROOT))


if __name__ == "__main__":
    main()
