# Triton python-backend model: ferry's example MLP (784-512-512-10) with numpy.
# Dense weights use PyTorch's [out, in] layout: y = x @ W.T + b.
import json
import struct

import numpy as np
import triton_python_backend_utils as pb_utils


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = memoryview(data)[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", (name, meta["dtype"])
        lo, hi = meta["data_offsets"]
        out[name] = np.frombuffer(body[lo:hi], dtype="<f4").reshape(meta["shape"])
    return out


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        path = config["parameters"]["weights"]["string_value"]
        w = read_safetensors(path)
        # Pre-transpose to [in, out] and make contiguous so the hot path is a plain GEMM.
        self.layers = [
            (np.ascontiguousarray(w[f"fc{i}.weight"].T, dtype=np.float32),
             np.ascontiguousarray(w[f"fc{i}.bias"], dtype=np.float32))
            for i in (1, 2, 3)
        ]

    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, "input").as_numpy() for r in requests]
        sizes = [x.shape[0] for x in xs]
        h = np.concatenate(xs, axis=0).astype(np.float32, copy=False)
        last = len(self.layers) - 1
        for i, (wt, b) in enumerate(self.layers):
            h = h @ wt
            h += b
            if i != last:
                np.maximum(h, 0.0, out=h)
        responses = []
        start = 0
        for n in sizes:
            out = pb_utils.Tensor("logits", np.ascontiguousarray(h[start:start + n]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
            start += n
        return responses
