#!/usr/bin/env python3
"""Writes ferry's example bundles and node file, reproducibly, from a fixed seed.

    scripts/make_examples.py [OUT_DIR]           (default: examples/)
    scripts/make_examples.py --large [OUT_DIR]   also examples/models/mlp-large (134 MB, bf16;
                                                 not committed: the GPU check writes it)

Pure Python (no numpy), so it runs on a fresh machine. Weights are drawn like PyTorch's
default nn.Linear / nn.Conv2d init: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), from
random.Random(SEED), so the same script always writes byte-identical files.
"""
import json
import math
import os
import random
import struct
import sys
from array import array

SEED = 20261130


def safetensors_file(entries, metadata):
    """entries: list of (name, dtype, shape, raw little-endian bytes) in file order."""
    header, offset = {}, 0
    for name, dtype, shape, blob in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)  # Pad so the data buffer starts 8-byte aligned.
    return struct.pack("<Q", len(text)) + text + b"".join(blob for *_, blob in entries)


def safetensors_bytes(tensors):
    """tensors: list of (name, shape, array('f')) in file order, written as F32."""
    entries = []
    for name, shape, data in tensors:
        assert len(data) == math.prod(shape), name
        if sys.byteorder != "little":
            data = array("f", data)
            data.byteswap()
        entries.append((name, "F32", shape, data.tobytes()))
    return safetensors_file(entries, {"format": "pt", "generator": "ferry make_examples.py", "seed": str(SEED)})


def uniform(rng, shape, fan_in):
    bound = 1.0 / math.sqrt(fan_in)
    return array("f", (rng.uniform(-bound, bound) for _ in range(math.prod(shape))))


def dense(rng, name, fan_in, fan_out):
    return [(f"{name}.weight", (fan_out, fan_in), uniform(rng, (fan_out, fan_in), fan_in)),
            (f"{name}.bias", (fan_out,), uniform(rng, (fan_out,), fan_in))]


def conv(rng, name, cin, cout, k):
    fan_in = cin * k * k
    return [(f"{name}.weight", (cout, cin, k, k), uniform(rng, (cout, cin, k, k), fan_in)),
            (f"{name}.bias", (cout,), uniform(rng, (cout,), fan_in))]


MLP_MANIFEST = """\
# A 784-512-512-10 multilayer perceptron (MNIST-sized), written by scripts/make_examples.py.
name = "mlp"
version = 1
precision = "fp32"

[[inputs]]
name = "input"
dtype = "FP32"
shape = [-1, 784]    # -1 marks the batch dimension

[[outputs]]
name = "logits"
dtype = "FP32"
shape = [-1, 10]

[batching]
sizes = [1, 4, 8, 16, 32]

[[program]]
op = "dense"
input = "input"
weight = "fc1.weight"
bias = "fc1.bias"
output = "h1"

[[program]]
op = "relu"
input = "h1"
output = "a1"

[[program]]
op = "dense"
input = "a1"
weight = "fc2.weight"
bias = "fc2.bias"
output = "h2"

[[program]]
op = "relu"
input = "h2"
output = "a2"

[[program]]
op = "dense"
input = "a2"
weight = "fc3.weight"
bias = "fc3.bias"
output = "logits"
"""

CNN_MANIFEST = """\
# A small convolutional classifier on 3x32x32 images, with a 3x64x64 variant sharing the
# same weights (global average pooling makes the head size-independent).
# Written by scripts/make_examples.py.
name = "cnn"
version = 1
precision = "fp32"

[[inputs]]
name = "image"
dtype = "FP32"
shape = [-1, 3, 32, 32]

[[outputs]]
name = "probs"
dtype = "FP32"
shape = [-1, 10]

[batching]
sizes = [1, 2, 4, 8, 16]

[[variants]]
name = "large"
inputs = { image = [-1, 3, 64, 64] }

[[program]]
op = "conv2d"
input = "image"
weight = "conv1.weight"
bias = "conv1.bias"
padding = 1
output = "c1"

[[program]]
op = "relu"
input = "c1"
output = "r1"

[[program]]
op = "maxpool2d"
input = "r1"
kernel = 2
output = "p1"

[[program]]
op = "conv2d"
input = "p1"
weight = "conv2.weight"
bias = "conv2.bias"
padding = 1
output = "c2"

[[program]]
op = "relu"
input = "c2"
output = "r2"

[[program]]
op = "maxpool2d"
input = "r2"
kernel = 2
output = "p2"

[[program]]
op = "conv2d"
input = "p2"
weight = "conv3.weight"
bias = "conv3.bias"
stride = 2
padding = 1
output = "c3"

[[program]]
op = "gelu"
input = "c3"
output = "r3"

[[program]]
op = "global_avgpool"
input = "r3"
output = "pooled"

[[program]]
op = "layernorm"
input = "pooled"
weight = "norm.weight"
bias = "norm.bias"
output = "normed"

[[program]]
op = "dense"
input = "normed"
weight = "head.weight"
bias = "head.bias"
output = "logits"

[[program]]
op = "softmax"
input = "logits"
axis = -1
output = "probs"
"""

NODE_TOML = """\
# An example ferry node: two CPU workers (no GPU needed) serving the example models.
# Validate with: ferryctl validate examples/node.toml

[node]
name = "example"
devices = "cpu:2"
hookhosts = 2
model_repository = "models"   # relative to this file
shm_size = "256MiB"

[node.listen]
http = "127.0.0.1:8000"
grpc = "127.0.0.1:8001"
metrics = "127.0.0.1:8002"

[scheduler]
discipline = "fair"
ema_halflife_seconds = 30.0
coalescing_discount = 0.10
cost_ema_alpha = 0.2
max_queue_depth = 1024
dispatch_timeout_seconds = 30.0
compaction_interval = 0

[scheduler.models.mlp]
weight = 2.0
residency = "pinned"

[scheduler.models.cnn]
weight = 1.0
max_batch_size = 8
residency = "warm"

[gateway]
mode = "least_outstanding"

[cpu]
threads = 0     # per CPU worker; 0 = the cores of its share
pin = true      # each CPU worker on its own cores

[hooks]
sandbox = "strict"
threads = 4
"""


MLP_LARGE_MANIFEST = """\
# Four 4096x4096 layers in bf16 (134 MB of weights): makes a GPU work for its time.
# Written by scripts/make_examples.py --large.
name = "mlp-large"
version = 1
precision = "bf16"

[[inputs]]
name = "input"
dtype = "FP32"
shape = [-1, 4096]

[[outputs]]
name = "output"
dtype = "FP32"
shape = [-1, 4096]

[batching]
sizes = [1, 8, 32, 128, 256]
""" + "".join(f"""
[[program]]
op = "dense"
input = "{'input' if i == 0 else f'a{i}'}"
weight = "fc{i}.weight"
bias = "fc{i}.bias"
output = "{'output' if i == 3 else f'h{i + 1}'}"
""" + ("" if i == 3 else f"""
[[program]]
op = "relu"
input = "h{i + 1}"
output = "a{i + 1}"
""") for i in range(4))


def bf16_uniform_bytes(rng, count):
    """`count` bf16 values with random sign and mantissa and exponent 2^-7 (|v| in
    [1/128, 1/64)), built from random bytes at C speed: no numpy needed for 67M weights."""
    raw = rng.randbytes(2 * count)
    low = raw[0::2].translate(bytes(b & 0x7F for b in range(256)))
    high = raw[1::2].translate(bytes((b & 0x80) | 60 for b in range(256)))
    out = bytearray(2 * count)
    out[0::2] = low
    out[1::2] = high
    return bytes(out)


def mlp_large_safetensors(rng):
    entries = []
    for i in range(4):
        for name, shape in ((f"fc{i}.weight", [4096, 4096]), (f"fc{i}.bias", [4096])):
            entries.append((name, "BF16", shape, bf16_uniform_bytes(rng, math.prod(shape))))
    return safetensors_file(entries, {"generator": "ferry make_examples.py --large", "seed": str(SEED)})


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    args = [a for a in sys.argv[1:] if a != "--large"]
    large = "--large" in sys.argv[1:]
    out = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "examples")
    rng = random.Random(SEED)
    mlp = dense(rng, "fc1", 784, 512) + dense(rng, "fc2", 512, 512) + dense(rng, "fc3", 512, 10)
    cnn = (conv(rng, "conv1", 3, 16, 3) + conv(rng, "conv2", 16, 32, 3) + conv(rng, "conv3", 32, 64, 3)
           + [("norm.weight", (64,), array("f", (1.0 + rng.uniform(-0.1, 0.1) for _ in range(64)))),
              ("norm.bias", (64,), array("f", (rng.uniform(-0.1, 0.1) for _ in range(64))))]
           + dense(rng, "head", 64, 10))
    write(os.path.join(out, "models", "mlp", "manifest.toml"), MLP_MANIFEST)
    write(os.path.join(out, "models", "mlp", "weights.safetensors"), safetensors_bytes(mlp))
    write(os.path.join(out, "models", "cnn", "manifest.toml"), CNN_MANIFEST)
    write(os.path.join(out, "models", "cnn", "weights.safetensors"), safetensors_bytes(cnn))
    write(os.path.join(out, "node.toml"), NODE_TOML)
    if large:
        rng_large = random.Random(SEED + 1)
        write(os.path.join(out, "models", "mlp-large", "manifest.toml"), MLP_LARGE_MANIFEST)
        write(os.path.join(out, "models", "mlp-large", "weights.safetensors"), mlp_large_safetensors(rng_large))


if __name__ == "__main__":
    main()
