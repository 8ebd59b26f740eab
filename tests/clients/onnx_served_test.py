#!/usr/bin/env python3
"""Models imported from ONNX (`ferryctl import`), served by a node: tritonclient over HTTP and
gRPC gets answers equal to onnxruntime's on the same ONNX file within 1e-4 of the output's
scale, and to PyTorch's own answer (scripts/make_onnx_models.py wrote both files). Inputs go
in the graph's own type (INT64 token ids for the text model); an id outside the embedding
table is refused with 400 / INVALID_ARGUMENT naming it, and the node keeps serving.

    onnx_served_test.py HTTP_HOST:PORT GRPC_HOST:PORT EXPORT_DIR MODEL=EXPORTED_NAME...
"""
import os
import sys

import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from checks import check, failures


def relative(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def check_out_of_range(http, grpc, model, x):
    """Token ids outside the table (one too large, negative, far beyond 2^24) are refused
    before they reach a worker; JSON as well as binary."""
    for bad in (1000, -1, 2**40):
        ids = x.copy()
        ids[0, 3] = bad
        inp = httpclient.InferInput("input", list(ids.shape), "INT64")
        inp.set_data_from_numpy(ids, binary_data=bad != 1000)
        try:
            http.infer(model, [inp])
            check(False, f"{model}: HTTP id {bad} refused")
        except Exception as e:  # tritonclient raises InferenceServerException
            check("outside the declared range" in str(e), f"{model}: HTTP id {bad} refused")
        ginp = grpcclient.InferInput("input", list(ids.shape), "INT64")
        ginp.set_data_from_numpy(ids)
        try:
            grpc.infer(model, [ginp])
            check(False, f"{model}: gRPC id {bad} refused")
        except Exception as e:
            check("INVALID_ARGUMENT" in str(e.status()) and "outside the declared range" in str(e),
                  f"{model}: gRPC id {bad} refused as INVALID_ARGUMENT")
    inp = httpclient.InferInput("input", list(x.shape), "INT64")
    inp.set_data_from_numpy(x, binary_data=True)
    got = http.infer(model, [inp]).as_numpy("output")
    check(got is not None and got.shape[0] == x.shape[0], f"{model}: served again after refusals")


def main():
    http = httpclient.InferenceServerClient(sys.argv[1])
    grpc = grpcclient.InferenceServerClient(sys.argv[2])
    for pair in sys.argv[4:]:
        model, exported = pair.split("=")
        directory = os.path.join(sys.argv[3], exported)
        xs = []
        while os.path.exists(os.path.join(directory, f"input_{len(xs)}.npy")):
            xs.append(np.load(os.path.join(directory, f"input_{len(xs)}.npy")))
        x = xs[0]
        torch_answer = np.load(os.path.join(directory, "output.npy"))
        session = ort.InferenceSession(os.path.join(directory, "model.onnx"),
                                       providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        ort_answer = session.run(None, dict(zip(names, xs)))[0]
        check(relative(ort_answer, torch_answer) <= 1e-4, f"{model}: onnxruntime agrees with PyTorch")
        meta = http.get_model_metadata(model)
        check([i["name"] for i in meta["inputs"]] == names and meta["outputs"][0]["name"] == "output",
              f"{model}: metadata names the ONNX graph's inputs and output")
        types = ["INT64" if v.dtype == np.int64 else "FP32" for v in xs]
        check([i["datatype"] for i in meta["inputs"]] == types, f"{model}: input datatypes {types}")
        inps = []
        for name, value, datatype in zip(names, xs, types):
            inps.append(httpclient.InferInput(name, list(value.shape), datatype))
            inps[-1].set_data_from_numpy(value, binary_data=True)
        got = http.infer(model, inps).as_numpy("output")
        err = relative(got, ort_answer)
        check(got.shape == ort_answer.shape and err <= 1e-4,
              f"{model}: HTTP answer equals onnxruntime's (relative error {err:.1e})")
        ginps = []
        for name, value, datatype in zip(names, xs, types):
            ginps.append(grpcclient.InferInput(name, list(value.shape), datatype))
            ginps[-1].set_data_from_numpy(value)
        got = grpc.infer(model, ginps).as_numpy("output")
        err = relative(got, ort_answer)
        check(got.shape == ort_answer.shape and err <= 1e-4,
              f"{model}: gRPC answer equals onnxruntime's (relative error {err:.1e})")
        if len(xs) == 1 and types[0] == "INT64":
            check_out_of_range(http, grpc, model, x)
    if failures:
        print(f"{len(failures)} checks failed")
        sys.exit(1)
    print("imported models served: all checks passed")


if __name__ == "__main__":
    main()
