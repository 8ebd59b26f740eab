#!/usr/bin/env python3
"""The repository extension's load and unload with tritonclient, unchanged, over HTTP and gRPC
(scripts/repository-test.sh starts the node: [frontend] model_control on, [auth] required,
tenant ops an admin, tenant acme not).

    repository_test.py HTTP_HOST:PORT GRPC_HOST:PORT MODEL_REPOSITORY

Triton's semantics: when load returns the model is ready and served (on the same client, its
next call); when unload returns it is not ready; a load of a loaded model is OK.
"""
import http.client
import json
import os
import shutil
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from checks import check, failures, refused

OPS = {"Authorization": "Bearer ops-key"}
OPS_GRPC = {"authorization": "Bearer ops-key"}
ACME = {"Authorization": "Bearer acme-key"}


def infer_http(client, model, rows=1, headers=OPS):
    name = "input" if model.startswith("mlp") else "image"
    shape = [rows, 784] if model.startswith("mlp") else [rows, 3, 32, 32]
    x = np.full(shape, 0.1, np.float32)
    inp = httpclient.InferInput(name, shape, "FP32")
    inp.set_data_from_numpy(x)
    return client.infer(model, [inp], headers=headers)


def infer_grpc(client, model):
    x = np.full((1, 784), 0.1, np.float32)
    inp = grpcclient.InferInput("input", [1, 784], "FP32")
    inp.set_data_from_numpy(x)
    return client.infer(model, [inp], headers=OPS_GRPC, client_timeout=30)


def ready_grpc(client, model):
    """ModelReady; a model the hook host does not know is NOT_FOUND, as in Triton."""
    try:
        return client.is_model_ready(model, headers=OPS_GRPC)
    except InferenceServerException as e:
        if "NOT_FOUND" in str(e.status()):
            return False
        raise


def raw_post(address, path, body):
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", path, body=body, headers={**OPS, "Content-Type": "application/json"})
    r = conn.getresponse()
    text = r.read().decode(errors="replace")
    conn.close()
    return r.status, text


def who_may(h, g):
    check(refused(lambda: h.unload_model("cnn")).startswith("401"), "HTTP: unload without a key 401")
    check(refused(lambda: h.unload_model("cnn", headers=ACME)).startswith("403"),
          "HTTP: unload by a tenant that is not an admin 403")
    check("UNAUTHENTICATED" in refused(lambda: g.load_model("cnn")),
          "gRPC: load without a key UNAUTHENTICATED")
    check("PERMISSION_DENIED" in refused(lambda: g.load_model("cnn", headers={"authorization": "Bearer acme-key"})),
          "gRPC: load by a tenant that is not an admin PERMISSION_DENIED")
    check(h.is_model_ready("cnn", headers=OPS), "nothing changed: the CNN still ready")


def http_unload_load(h, address):
    h.unload_model("cnn", headers=OPS)
    check(not h.is_model_ready("cnn", headers=OPS), "HTTP: after unload, the same client sees it not ready")
    fresh = [httpclient.InferenceServerClient(address) for _ in range(4)]
    check(not any(c.is_model_ready("cnn", headers=OPS) for c in fresh),
          "HTTP: after unload, not ready on any hook host")
    check(refused(lambda: infer_http(h, "cnn")).startswith(("404", "503")), "HTTP: an unloaded model is not served")
    h.load_model("cnn", headers=OPS)
    check(h.is_model_ready("cnn", headers=OPS), "HTTP: after load, the same client sees it ready")
    out = infer_http(h, "cnn").as_numpy("probs")
    check(out is not None and out.shape == (1, 10), "HTTP: after load, the same client's infer is served")
    fresh = [httpclient.InferenceServerClient(address) for _ in range(4)]
    check(all(c.is_model_ready("cnn", headers=OPS) for c in fresh), "HTTP: after load, ready on every hook host")
    h.load_model("cnn", headers=OPS)
    check(h.is_model_ready("cnn", headers=OPS), "HTTP: a load of a loaded model is OK")


def grpc_new_bundle(h, g, repository):
    # A bundle put into the repository while the node runs.
    shutil.copytree(os.path.join(repository, "mlp"), os.path.join(repository, "mlp_new"))
    manifest = os.path.join(repository, "mlp_new", "manifest.toml")
    with open(manifest) as f:
        text = f.read().replace('name = "mlp"', 'name = "mlp_new"', 1)
    with open(manifest, "w") as f:
        f.write(text)
    check(not ready_grpc(g, "mlp_new"), "gRPC: a new bundle is not served before load")
    g.load_model("mlp_new", headers=OPS_GRPC)
    check(ready_grpc(g, "mlp_new"), "gRPC: after load, the same client sees the new bundle ready")
    out = infer_grpc(g, "mlp_new").as_numpy("logits")
    check(out is not None and out.shape == (1, 10), "gRPC: after load, the new bundle is served")
    index = g.get_model_repository_index(headers=OPS_GRPC)
    check("mlp_new" in {m.name for m in index.models}, "gRPC: the index lists it")
    # Triton's config override, where it maps onto the bundle: max_batch_size caps batches
    # (repository-test.sh reads the cap back from ferryctl status).
    h.load_model("mlp", config=json.dumps({"name": "mlp", "max_batch_size": 2}), headers=OPS)
    check(h.is_model_ready("mlp", headers=OPS), "a load of a loaded model with a config override is OK")
    g.unload_model("mlp_new", headers=OPS_GRPC)
    check(not ready_grpc(g, "mlp_new"), "gRPC: after unload, not ready")
    check("NOT_FOUND" in refused(lambda: infer_grpc(g, "mlp_new")) or
          "UNAVAILABLE" in refused(lambda: infer_grpc(g, "mlp_new")), "gRPC: an unloaded model is not served")


def hostile(h, g, address):
    check(refused(lambda: h.load_model("nosuch", headers=OPS)).startswith("404"), "HTTP: load of no bundle 404")
    check("NOT_FOUND" in refused(lambda: g.load_model("nosuch", headers=OPS_GRPC)), "gRPC: load of no bundle NOT_FOUND")
    check(refused(lambda: h.unload_model("nosuch", headers=OPS)).startswith("404"), "HTTP: unload of a model not loaded 404")
    got = refused(lambda: h.load_model("cnn", config=json.dumps({"backend": "onnxruntime"}), headers=OPS))
    check(got.startswith("400") and "backend" in got, f"a config override that does not map is 400 naming it ({got})")
    got = refused(lambda: h.load_model("cnn", config=json.dumps({"max_batch_size": 0}), headers=OPS))
    check(got.startswith("400") and "max_batch_size" in got,
          f"Triton's max_batch_size 0 (no batching) does not map: 400 ({got})")
    got = refused(lambda: h.load_model("cnn", config="{not json", headers=OPS))
    check(got.startswith("400"), f"a config override that is not JSON is 400 ({got})")
    got = refused(lambda: g.load_model("cnn", files={"file:1/model.onnx": b"\x00" * 64}, headers=OPS_GRPC))
    check("INVALID_ARGUMENT" in got and "repository" in got, f"gRPC: files in a load are refused ({got})")
    for path, what in [("/v2/repository/models/../load", "'..' (the repository's parent)"),
                       ("/v2/repository/models/..%2F..%2Fetc/load", "an escaped path"),
                       ("/v2/repository/models/" + "a" * 200 + "/load", "a 200-byte name")]:
        status, text = raw_post(address, path, "")
        check(status in (400, 404), f"load of {what}: {status} {text[:80]}")
    deep = "[" * 2000 + "]" * 2000
    for body, what in [(deep, "2000-deep"), ('{"parameters": ' + deep + "}", "parameters 2000-deep"),
                       ("[]", "not an object"), ('{"parameters": {"config": 7}}', "a config that is not text"),
                       ("x" * 70000, "70 KB")]:
        status, text = raw_post(address, "/v2/repository/models/cnn/load", body)
        check(status == 400, f"a load body {what}: {status} {text[:80]}")
    check(h.is_model_ready("cnn", headers=OPS) and h.is_model_ready("mlp", headers=OPS),
          "after the hostile requests the models are still served")


def main():
    address, grpc_address, repository = sys.argv[1:4]
    h = httpclient.InferenceServerClient(address)
    g = grpcclient.InferenceServerClient(grpc_address)
    who_may(h, g)
    http_unload_load(h, address)
    grpc_new_bundle(h, g, repository)
    hostile(h, g, address)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


main()
