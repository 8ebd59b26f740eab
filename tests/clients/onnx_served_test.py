#!/usr/bin/env python3
"""Models imported from ONNX (`ferryctl import`), served by a node: tritonclient over HTTP and
gRPC gets answers equal to onnxruntime's on the same ONNX file within 1e-4 of the output's
scale, and to PyTorch's own answer (scripts/make_onnx_models.py wrote both files).

    onnx_served_test.py HTTP_HOST:PORT GRPC_HOST:PORT EXPORT_DIR MODEL=EXPORTED_NAME...
"""
import os
import sys

import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def relative(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def main():
    http = httpclient.InferenceServerClient(sys.argv[1])
    grpc = grpcclient.InferenceServerClient(sys.argv[2])
    for pair in sys.argv[4:]:
        model, exported = pair.split("=")
        directory = os.path.join(sys.argv[3], exported)
        x = np.load(os.path.join(directory, "input.npy"))
        torch_answer = np.load(os.path.join(directory, "output.npy"))
        session = ort.InferenceSession(os.path.join(directory, "model.onnx"),
                                       providers=["CPUExecutionProvider"])
        ort_answer = session.run(None, {session.get_inputs()[0].name: x})[0]
        check(relative(ort_answer, torch_answer) <= 1e-4, f"{model}: onnxruntime agrees with PyTorch")
        meta = http.get_model_metadata(model)
        check(meta["inputs"][0]["name"] == "input" and meta["outputs"][0]["name"] == "output",
              f"{model}: metadata names the ONNX graph's input and output")
        inp = httpclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=True)
        got = http.infer(model, [inp]).as_numpy("output")
        err = relative(got, ort_answer)
        check(got.shape == ort_answer.shape and err <= 1e-4,
              f"{model}: HTTP answer equals onnxruntime's (relative error {err:.1e})")
        ginp = grpcclient.InferInput("input", list(x.shape), "FP32")
        ginp.set_data_from_numpy(x)
        got = grpc.infer(model, [ginp]).as_numpy("output")
        err = relative(got, ort_answer)
        check(got.shape == ort_answer.shape and err <= 1e-4,
              f"{model}: gRPC answer equals onnxruntime's (relative error {err:.1e})")
    if failures:
        print(f"{len(failures)} checks failed")
        sys.exit(1)
    print("imported models served: all checks passed")


if __name__ == "__main__":
    main()
