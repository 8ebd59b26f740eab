#!/usr/bin/env python3
"""Writes the reference outputs of the example hook plugin (examples/hooks/image_classify.c),
computed independently with numpy in float64:

    /usr/bin/python3 scripts/make_hook_reference.py     (needs numpy: apt-get install python3-numpy)

tests/data/reference/image_classify.safetensors holds, from a fixed seed:
  image            UINT8 [4, 32, 32, 3]    a batch of interleaved RGB images
  preprocessed     F32   [4, 3, 32, 32]    (image / 255 - mean[c]) / std[c], channels first
  probs            F32   [5, 10]           rows of probabilities (one with a tie)
  top3_scores      F32   [5, 3]            their three largest, descending
  top3_classes     I64   [5, 3]            and their classes (ties: the lower class first)
  logits           F32   [5, 10]
  softmax_top3_scores, softmax_top3_classes: the same after a softmax of the logits
The mean and std are the ones in examples/hooks/cnn_classify.toml.
"""
import json
import os
import struct

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "data", "reference", "image_classify.safetensors")
MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])
DTYPES = {np.dtype(np.uint8): "U8", np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name])
        blob = array.tobytes()
        header[name] = {"dtype": DTYPES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def top3(rows):
    # A stable sort of the negated values: equal values keep the lower class first.
    order = np.argsort(-rows, axis=1, kind="stable")[:, :3]
    return np.take_along_axis(rows, order, axis=1), order.astype(np.int64)


def main():
    rng = np.random.default_rng(2026)
    image = rng.integers(0, 256, size=(4, 32, 32, 3), dtype=np.uint8)
    pre = (image.astype(np.float64) / 255.0 - MEAN) / STD  # [N, H, W, C]
    pre = pre.transpose(0, 3, 1, 2)                         # [N, C, H, W]
    probs = rng.random((5, 10))
    probs[4, 2] = probs[4, 7] = 2.0                         # A tie at the top.
    probs = probs / probs.sum(axis=1, keepdims=True)
    probs = probs.astype(np.float32)
    scores, classes = top3(probs.astype(np.float64))
    logits = (rng.standard_normal((5, 10)) * 3).astype(np.float32)
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    soft = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    soft_scores, soft_classes = top3(soft)
    write_safetensors(OUT, {
        "image": image,
        "preprocessed": pre.astype(np.float32),
        "probs": probs,
        "top3_scores": scores.astype(np.float32),
        "top3_classes": classes,
        "logits": logits,
        "softmax_top3_scores": soft_scores.astype(np.float32),
        "softmax_top3_classes": soft_classes,
    })
    print("wrote", os.path.relpath(OUT, ROOT))


if __name__ == "__main__":
    main()
