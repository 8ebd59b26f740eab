#!/usr/bin/env python3
"""Adds OFFSET to every element of the example MLP's fc3.bias in a safetensors file, in place
(the version tests tell versions apart by their logits).

    offset_bias.py WEIGHTS.safetensors OFFSET
"""
import json
import struct
import sys

import numpy as np

path, offset = sys.argv[1], float(sys.argv[2])
with open(path, "r+b") as f:
    data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    start, end = json.loads(data[8:8 + n])["fc3.bias"]["data_offsets"]
    bias = np.frombuffer(data, np.float32, (end - start) // 4, 8 + n + start) + np.float32(offset)
    f.seek(8 + n + start)
    f.write(bias.astype(np.float32).tobytes())
